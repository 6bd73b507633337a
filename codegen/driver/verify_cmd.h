// `normgen verify`: run a backend's kernels on the verifier's shape sweep and print the table.
#pragma once

#include <string>
#include <vector>

namespace normgen {

int cmd_verify(const std::vector<std::string> &args);

}  // namespace normgen
