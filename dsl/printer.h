// The canonical text of a NormSpec. print(parse(print(s))) == print(s) for every valid declaration.
#pragma once

#include "dsl/norm_spec.h"

#include <cstdint>
#include <string>

namespace normgen {

std::string print_norm(const NormSpec &spec);
std::string print_expr(const NormSpec &spec, const Node &node);
// Shortest decimal that reads back as the same double ("1e-05", "0.1", "2").
std::string format_number(double v);
// FNV-1a (64 bits) of the canonical text: the identity `normgen grad` stamps and tuning records carry.
uint64_t canonical_hash(const NormSpec &spec);
uint64_t text_hash(const std::string &text);

}  // namespace normgen
