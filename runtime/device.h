// Whether this machine has a device of a kind, asked at run time: the CUDA driver and the OpenCL
// ICD loader are loaded with dlopen when a kernel for them is called, never linked, so every normgen
// program starts on a machine without them and says, in one line, why a GPU kernel cannot run.
#pragma once

#include "runtime/errors.h"
#include "runtime/manifest_schema.h"

#include <string>

namespace normgen {

// No device of the kind a kernel needs: what() is one line, "no CUDA device: ..." or
// "no OpenCL device: ...".
struct DeviceUnavailable : UserError {
    using UserError::UserError;
};

// "" when a device of the kind is present (the CPU always is), else the one-line reason. Looked up
// once per process and kind.
std::string device_unavailable(Device d);

// Throws DeviceUnavailable with that reason.
void require_device(Device d);

}  // namespace normgen
