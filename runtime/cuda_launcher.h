// The CUDA launcher: runs the generated mlir-cuda kernels (cubin or PTX, listed in the manifest with
// "device": "cuda"). The CUDA driver (libcuda.so.1) is loaded at run time with dlopen, so every
// normgen program starts on a machine without a GPU or driver; asking for the GPU there throws
// CudaUnavailable with a plain sentence. Driver errors are reported by their names
// (CUDA_ERROR_INVALID_PTX, ...) through cuGetErrorName.
#pragma once

#include "runtime/errors.h"
#include "runtime/registry.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace normgen {

// No usable GPU here: no driver library, no device, or cuInit failed. what() says which.
struct CudaUnavailable : UserError {
    using UserError::UserError;
};

// What the CUDA launcher needs of a GPU: modules, memory, launches. The CUDA driver is one; the
// mlir-cuda kernels' emulation on the CPU (codegen/mlir/emulate.h) is another, so the same
// launcher (geometry, scratch buffers, the two-kernel form) runs the kernels on both.
class GpuDevice {
public:
    virtual ~GpuDevice() = default;
    // A loaded module and one function of it.
    struct Function {
        void *module = nullptr;
        void *function = nullptr;
    };
    virtual Function load(const std::string &image_path, const std::string &entry) = 0;
    virtual uint64_t alloc(size_t bytes) = 0;
    virtual void free(uint64_t ptr) = 0;
    virtual void upload(uint64_t dst, const void *src, size_t bytes) = 0;
    virtual void download(void *dst, uint64_t src, size_t bytes) = 0;
    virtual void fill(uint64_t dst, uint8_t byte, size_t bytes) = 0;
    // `params`: a pointer to each kernel parameter, as cuLaunchKernel takes them.
    virtual void launch(const Function &f, unsigned grid, unsigned block, std::vector<void *> &params) = 0;
    virtual void synchronize() = 0;
};

class CudaDriver : public GpuDevice {
public:
    // Loads the driver ($NORMGEN_CUDA_DRIVER when set, else libcuda.so.1), initializes it and makes
    // device 0's primary context current. Throws CudaUnavailable.
    CudaDriver();
    ~CudaDriver();
    CudaDriver(const CudaDriver &) = delete;
    CudaDriver &operator=(const CudaDriver &) = delete;

    std::string device_name() const;
    // The driver's context (device 0's primary context), current on this thread.
    void *context() const;

    Function load(const std::string &image_path, const std::string &entry) override;  // cubin or PTX

    uint64_t alloc(size_t bytes) override;
    void free(uint64_t ptr) override;
    void upload(uint64_t dst, const void *src, size_t bytes) override;
    void download(void *dst, uint64_t src, size_t bytes) override;
    void fill(uint64_t dst, uint8_t byte, size_t bytes) override;
    void launch(const Function &f, unsigned grid, unsigned block, std::vector<void *> &params) override;
    void synchronize() override;
    // A device-to-device copy (the bandwidth a norm kernel is measured against), on the default stream.
    void copy(uint64_t dst, uint64_t src, size_t bytes);
    // cuDeviceGetAttribute of device 0 (CU_DEVICE_ATTRIBUTE_*: 16 multiprocessors, 38 L2 bytes).
    int attribute(int code) const;
    // Milliseconds of `launches` back-to-back calls of `launch_all` (one or more launches), timed
    // with CUDA events.
    double time_ms(const std::function<void()> &launch_all, int launches);

    // "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" for a driver result code.
    std::string error_text(int code) const;

private:
    struct Api;
    std::unique_ptr<Api> api_;
    void check(int code, const char *what) const;
};

// Runs one mlir-cuda kernel of the registry on host tensors (dense, the kernel's storage types,
// as for run_kernel): uploads inputs and parameters, poisons the outputs on the device, launches
// one block of block_threads per index of the grid axes, downloads the outputs. `dir` is the folder
// of the manifest (where the cubins are). A two-kernel entry (Registry::Kernel::Cuda::final_entry:
// a backward's parameter gradients) gets its partial-sum buffers allocated here and runs the main
// kernel on min(rows, column_blocks) blocks, then the final reduce; a call is both launches.
class CudaKernelRunner {
public:
    CudaKernelRunner(GpuDevice &driver, const Registry::Kernel &kernel, const std::string &dir);
    // tensors: name -> bytes (inputs read, outputs written); extents: atomic axis name -> extent.
    void run(std::map<std::string, std::vector<uint8_t>> &tensors, const std::map<std::string, int64_t> &extents);
    // Times the kernel on device copies of `tensors` (median of `reps` timings of `launches`
    // launches), ms per launch; on the CUDA driver only (its events).
    double time(std::map<std::string, std::vector<uint8_t>> &tensors, const std::map<std::string, int64_t> &extents, int reps,
                int launches);
    // The verifier's currency: float64 inputs (representable in their storage types) -> float64
    // outputs, every output poisoned on the device first; `axes` overrides a declared extent.
    TensorMap run_f64(const TensorMap &inputs, const Overrides &axes = {});

private:
    GpuDevice &driver_;
    const Registry::Kernel &kernel_;
    GpuDevice::Function fn_, final_fn_;
    unsigned block_ = 256;
    std::vector<std::string> grid_axes_, extent_axes_;
    struct Launch;
    void prepare(Launch &l, std::map<std::string, std::vector<uint8_t>> &tensors, const std::map<std::string, int64_t> &extents);
};

}  // namespace normgen
