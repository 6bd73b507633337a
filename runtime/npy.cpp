#include "runtime/npy.h"

#include "runtime/errors.h"
#include "runtime/half.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>

namespace normgen {

int64_t HostTensor::numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

std::string shape_text(const std::vector<int64_t> &shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

HostTensor read_npy(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(path + ": cannot open file");
    char magic[8];
    if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
        throw UserError(path + ": not a NumPy .npy file (bad magic)");
    uint32_t header_len = 0;
    if (magic[6] == 1) {
        unsigned char b[2];
        if (!in.read((char *)b, 2)) throw UserError(path + ": truncated .npy header");
        header_len = b[0] | (b[1] << 8);
    } else if (magic[6] == 2 || magic[6] == 3) {
        unsigned char b[4];
        if (!in.read((char *)b, 4)) throw UserError(path + ": truncated .npy header");
        header_len = b[0] | (b[1] << 8) | (b[2] << 16) | ((uint32_t)b[3] << 24);
    } else {
        throw UserError(path + ": unsupported .npy version " + std::to_string((int)magic[6]));
    }
    if (header_len > (1u << 20)) throw UserError(path + ": .npy header too large");
    std::string header(header_len, '\0');
    if (!in.read(header.data(), header_len)) throw UserError(path + ": truncated .npy header");

    std::smatch m;
    if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'")))
        throw UserError(path + ": .npy header has no 'descr'");
    std::string descr = m[1];
    if (std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*True")))
        throw UserError(path + ": Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
    if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)")))
        throw UserError(path + ": .npy header has no 'shape'");
    HostTensor t;
    std::string dims = m[1];
    std::regex num("-?\\d+");
    for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
        std::string d = it->str();
        if (d[0] == '-' || d.size() > 15) throw UserError(path + ": bad dimension " + d + " in the .npy shape");
        t.shape.push_back(std::stoll(d));
    }

    size_t elem;
    if (descr == "<f8" || descr == "<i8") elem = 8;
    else if (descr == "<f4" || descr == "<i4") elem = 4;
    else if (descr == "<f2") elem = 2;
    else throw UserError(path + ": unsupported dtype '" + descr + "' (expected <f8, <f4, <f2, <i4 or <i8)");
    // The element count must fit in what the file holds (checked before allocating, and per dimension
    // so the product cannot overflow).
    std::streampos data_at = in.tellg();
    in.seekg(0, std::ios::end);
    uint64_t left = (uint64_t)(in.tellg() - data_at) / elem, count = 1;
    in.seekg(data_at);
    for (int64_t s : t.shape) {
        if (s != 0 && count > left / (uint64_t)s) throw UserError(path + ": file ends before the elements of shape " + shape_text(t.shape));
        count *= (uint64_t)s;
    }
    int64_t n = (int64_t)count;
    std::vector<char> raw((size_t)n * elem);
    if (n && !in.read(raw.data(), (std::streamsize)raw.size()))
        throw UserError(path + ": file ends before its " + std::to_string(n) + " elements of shape " + shape_text(t.shape));
    t.data.resize((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
        const char *p = raw.data() + i * elem;
        if (descr == "<f8") { double v; std::memcpy(&v, p, 8); t.data[i] = v; }
        else if (descr == "<f4") { float v; std::memcpy(&v, p, 4); t.data[i] = v; }
        else if (descr == "<f2") { uint16_t v; std::memcpy(&v, p, 2); t.data[i] = half_to_float(v); }
        else if (descr == "<i8") { int64_t v; std::memcpy(&v, p, 8); t.data[i] = (double)v; }
        else { int32_t v; std::memcpy(&v, p, 4); t.data[i] = v; }
    }
    return t;
}

void write_npy(const std::string &path, const HostTensor &t, NpyType type) {
    // Python tuple syntax: (), (5,), (5, 37)
    std::string dims;
    for (size_t i = 0; i < t.shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(t.shape[i]);
    if (t.shape.size() == 1) dims += ",";
    std::string header = std::string("{'descr': '") + (type == NpyType::F64 ? "<f8" : "<f4") +
                         "', 'fortran_order': False, 'shape': (" + dims + "), }";
    // Pad so the data starts on a 64-byte boundary, as NumPy does.
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary);
        if (!out) throw UserError(path + ": cannot write file");
        out.write("\x93NUMPY\x01\x00", 8);
        unsigned char len[2] = {(unsigned char)(header.size() & 0xff), (unsigned char)(header.size() >> 8)};
        out.write((const char *)len, 2);
        out.write(header.data(), (std::streamsize)header.size());
        if (type == NpyType::F64) {
            out.write((const char *)t.data.data(), (std::streamsize)(t.data.size() * sizeof(double)));
        } else {
            std::vector<float> f(t.data.begin(), t.data.end());
            out.write((const char *)f.data(), (std::streamsize)(f.size() * sizeof(float)));
        }
        if (!out) {
            std::remove(tmp.c_str());
            throw UserError(path + ": write failed");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw UserError(path + ": cannot write file");
    }
}

}  // namespace normgen
