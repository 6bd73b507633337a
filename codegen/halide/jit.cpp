#include "codegen/halide/jit.h"

#include "codegen/halide/schedule_gpu.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/storage.h"

#include <cstring>
#include <stdexcept>

namespace normgen::hl {

using namespace Halide;

Target parse_target(const std::string &name) {
    // A trailing -tsan (ThreadSanitizer builds) applies to the aliases too: host-tsan, x86-64-avx2-tsan.
    const std::string tsan = "-tsan";
    if (name.size() > tsan.size() && name.compare(name.size() - tsan.size(), tsan.size(), tsan) == 0)
        return parse_target(name.substr(0, name.size() - tsan.size())).with_feature(Target::TSAN);
    if (name == "host") return get_host_target();
    if (name == "x86-64-avx2") return Target("x86-64-linux-avx-avx2-f16c-fma-sse41");
    // The GPU targets of the generated kernels: host code for any x86-64 (the launch code only).
    if (name == "cuda") return parse_target("x86-64-linux-cuda");
    if (name == "opencl") return parse_target("x86-64-linux-opencl");
    if (!Target::validate_target_string(name))
        throw UserError("unknown target '" + name + "' (use host, x86-64-avx2, host-opencl, host-cuda, cuda, opencl or a Halide target string)");
    Target t(name);
    // CUDA without a capability: the highest Halide 21 knows (its PTX assembles for sm_90).
    if (t.has_feature(Target::CUDA) && t.get_cuda_capability_lower_bound() < 86) t = t.with_feature(Target::CUDACapability86);
    // OpenCL: doubles allowed (a declaration that accumulates in f64 uses them; PoCL has them).
    if (t.has_feature(Target::OpenCL)) t = t.with_feature(Target::CLDoubles);
    return t;
}

bool is_gpu_target(const Target &t) { return t.has_gpu_feature(); }

Isa isa_of(const Target &t) {
    return t.has_feature(Target::AVX512) ? Isa::Avx512 : Isa::Avx2;
}

std::function<int(const std::vector<std::string> &)> with_halide_errors(std::function<int(const std::vector<std::string> &)> command) {
    return [command = std::move(command)](const std::vector<std::string> &args) {
        return halide_errors_as_exceptions([&] { return command(args); });
    };
}

struct JitKernel::Impl {
    NormSpec spec;
    KernelTypes types;
    ScheduleRecord record{ScheduleKind::HalideCpu};
    LoweredPipeline lowered;
    Pipeline pipeline;
    Target target;
    HalfStorage half;
    std::string schedule;
};

JitKernel::JitKernel(const NormSpec &spec, DType dtype, const Target &target, Variant variant, const std::string &schedule_overrides)
    : impl_(std::make_unique<Impl>()) {
    // A Halide error here is a normgen bug (the declaration was already checked).
    halide_errors_as_exceptions([&] { build(spec, dtype, target, variant, schedule_overrides); });
}

void JitKernel::build(const NormSpec &spec, DType dtype, const Target &target, Variant variant, const std::string &schedule_overrides) {
    impl_->spec = spec;
    KernelPlan plan = make_plan(impl_->spec, dtype, variant);
    impl_->types = plan.types;
    impl_->target = target;
    if (is_gpu_target(target)) {
        // A GPU target (host-opencl, host-cuda): the halide-gpu schedule, every stage on the device.
        impl_->record = choose_schedule(plan, ScheduleKind::HalideGpu, isa_of(target), schedule_overrides);
        impl_->half = half_storage_for(target);
        impl_->lowered = lower_to_halide(impl_->spec, plan, impl_->record, impl_->half);
        impl_->schedule = schedule_gpu(impl_->lowered, impl_->spec, plan, impl_->record);
        impl_->schedule += half_storage_text(impl_->half);
        impl_->pipeline = impl_->lowered.pipeline();
        require_device_stages(impl_->pipeline);
        impl_->pipeline.compile_jit(target);
        return;
    }
    impl_->record = choose_schedule(plan, ScheduleKind::HalideCpu, isa_of(target), schedule_overrides);
    // Streaming stores are an ahead-of-time step (LLVM 22 on Halide's bitcode, aot.h): the JIT runs
    // the rest of the record with ordinary stores, and without their alignment requirement, so
    // `verify` checks every shape of its sweep.
    // So is a fixed innermost extent (a kernel for one width, which the registry hands only that
    // width): the JIT keeps the extent dynamic.
    ScheduleRecord lowered_record = impl_->record;
    const bool streaming = lowered_record.flag("streaming_stores");
    const int64_t fixed = lowered_record.get("fixed_inner_extent");
    if (streaming) lowered_record.set("streaming_stores", 0);
    if (fixed) lowered_record.set("fixed_inner_extent", 0);
    impl_->lowered = lower_to_halide(impl_->spec, plan, lowered_record);
    impl_->schedule = schedule_cpu(impl_->lowered, impl_->spec, plan, lowered_record);
    if (streaming) impl_->schedule += "; streaming stores: ahead of time only (normgen compile), ordinary stores here";
    if (fixed) impl_->schedule += "; fixed_inner_extent: ahead of time only, the extent stays dynamic here";
    impl_->pipeline = impl_->lowered.pipeline();
    impl_->pipeline.compile_jit(target);
}

JitKernel::~JitKernel() = default;
const NormSpec &JitKernel::spec() const { return impl_->spec; }
const KernelTypes &JitKernel::types() const { return impl_->types; }
StorageMap JitKernel::storage() const { return StorageMap(impl_->types.storage.begin(), impl_->types.storage.end()); }
std::string JitKernel::schedule_record() const { return impl_->record.to_json().dump(); }
std::string JitKernel::schedule_text() const { return impl_->schedule; }
const ScheduleRecord &JitKernel::schedule() const { return impl_->record; }

namespace {

Buffer<> make_buffer(const NormSpec &spec, const std::vector<AxisId> &dims, const AxisExtents &ext, DType t, HalfStorage half) {
    std::vector<AxisId> atoms = spec.memory_atoms(dims);
    std::vector<int> sizes;
    for (auto it = atoms.rbegin(); it != atoms.rend(); ++it) sizes.push_back((int)ext.extent[*it]);
    return Buffer<>(buffer_type(t, half), sizes);  // (a type as bits: the same bytes in a uint16 buffer)
}

}  // namespace

TensorMap JitKernel::run(const TensorMap &inputs, const Overrides &axis_overrides) const {
    // A GPU target needs its device here: without one, one line ("no CUDA device: ...").
    if (impl_->target.has_feature(Target::CUDA)) require_device(Device::Cuda);
    if (impl_->target.has_feature(Target::OpenCL)) require_device(Device::OpenCl);
    const NormSpec &spec = impl_->spec;
    AxisExtents ext = bind_axes(spec, inputs, axis_overrides);
    const LoweredPipeline &p = impl_->lowered;
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const TensorInfo &t = spec.tensors[i];
        DType d = impl_->types.storage.at(t.name);
        Buffer<> b = make_buffer(spec, t.dims, ext, d, impl_->half);
        std::vector<uint8_t> bytes = encode(inputs.at(t.name).data, d);
        std::memcpy(b.data(), bytes.data(), std::min(bytes.size(), b.size_in_bytes()));
        b.set_host_dirty();  // a GPU kernel copies it to the device
        ImageParam(p.inputs[i]).set(b);
    }
    std::vector<Buffer<>> outs;
    for (size_t k = 0; k < p.outputs.size(); ++k) {
        const OutputInfo &o = spec.outputs[p.output_index[k]];
        Buffer<> b = make_buffer(spec, o.dims, ext, impl_->types.storage.at(o.name), impl_->half);
        std::memset(b.data(), 0xff, b.size_in_bytes());  // NaN in every float format: unwritten elements fail
        b.set_host_dirty();  // (on a GPU the poison goes to the device too)
        outs.push_back(b);
    }
    Realization r(outs);
    halide_errors_as_exceptions([&] {
        impl_->pipeline.realize(r, impl_->target);
        for (Buffer<> &b : outs) b.copy_to_host();  // a GPU kernel's outputs are on the device
    });
    TensorMap result;
    for (size_t k = 0; k < p.outputs.size(); ++k) {
        const OutputInfo &o = spec.outputs[p.output_index[k]];
        HostTensor h;
        h.shape = physical_shape(spec, o.dims, ext);
        h.data = decode((const uint8_t *)outs[k].data(), (size_t)outs[k].number_of_elements(), impl_->types.storage.at(o.name));
        result[o.name] = std::move(h);
    }
    return result;
}

}  // namespace normgen::hl
