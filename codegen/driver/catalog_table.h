// `normgen catalog FILE...`: one row per declaration, the facts a user scans for (reduction
// stages and axes, eps placement, affine terms, outputs), with a float64 reference evaluation on
// fresh random inputs as a smoke check that the declaration computes finite values.
#pragma once

#include <string>
#include <vector>

namespace normgen {

// Returns the markdown table; sets `ok` false if any file fails to load or evaluate.
std::string catalog_table(const std::vector<std::string> &files, bool &ok);

}  // namespace normgen
