// NumPy .npy files (format 1.0/2.0, little-endian, C order): the exchange format of `normgen run`
// and of the golden cases. Values are converted to and from float64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace normgen {

struct HostTensor {
    std::vector<int64_t> shape;
    std::vector<double> data;  // row-major
    int64_t numel() const;
};

// Reads f64, f32, f16, i32 or i64 arrays; throws UserError naming the file on anything else.
HostTensor read_npy(const std::string &path);

enum class NpyType { F64, F32 };
// Writes atomically enough for our use: to PATH.tmp, then renamed, so a failed write leaves nothing.
void write_npy(const std::string &path, const HostTensor &t, NpyType type = NpyType::F64);

std::string shape_text(const std::vector<int64_t> &shape);  // "[5, 37]"

}  // namespace normgen
