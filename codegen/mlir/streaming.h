// Streaming (non-temporal) stores for Halide kernels, with LLVM 22.
//
// Halide 21 has no directive for them (stream_stores() arrived after 21). The Halide generator
// compiles a kernel whose schedule asks for them (the halide-cpu knob streaming_stores) to LLVM
// bitcode, with its outputs declared 64-byte aligned and their rows a multiple of the vector, so
// that Halide itself proves its full-vector stores to the outputs aligned; this step, in the MLIR
// backend's process (LLVM 22 reads Halide's LLVM 21 bitcode), marks exactly those stores
// `!nontemporal`, puts an `sfence` before every return of a function that has one (the parallel
// tasks' bodies: a streaming store is weakly ordered, and the task's completion must not overtake
// it), and compiles the module to an object. Masked tail stores and stores Halide could not prove
// aligned stay ordinary stores (a non-temporal store needs its alignment; LLVM would fall back
// anyway).
#pragma once

#include <string>
#include <vector>

namespace normgen::mlirgen {

struct StreamingResult {
    int marked = 0;     // stores marked non-temporal
    int functions = 0;  // functions given an sfence before their returns
};

// Reads Halide's bitcode, marks the stores to `buffers` (output names, as Halide's alias-analysis
// metadata names them), writes `object_path`. Throws std::runtime_error on unreadable bitcode.
StreamingResult compile_streaming_object(const std::string &bitcode_path, const std::vector<std::string> &buffers,
                                         const std::string &object_path);

}  // namespace normgen::mlirgen
