// `normgen torch`: a PyTorch extension project for declarations (codegen/driver/torch_cmd.cpp).
#pragma once

#include <string>
#include <vector>

namespace normgen {

extern const char *kTorchUsage;
int cmd_torch(const std::vector<std::string> &args);

}  // namespace normgen
