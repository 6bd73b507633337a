// `normgen describe`: the facts a NormSpec records, as text a person reads.
#pragma once

#include "dsl/norm_spec.h"

#include <string>

namespace normgen {

std::string describe_norm(const NormSpec &spec);

}  // namespace normgen
