#include "runtime/device.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace normgen {

namespace {

// A driver found usable stays loaded with its symbols global: Halide's runtime looks its entry
// points up in the process before it tries to load the library by its unversioned name
// (libcuda.so, libOpenCL.so), which a machine with only the driver's libcuda.so.1 lacks.

// The OpenCL ICD loader and the devices its platforms list (any type: PoCL's is a CPU device).
std::string opencl_unavailable() {
    void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return std::string("no OpenCL device: cannot load the OpenCL ICD loader libOpenCL.so.1 (") + dlerror() + ")";
    using GetPlatforms = int32_t (*)(uint32_t, void **, uint32_t *);
    using GetDevices = int32_t (*)(void *, uint64_t, uint32_t, void **, uint32_t *);
    auto platforms = reinterpret_cast<GetPlatforms>(dlsym(lib, "clGetPlatformIDs"));
    auto devices = reinterpret_cast<GetDevices>(dlsym(lib, "clGetDeviceIDs"));
    std::string why;
    uint32_t np = 0;
    if (!platforms || !devices) {
        why = "no OpenCL device: the OpenCL ICD loader lacks clGetPlatformIDs";
    } else if (platforms(0, nullptr, &np) != 0 || np == 0) {
        why = "no OpenCL device: no OpenCL platform is installed (an ICD such as Debian's pocl-opencl-icd)";
    } else {
        std::vector<void *> ids(np);
        platforms(np, ids.data(), nullptr);
        uint32_t total = 0;
        for (void *p : ids) {
            uint32_t nd = 0;
            if (devices(p, 0xFFFFFFFFull /* CL_DEVICE_TYPE_ALL */, 0, nullptr, &nd) == 0) total += nd;
        }
        if (total == 0) why = "no OpenCL device: " + std::to_string(np) + " OpenCL platform(s), no device";
    }
    if (!why.empty()) dlclose(lib);
    return why;
}

// The CUDA driver ($NORMGEN_CUDA_DRIVER, else libcuda.so.1), initialized, and its devices.
std::string cuda_unavailable() {
    const char *env = std::getenv("NORMGEN_CUDA_DRIVER");
    const std::string name = env && *env ? env : "libcuda.so.1";
    void *lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return "no CUDA device: cannot load the CUDA driver " + name + " (" + dlerror() + "); CUDA kernels need an NVIDIA GPU and its driver";
    using Init = int (*)(unsigned);
    using Count = int (*)(int *);
    auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
    std::string why;
    int n = 0;
    if (!init || !count) why = "no CUDA device: the CUDA driver " + name + " lacks cuInit";
    else if (int r = init(0)) why = "no CUDA device: the CUDA driver did not initialize (error " + std::to_string(r) + ")";
    else if (count(&n) != 0 || n == 0) why = "no CUDA device: the CUDA driver sees none";
    if (!why.empty()) dlclose(lib);
    return why;
}

}  // namespace

std::string device_unavailable(Device d) {
    static std::mutex mu;
    static std::string cuda, opencl;
    static bool cuda_known = false, opencl_known = false;
    std::lock_guard<std::mutex> lock(mu);
    switch (d) {
    case Device::Cpu: return "";
    case Device::Cuda:
        if (!cuda_known) cuda = cuda_unavailable(), cuda_known = true;
        return cuda;
    case Device::OpenCl:
        if (!opencl_known) opencl = opencl_unavailable(), opencl_known = true;
        return opencl;
    }
    return "no such device";
}

void require_device(Device d) {
    const std::string why = device_unavailable(d);
    if (!why.empty()) throw DeviceUnavailable(why);
}

}  // namespace normgen
