// random_norm(seed, name): a random well-formed declaration built with the C++ builder: the input
// of the differential compiler fuzzer (normgen-random-norms, scripts/fuzz-compiler.sh) and of the
// gradient checks (tests/runtime/grad_test.cpp). What it draws: random_norm.cpp.
#pragma once

#include "dsl/norm_spec.h"

#include <cstdint>
#include <string>

namespace normgen::test {

NormSpec random_norm(uint64_t seed, const std::string &name);

}  // namespace normgen::test
