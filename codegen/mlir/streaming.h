// The LLVM 22 step for Halide kernels: streaming (non-temporal) stores, native bf16 conversion.
//
// Halide 21 has no directive for streaming stores (stream_stores() arrived after 21). The Halide
// generator compiles a kernel whose schedule asks for them (the halide-cpu knob streaming_stores) to LLVM
// bitcode, with its outputs declared 64-byte aligned and their rows a multiple of the vector, so
// that Halide itself proves its full-vector stores to the outputs aligned; this step, in the MLIR
// backend's process (LLVM 22 reads Halide's LLVM 21 bitcode), marks exactly those stores
// `!nontemporal`, puts an `sfence` before every return of a function that has one (the parallel
// tasks' bodies: a streaming store is weakly ordered, and the task's completion must not overtake
// it), and compiles the module to an object. Masked tail stores and stores Halide could not prove
// aligned stay ordinary stores (a non-temporal store needs its alignment; LLVM would fall back
// anyway).
//
// Halide 21 also emulates every float -> bfloat16 conversion with integer operations (round to
// nearest even: bits + 0x7fff + ((bits >> 16) & 1), then >> 16; six vector instructions and a pack
// per vector), even for a target with AVX512-BF16. With `native_bf16`, in each function whose
// target features include +avx512bf16, that exact sequence becomes `fptrunc float to bfloat`, which
// LLVM 22 emits as vcvtneps2bf16 (also round to nearest even), and a rounding point inside the
// computation (`round(e, to: x)`: the round trip that LLVM folds to bits & 0xffff0000) becomes
// fpext(fptrunc(float to bfloat)). The two differ only where the
// emulation is wrong or the input is subnormal: a NaN stays a NaN (the emulation's carry turned
// some into -0 or infinities), and subnormal floats (below 1.2e-38) become zero. (A streaming
// store of such a value keeps its integer type through an empty inline asm: LLVM 22 would fold
// the bitcast into a store of bfloat vectors, which x86 has no non-temporal pattern for.)
// In a function whose conversions it made native, every float multiply, add and subtract is also
// marked contractible: Halide's conversion wraps the stored value in strict_float, which left the
// whole computation of a bf16 output unfused (allow_contraction in streaming.cpp says why that is safe).
#pragma once

#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace normgen::mlirgen {

struct StreamingResult {
    int marked = 0;     // stores marked non-temporal
    int functions = 0;  // functions given an sfence before their returns
    int bf16 = 0;       // emulated float -> bfloat16 conversions made native
    int contracted = 0; // float multiplies, adds and subtracts of those functions marked contractible
};

// Reads Halide's bitcode, marks the stores to `buffers` (output names, as Halide's alias-analysis
// metadata names them; none: no streaming stores), makes its bf16 conversions native when
// `native_bf16`, writes `object_path`. Throws std::runtime_error on unreadable bitcode.
StreamingResult compile_streaming_object(const std::string &bitcode_path, const std::vector<std::string> &buffers,
                                         const std::string &object_path, bool native_bf16 = false);

// ---- The MLIR backend's own kernels (the mlir-cpu knob streaming_stores) ----------------------
//
// LLVM's loop vectorizer does the SIMD work of an MLIR CPU kernel, and it does not vectorize a
// scalar store marked non-temporal; so the marks go on after it, on the vector stores it made.
// Before O3, version_for_streaming gives the kernel function a second body for calls whose streamed
// outputs are aligned: a check at its entry (each output's data 64-byte aligned, its offset and
// every stride but the innermost a multiple of 64 bytes, from rank 3 up but the second-innermost, whose plane fuse_trailing may run as one loop) calls a clone in which those facts are
// written into the IR (an `align 64` argument, offset and strides masked to their multiple: the
// identity for a call that passed the check), so that LLVM itself proves which of its vector
// stores are aligned. After O3, mark_streaming_stores marks every vector store into a caller's
// buffer (not the kernel's own allocations) that LLVM proved aligned to its whole width, and puts
// an sfence before the returns of each function with one. A call that fails the check, and the
// tails of rows, take ordinary stores: no runtime requirement on the caller.
struct StreamingArgs {
    std::string function;  // the LLVM function of the kernel (not its _mlir_ciface_ wrapper)
    struct Output {
        unsigned first = 0;  // its memref's first argument: allocated, aligned, offset, sizes..., strides...
        int rank = 0;
        int elem_bytes = 4;
    };
    std::vector<Output> outputs;
    explicit operator bool() const { return !outputs.empty(); }
};

// Throws std::runtime_error when the module has no definition of args.function.
void version_for_streaming(llvm::Module &m, const StreamingArgs &args);
StreamingResult mark_streaming_stores(llvm::Module &m);

}  // namespace normgen::mlirgen
