#include "runtime/manifest_schema.h"

namespace normgen {

const char *backend_name(Backend b) { return b == Backend::Mlir ? "mlir" : "halide"; }
const char *device_name(Device d) {
    switch (d) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
    case Device::OpenCl: return "opencl";
    }
    return "?";
}
const char *variant_name(Variant v) { return v == Variant::Full ? "full" : "core"; }
const char *isa_name(Isa i) {
    switch (i) {
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Sm90: return "sm_90";
    case Isa::OpenCl: return "opencl";
    }
    return "?";
}

std::optional<Backend> parse_backend(const std::string &s) {
    if (s == "halide") return Backend::Halide;
    if (s == "mlir") return Backend::Mlir;
    return std::nullopt;
}
std::optional<Device> parse_device(const std::string &s) {
    if (s == "cpu") return Device::Cpu;
    if (s == "cuda") return Device::Cuda;
    if (s == "opencl") return Device::OpenCl;
    return std::nullopt;
}
std::optional<Variant> parse_variant(const std::string &s) {
    if (s == "core") return Variant::Core;
    if (s == "full") return Variant::Full;
    return std::nullopt;
}
std::optional<Isa> parse_isa(const std::string &s) {
    if (s == "avx2") return Isa::Avx2;
    if (s == "avx512") return Isa::Avx512;
    if (s == "sm_90") return Isa::Sm90;
    if (s == "opencl") return Isa::OpenCl;
    return std::nullopt;
}

Device device_of(Isa i) { return i == Isa::Sm90 ? Device::Cuda : i == Isa::OpenCl ? Device::OpenCl : Device::Cpu; }

std::string kernel_function_name(const std::string &layer, DType dtype, Backend backend, Isa isa, Variant variant) {
    std::string tag = isa == Isa::Sm90 ? "sm90" : isa_name(isa);
    if (backend == Backend::Mlir) tag = "mlir_" + tag;
    return layer + "__" + dtype_name(dtype) + "__" + tag + "__" + variant_name(variant);
}

}  // namespace normgen
