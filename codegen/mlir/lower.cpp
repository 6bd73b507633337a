// The MLIR context both lowerings (lower_cpu.cpp, lower_cuda.cpp) and the pipelines work in.
#include "codegen/mlir/lower.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVM/NVVM/Target.h"

namespace normgen::mlirgen {

using namespace mlir;

std::unique_ptr<MLIRContext> make_context() {
    DialectRegistry registry;
    registry.insert<func::FuncDialect, arith::ArithDialect, math::MathDialect, memref::MemRefDialect, linalg::LinalgDialect,
                    scf::SCFDialect, gpu::GPUDialect, vector::VectorDialect, LLVM::LLVMDialect, NVVM::NVVMDialect>();
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    registerGPUDialectTranslation(registry);
    registerNVVMDialectTranslation(registry);
    NVVM::registerNVVMTargetInterfaceExternalModels(registry);
    // The dialects' "to LLVM" interfaces, which convert-gpu-to-nvvm applies to every op in a kernel.
    registerAllExtensions(registry);
    auto ctx = std::make_unique<MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
    return ctx;
}

}  // namespace normgen::mlirgen
