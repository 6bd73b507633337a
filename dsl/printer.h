// The canonical text of a NormSpec. print(parse(print(s))) == print(s) for every valid declaration.
#pragma once

#include "dsl/norm_spec.h"

#include <string>

namespace normgen {

std::string print_norm(const NormSpec &spec);
std::string print_expr(const NormSpec &spec, const Node &node);
// Shortest decimal that reads back as the same double ("1e-05", "0.1", "2").
std::string format_number(double v);

}  // namespace normgen
