#include "runtime/cuda_launcher.h"

#include "runtime/quantile.h"
#include "runtime/storage.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <iterator>
#include <sstream>

namespace normgen {

namespace {

// The few driver API types used here (cuda.h is not needed to build normgen).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using Handle = void *;

}  // namespace

struct CudaDriver::Api {
    void *lib = nullptr;
    CUresult (*cuInit)(unsigned) = nullptr;
    CUresult (*cuDeviceGetCount)(int *) = nullptr;
    CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
    CUresult (*cuDeviceGetName)(char *, int, CUdevice) = nullptr;
    CUresult (*cuDevicePrimaryCtxRetain)(Handle *, CUdevice) = nullptr;
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
    CUresult (*cuCtxSetCurrent)(Handle) = nullptr;
    CUresult (*cuCtxSynchronize)() = nullptr;
    CUresult (*cuModuleLoadData)(Handle *, const void *) = nullptr;
    CUresult (*cuModuleGetFunction)(Handle *, Handle, const char *) = nullptr;
    CUresult (*cuModuleUnload)(Handle) = nullptr;
    CUresult (*cuLaunchKernel)(Handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Handle, void **, void **) = nullptr;
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
    CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice) = nullptr;
    CUresult (*cuEventCreate)(Handle *, unsigned) = nullptr;
    CUresult (*cuEventRecord)(Handle, Handle) = nullptr;
    CUresult (*cuEventSynchronize)(Handle) = nullptr;
    CUresult (*cuEventElapsedTime)(float *, Handle, Handle) = nullptr;
    CUresult (*cuEventDestroy)(Handle) = nullptr;
    CUresult (*cuGetErrorName)(CUresult, const char **) = nullptr;
    CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;
    CUdevice device = 0;
    Handle context = nullptr;
    std::vector<Handle> modules;
};

CudaDriver::CudaDriver() : api_(std::make_unique<Api>()) {
    const char *env = std::getenv("NORMGEN_CUDA_DRIVER");
    std::string name = env && *env ? env : "libcuda.so.1";
    api_->lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!api_->lib)
        throw CudaUnavailable("no CUDA device: cannot load the CUDA driver " + name + " (" + dlerror() +
                              "); CUDA kernels need an NVIDIA GPU and its driver");
    auto sym = [&](auto &fn, const char *s) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api_->lib, s));
        if (!fn) throw CudaUnavailable("no CUDA device: the CUDA driver " + name + " lacks " + s + " (too old?)");
    };
    sym(api_->cuInit, "cuInit");
    sym(api_->cuGetErrorName, "cuGetErrorName");
    sym(api_->cuGetErrorString, "cuGetErrorString");
    sym(api_->cuDeviceGetCount, "cuDeviceGetCount");
    sym(api_->cuDeviceGet, "cuDeviceGet");
    sym(api_->cuDeviceGetName, "cuDeviceGetName");
    sym(api_->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    sym(api_->cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    sym(api_->cuCtxSetCurrent, "cuCtxSetCurrent");
    sym(api_->cuCtxSynchronize, "cuCtxSynchronize");
    sym(api_->cuModuleLoadData, "cuModuleLoadData");
    sym(api_->cuModuleGetFunction, "cuModuleGetFunction");
    sym(api_->cuModuleUnload, "cuModuleUnload");
    sym(api_->cuLaunchKernel, "cuLaunchKernel");
    sym(api_->cuMemAlloc, "cuMemAlloc_v2");
    sym(api_->cuMemFree, "cuMemFree_v2");
    sym(api_->cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    sym(api_->cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    sym(api_->cuMemsetD8, "cuMemsetD8_v2");
    sym(api_->cuMemcpyDtoD, "cuMemcpyDtoD_v2");
    sym(api_->cuDeviceGetAttribute, "cuDeviceGetAttribute");
    sym(api_->cuEventCreate, "cuEventCreate");
    sym(api_->cuEventRecord, "cuEventRecord");
    sym(api_->cuEventSynchronize, "cuEventSynchronize");
    sym(api_->cuEventElapsedTime, "cuEventElapsedTime");
    sym(api_->cuEventDestroy, "cuEventDestroy_v2");
    if (CUresult r = api_->cuInit(0)) throw CudaUnavailable("no CUDA device: the CUDA driver did not initialize: " + error_text(r));
    int count = 0;
    if (CUresult r = api_->cuDeviceGetCount(&count)) throw CudaUnavailable("no CUDA device: cannot count CUDA devices: " + error_text(r));
    if (count == 0) throw CudaUnavailable("no CUDA device: the CUDA driver sees none");
    check(api_->cuDeviceGet(&api_->device, 0), "cuDeviceGet");
    check(api_->cuDevicePrimaryCtxRetain(&api_->context, api_->device), "cuDevicePrimaryCtxRetain");
    check(api_->cuCtxSetCurrent(api_->context), "cuCtxSetCurrent");
}

CudaDriver::~CudaDriver() {
    if (!api_ || !api_->lib) return;
    for (Handle m : api_->modules) api_->cuModuleUnload(m);
    if (api_->context) api_->cuDevicePrimaryCtxRelease(api_->device);
    dlclose(api_->lib);
}

std::string CudaDriver::error_text(int code) const {
    const char *name = nullptr, *text = nullptr;
    if (api_->cuGetErrorName) api_->cuGetErrorName(code, &name);
    if (api_->cuGetErrorString) api_->cuGetErrorString(code, &text);
    std::string s = name ? name : "CUDA error " + std::to_string(code);
    if (text) s += std::string(" (") + text + ")";
    return s;
}

void CudaDriver::check(int code, const char *what) const {
    if (code) throw std::runtime_error(std::string(what) + " failed: " + error_text(code));
}

void *CudaDriver::context() const { return api_->context; }

std::string CudaDriver::device_name() const {
    char buf[256] = {};
    check(api_->cuDeviceGetName(buf, sizeof buf, api_->device), "cuDeviceGetName");
    return buf;
}

CudaDriver::Function CudaDriver::load(const std::string &path, const std::string &entry) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError("cannot read the CUDA kernel image '" + path + "'");
    std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    image.push_back('\0');  // PTX is loaded as a NUL-terminated string; a cubin ignores the byte
    Function f;
    check(api_->cuModuleLoadData(&f.module, image.data()), ("cuModuleLoadData(" + path + ")").c_str());
    api_->modules.push_back(f.module);
    check(api_->cuModuleGetFunction(&f.function, f.module, entry.c_str()), ("cuModuleGetFunction(" + entry + ")").c_str());
    return f;
}

uint64_t CudaDriver::alloc(size_t bytes) {
    CUdeviceptr p = 0;
    check(api_->cuMemAlloc(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc");
    return p;
}
void CudaDriver::free(uint64_t p) { api_->cuMemFree(p); }
void CudaDriver::upload(uint64_t dst, const void *src, size_t n) { check(api_->cuMemcpyHtoD(dst, src, n), "cuMemcpyHtoD"); }
void CudaDriver::download(void *dst, uint64_t src, size_t n) { check(api_->cuMemcpyDtoH(dst, src, n), "cuMemcpyDtoH"); }
void CudaDriver::fill(uint64_t dst, uint8_t byte, size_t n) { check(api_->cuMemsetD8(dst, byte, n), "cuMemsetD8"); }
void CudaDriver::copy(uint64_t dst, uint64_t src, size_t n) { check(api_->cuMemcpyDtoD(dst, src, n), "cuMemcpyDtoD"); }
int CudaDriver::attribute(int code) const {
    int v = 0;
    check(api_->cuDeviceGetAttribute(&v, code, api_->device), "cuDeviceGetAttribute");
    return v;
}
void CudaDriver::synchronize() { check(api_->cuCtxSynchronize(), "cuCtxSynchronize"); }

void CudaDriver::launch(const Function &f, unsigned grid, unsigned block, std::vector<void *> &params) {
    check(api_->cuLaunchKernel(f.function, grid, 1, 1, block, 1, 1, 0, nullptr, params.data(), nullptr), "cuLaunchKernel");
}

double CudaDriver::time_ms(const std::function<void()> &launch_all, int launches) {
    Handle start = nullptr, stop = nullptr;
    check(api_->cuEventCreate(&start, 0), "cuEventCreate");
    check(api_->cuEventCreate(&stop, 0), "cuEventCreate");
    check(api_->cuEventRecord(start, nullptr), "cuEventRecord");
    for (int i = 0; i < launches; ++i) launch_all();
    check(api_->cuEventRecord(stop, nullptr), "cuEventRecord");
    check(api_->cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    check(api_->cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    api_->cuEventDestroy(start);
    api_->cuEventDestroy(stop);
    return ms / launches;
}

// ---- one kernel -----------------------------------------------------------------------------------

struct CudaKernelRunner::Launch {
    std::vector<uint64_t> device;      // one buffer per argument
    std::vector<int64_t> words;        // the parameter values (memref fields, extents)
    std::vector<void *> params;        // pointers into `words`
    unsigned grid = 1;
    unsigned final_grid = 0;           // the two-kernel form: the final reduce's blocks
    GpuDevice *driver = nullptr;
    ~Launch() {
        for (uint64_t p : device) driver->free(p);
    }
};

CudaKernelRunner::CudaKernelRunner(GpuDevice &driver, const Registry::Kernel &kernel, const std::string &dir)
    : driver_(driver), kernel_(kernel) {
    if (kernel.device != Device::Cuda) throw std::logic_error("CudaKernelRunner: '" + kernel.function + "' is not a CUDA kernel");
    fn_ = driver.load(dir + "/" + kernel.cuda.image, kernel.cuda.entry);
    if (!kernel.cuda.final_entry.empty()) final_fn_ = driver.load(dir + "/" + kernel.cuda.image, kernel.cuda.final_entry);
    block_ = (unsigned)kernel.cuda.block_threads;
    grid_axes_ = kernel.cuda.grid_axes;
    extent_axes_ = kernel.cuda.extent_axes;
}

void CudaKernelRunner::prepare(Launch &l, std::map<std::string, std::vector<uint8_t>> &tensors, const std::map<std::string, int64_t> &extents) {
    l.driver = &driver_;
    auto extent = [&](const std::string &axis) {
        auto it = extents.find(axis);
        if (it == extents.end()) throw UserError("kernel '" + kernel_.function + "': no extent given for axis '" + axis + "'");
        return it->second;
    };
    // Each memref<?xT> argument is (allocated, aligned, offset, size, stride); then the extents.
    for (const KernelArg &a : kernel_.args) {
        auto t = tensors.find(a.name);
        if (t == tensors.end()) throw UserError("kernel '" + kernel_.function + "': tensor '" + a.name + "' not given");
        int64_t n = 1;
        for (const std::string &d : a.buffer_dims) n *= extent(d);
        size_t bytes = (size_t)n * dtype_size(a.dtype);
        if (t->second.size() != bytes)
            throw UserError("kernel '" + kernel_.function + "': tensor '" + a.name + "' has " + std::to_string(t->second.size()) +
                            " bytes, expected " + std::to_string(bytes));
        uint64_t p = driver_.alloc(bytes);
        l.device.push_back(p);
        if (a.role == KernelArg::Output) driver_.fill(p, 0xff, bytes);  // NaN: unwritten elements fail
        else driver_.upload(p, t->second.data(), bytes);
        for (int64_t w : {(int64_t)p, (int64_t)p, (int64_t)0, n, (int64_t)1}) l.words.push_back(w);
    }
    // The two-kernel form: one partial-sum buffer per column output, [blocks, its axes] in the
    // accumulation type (the main kernel zeroes its own rows of it), and one per statistic held per
    // block, after the memrefs; the block count last.
    int64_t blocks = 0, widest = 1;
    if (!kernel_.cuda.final_entry.empty()) {
        int64_t rows = 1;
        for (const std::string &d : kernel_.cuda.row_axes) rows *= extent(d);
        blocks = std::min<int64_t>(rows, kernel_.cuda.column_blocks);
        for (const auto &sc : kernel_.cuda.scratch) {
            int64_t n = 1;
            for (const std::string &d : sc.axes) n *= extent(d);
            if (sc.statistic.empty()) widest = std::max(widest, n);  // the final kernel's threads
            const int64_t elems = std::max<int64_t>(1, blocks * n);
            uint64_t p = driver_.alloc((size_t)elems * dtype_size(sc.dtype));
            l.device.push_back(p);
            for (int64_t w : {(int64_t)p, (int64_t)p, (int64_t)0, elems, (int64_t)1}) l.words.push_back(w);
        }
    }
    for (const std::string &ax : extent_axes_) l.words.push_back(extent(ax));
    if (!kernel_.cuda.final_entry.empty()) {
        l.words.push_back(blocks);
        l.grid = (unsigned)blocks;
        l.final_grid = (unsigned)((widest + block_ - 1) / block_);
    }
    for (int64_t &w : l.words) l.params.push_back(&w);
    if (!kernel_.cuda.final_entry.empty()) return;
    int64_t grid = 1;
    for (const std::string &ax : grid_axes_) grid *= extent(ax);
    if (grid > 0x7fffffff) throw UserError("kernel '" + kernel_.function + "': " + std::to_string(grid) + " blocks exceed the grid limit");
    l.grid = (unsigned)grid;
}

void CudaKernelRunner::run(std::map<std::string, std::vector<uint8_t>> &tensors, const std::map<std::string, int64_t> &extents) {
    Launch l;
    prepare(l, tensors, extents);
    if (l.grid) driver_.launch(fn_, l.grid, block_, l.params);
    if (l.final_grid) driver_.launch(final_fn_, l.final_grid, block_, l.params);
    driver_.synchronize();
    for (size_t i = 0; i < kernel_.args.size(); ++i)
        if (kernel_.args[i].role == KernelArg::Output) {
            std::vector<uint8_t> &out = tensors[kernel_.args[i].name];
            driver_.download(out.data(), l.device[i], out.size());
        }
}

double CudaKernelRunner::time(std::map<std::string, std::vector<uint8_t>> &tensors, const std::map<std::string, int64_t> &extents, int reps,
                              int launches) {
    auto *cuda = dynamic_cast<CudaDriver *>(&driver_);
    if (!cuda) throw std::logic_error("CudaKernelRunner::time: timing needs the CUDA driver");
    Launch l;
    prepare(l, tensors, extents);
    auto call = [&] {
        if (l.grid) driver_.launch(fn_, l.grid, block_, l.params);
        if (l.final_grid) driver_.launch(final_fn_, l.final_grid, block_, l.params);
    };
    call();  // warm-up
    driver_.synchronize();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(cuda->time_ms(call, launches));
    return median(t);
}

TensorMap CudaKernelRunner::run_f64(const TensorMap &inputs, const Overrides &axes) {
    const NormSpec &spec = *kernel_.spec;
    const AxisExtents ext = bind_axes(spec, inputs, axes);
    std::map<std::string, std::vector<uint8_t>> t;
    for (const KernelArg &a : kernel_.args) {
        if (a.role != KernelArg::Output) {
            t[a.name] = encode(inputs.at(a.name).data, a.dtype);
        } else {
            int64_t n = 1;
            for (AxisId ax : a.buffer_axes) n *= ext.extent[ax];
            t[a.name].assign((size_t)n * dtype_size(a.dtype), 0xff);
        }
    }
    std::map<std::string, int64_t> extents;
    for (size_t a = 0; a < spec.axes.size(); ++a)
        if (!spec.axes[a].is_split()) extents[spec.axes[a].name] = ext.extent[a];
    run(t, extents);
    TensorMap out;
    for (const KernelArg &a : kernel_.args) {
        if (a.role != KernelArg::Output) continue;
        HostTensor h;
        h.shape = physical_shape(spec, spec.find_output(a.name)->dims, ext);
        h.data = decode(t[a.name].data(), t[a.name].size() / dtype_size(a.dtype), a.dtype);
        out[a.name] = std::move(h);
    }
    return out;
}

}  // namespace normgen
