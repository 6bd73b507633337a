// MLIR toolchain probe: one kernel taken through every step the real MLIR backend will take —
// built with the C++ API (no textual IR), verified, lowered by a pass pipeline written in C++,
// then compiled to machine code twice: by the ExecutionEngine (JIT, to run it here) and by LLVM's
// TargetMachine (an object file, the form normgen's AOT kernels take).
#include "toolchain_probe.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"
#include "llvm/TargetParser/Triple.h"

#include <memory>
#include <stdexcept>

namespace normgen::mlir_probe {
namespace {

constexpr const char* kFuncName = "sum_sq";
constexpr const char* kCSymbol = "_mlir_ciface_sum_sq";

// Collects every diagnostic MLIR emits while alive, so a failure can be reported with its cause
// instead of being printed to stderr and lost.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext& ctx)
      : handler_(&ctx, [this](mlir::Diagnostic& d) {
          llvm::raw_string_ostream os(text_);
          os << d.getLocation() << ": " << d << "\n";
          return mlir::success();
        }) {}

  [[noreturn]] void fail(const std::string& step) const {
    throw std::runtime_error("mlir probe: " + step + " failed\n" + text_);
  }

private:
  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

// A context with the dialects the builder creates ops from, and the translations to LLVM IR.
// The passes load the dialects they produce (scf, cf, llvm, ...) themselves.
std::unique_ptr<mlir::MLIRContext> make_context() {
  auto ctx = std::make_unique<mlir::MLIRContext>();
  ctx->loadDialect<mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::memref::MemRefDialect,
                   mlir::linalg::LinalgDialect>();
  mlir::registerBuiltinDialectTranslation(*ctx);
  mlir::registerLLVMDialectTranslation(*ctx);
  return ctx;
}

// func.func @sum_sq(%x: memref<?xf32>) -> f32 {
//   %acc = memref.alloca() : memref<f32>     ; 0-d accumulator, initialised to 0
//   linalg.generic {maps = [(i) -> (i), (i) -> ()], iterators = [reduction]}
//       ins(%x) outs(%acc) { ^bb(%xi, %a): yield %a + %xi * %xi }
//   return memref.load %acc[]
// }
// linalg.generic is the form the real lowering will produce for a reduction stage.
mlir::OwningOpRef<mlir::ModuleOp> build_module(mlir::MLIRContext& ctx) {
  mlir::OpBuilder b(&ctx);
  mlir::Location loc = mlir::NameLoc::get(b.getStringAttr("normgen_mlir_probe"));
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  mlir::Type f32 = b.getF32Type();
  auto in_type = mlir::MemRefType::get({mlir::ShapedType::kDynamic}, f32);
  auto fn = mlir::func::FuncOp::create(b, loc, kFuncName, b.getFunctionType({in_type}, {f32}));
  // Makes func-to-llvm also emit `_mlir_ciface_sum_sq`, taking a pointer to the memref descriptor:
  // a stable C ABI, independent of how the descriptor's fields are exploded into arguments.
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());

  b.setInsertionPointToStart(fn.addEntryBlock());
  mlir::Value x = fn.getArgument(0);
  mlir::Value acc = mlir::memref::AllocaOp::create(b, loc, mlir::MemRefType::get({}, f32));
  mlir::Value zero = mlir::arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  mlir::memref::StoreOp::create(b, loc, zero, acc, mlir::ValueRange{});

  mlir::AffineMap identity = b.getMultiDimIdentityMap(1);
  mlir::AffineMap to_scalar = mlir::AffineMap::get(1, 0, {}, &ctx);
  mlir::linalg::GenericOp::create(
      b, loc, /*inputs=*/mlir::ValueRange{x}, /*outputBuffers=*/mlir::ValueRange{acc},
      llvm::ArrayRef<mlir::AffineMap>{identity, to_scalar},
      llvm::ArrayRef<mlir::utils::IteratorType>{mlir::utils::IteratorType::reduction},
      [](mlir::OpBuilder& nb, mlir::Location nl, mlir::ValueRange args) {
        mlir::Value sq = mlir::arith::MulFOp::create(nb, nl, args[0], args[0]);
        mlir::Value sum = mlir::arith::AddFOp::create(nb, nl, args[1], sq);
        mlir::linalg::YieldOp::create(nb, nl, sum);
      });

  mlir::Value result = mlir::memref::LoadOp::create(b, loc, acc, mlir::ValueRange{});
  mlir::func::ReturnOp::create(b, loc, result);
  return module;
}

// linalg -> loops -> cf -> llvm dialect. The order follows upstream MLIR's own lowering pipelines:
// structured ops become loops first, then each dialect is converted, and the casts the partial
// conversions leave between them are reconciled last.
void lower_to_llvm_dialect(mlir::ModuleOp module, const DiagnosticCollector& diags) {
  mlir::PassManager pm(module->getContext());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertLinalgToLoopsPass());
  pm.addPass(mlir::createLowerAffinePass());
  pm.addPass(mlir::createSCFToControlFlowPass());
  pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(module))) diags.fail("lowering to the LLVM dialect");
}

// Everything up to a module in the LLVM dialect, shared by the JIT and the object path.
struct Lowered {
  std::unique_ptr<mlir::MLIRContext> ctx;
  std::unique_ptr<DiagnosticCollector> diags;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

Lowered build_and_lower() {
  Lowered l;
  l.ctx = make_context();
  l.diags = std::make_unique<DiagnosticCollector>(*l.ctx);
  l.module = build_module(*l.ctx);
  if (mlir::failed(mlir::verify(*l.module))) l.diags->fail("verifying the built module");
  lower_to_llvm_dialect(*l.module, *l.diags);
  return l;
}

void init_native_target() {
  // Idempotent; LLVM guards these internally.
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
}

}  // namespace

const char* kernel_c_symbol() { return kCSymbol; }

float sum_of_squares(const float* data, std::int64_t n) {
  init_native_target();
  Lowered l = build_and_lower();

  mlir::ExecutionEngineOptions options;
  options.transformer = mlir::makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, nullptr);
  auto engine = mlir::ExecutionEngine::create(*l.module, options);
  if (!engine) {
    throw std::runtime_error("mlir probe: JIT compilation failed: " +
                             llvm::toString(engine.takeError()));
  }
  auto sym = (*engine)->lookup(kCSymbol);
  if (!sym) {
    throw std::runtime_error(std::string("mlir probe: JIT has no symbol ") + kCSymbol + ": " +
                             llvm::toString(sym.takeError()));
  }

  // The kernel only reads through the descriptor; the const_cast is the C ABI's lack of const.
  float* p = const_cast<float*>(data);
  StridedMemRefType<float, 1> view{p, p, /*offset=*/0, /*sizes=*/{n}, /*strides=*/{1}};
  auto fn = reinterpret_cast<float (*)(StridedMemRefType<float, 1>*)>(*sym);
  return fn(&view);
}

void emit_sum_of_squares_object(const std::string& path) {
  init_native_target();
  Lowered l = build_and_lower();

  llvm::LLVMContext llvm_ctx;
  std::unique_ptr<llvm::Module> ir = mlir::translateModuleToLLVMIR(*l.module, llvm_ctx, "normgen_probe");
  if (!ir) l.diags->fail("translating to LLVM IR");

  // The host CPU with all its features, like Halide's `host` target: kernels are built for the
  // machine that runs them.
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) throw std::runtime_error("mlir probe: no LLVM target for " + triple.str() + ": " + error);
  llvm::SubtargetFeatures features;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) features.AddFeature(f.getKey(), f.getValue());
  // PIC: the object may end up in a shared library.
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, llvm::sys::getHostCPUName(), features.getString(), llvm::TargetOptions(), llvm::Reloc::PIC_));
  if (!tm) throw std::runtime_error("mlir probe: cannot create a TargetMachine for " + triple.str());
  ir->setTargetTriple(triple);
  ir->setDataLayout(tm->createDataLayout());

  if (llvm::Error e = mlir::makeOptimizingTransformer(3, 0, tm.get())(ir.get())) {
    throw std::runtime_error("mlir probe: LLVM optimization failed: " + llvm::toString(std::move(e)));
  }

  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec) throw std::runtime_error("mlir probe: cannot open " + path + ": " + ec.message());
  llvm::legacy::PassManager codegen;
  if (tm->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    throw std::runtime_error("mlir probe: the TargetMachine cannot emit object files");
  }
  codegen.run(*ir);
  out.close();
  if (out.has_error()) throw std::runtime_error("mlir probe: writing " + path + " failed");
}

}  // namespace normgen::mlir_probe
