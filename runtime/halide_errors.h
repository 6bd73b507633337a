// Halide runtime errors as C++ exceptions. The Halide runtime reports a failed kernel call through a
// process-wide error handler whose default prints the message and aborts the process; normgen installs
// its own, which records the message so that run_kernel can throw it (runtime/run.h).
#pragma once

#include <string>

namespace normgen {

// Installs the recording handler with halide_set_error_handler (once per process; later calls do
// nothing). The program must link a Halide runtime: the kernels' (normgen_kernels), or a stand-in.
void install_halide_error_handler();

// The messages recorded since the last take, on this thread (or, when a Halide worker thread reported
// the error, the latest message of any thread); clears them.
std::string take_halide_error();

}  // namespace normgen
