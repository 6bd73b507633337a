#include "runtime/storage.h"

#include "runtime/half.h"

#include <cmath>
#include <cstring>

namespace normgen {

size_t dtype_size(DType t) {
    switch (t) {
    case DType::F32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::F64: return 8;
    }
    return 4;
}

// Rounding a double to bf16/f16 through f32 can double-round; go straight from the double by
// rounding to f32 with round-to-odd first (exact for the later rounding to a narrower type).
static float to_float_round_odd(double v) {
    float f = (float)v;
    if (!std::isfinite(v) || (double)f == v) return f;
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if ((b & 1u) == 0) {
        // f was rounded to an even mantissa; step toward v so the result is odd (sticky).
        float toward = std::nextafter(f, v > (double)f ? INFINITY : -INFINITY);
        f = toward;
    }
    return f;
}

double round_to(double v, DType t) {
    switch (t) {
    case DType::F64: return v;
    case DType::F32: return (double)(float)v;
    case DType::BF16: return bf16_to_float(float_to_bf16(to_float_round_odd(v)));
    case DType::F16: return half_to_float(float_to_half(to_float_round_odd(v)));
    }
    return v;
}

std::vector<uint8_t> encode(const std::vector<double> &values, DType t) {
    std::vector<uint8_t> out(values.size() * dtype_size(t));
    for (size_t i = 0; i < values.size(); ++i) {
        uint8_t *p = out.data() + i * dtype_size(t);
        switch (t) {
        case DType::F64: std::memcpy(p, &values[i], 8); break;
        case DType::F32: { float f = (float)values[i]; std::memcpy(p, &f, 4); break; }
        case DType::BF16: { uint16_t h = float_to_bf16(to_float_round_odd(values[i])); std::memcpy(p, &h, 2); break; }
        case DType::F16: { uint16_t h = float_to_half(to_float_round_odd(values[i])); std::memcpy(p, &h, 2); break; }
        }
    }
    return out;
}

std::vector<double> decode(const uint8_t *bytes, size_t count, DType t) {
    std::vector<double> out(count);
    for (size_t i = 0; i < count; ++i) {
        const uint8_t *p = bytes + i * dtype_size(t);
        switch (t) {
        case DType::F64: std::memcpy(&out[i], p, 8); break;
        case DType::F32: { float f; std::memcpy(&f, p, 4); out[i] = f; break; }
        case DType::BF16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = bf16_to_float(h); break; }
        case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = half_to_float(h); break; }
        }
    }
    return out;
}

double ulp_of(double v, DType t) {
    double a = std::fabs(v);
    switch (t) {
    case DType::F64: return std::nextafter(a, INFINITY) - a;
    case DType::F32: { float f = (float)a; return (double)std::nextafter(f, INFINITY) - (double)f; }
    case DType::BF16: {
        int e;
        std::frexp(a == 0 ? 1e-38 : a, &e);
        return std::ldexp(1.0, std::max(e, -125) - 8);  // 8 significant bits
    }
    case DType::F16: {
        int e;
        std::frexp(a == 0 ? 6.1e-5 : a, &e);
        return std::ldexp(1.0, std::max(e, -13) - 11);  // 11 significant bits; subnormal spacing 2^-24
    }
    }
    return 0;
}

}  // namespace normgen
