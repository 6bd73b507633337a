#include "codegen/mlir/pipeline.h"

#include "codegen/mlir/lower.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

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

#include <stdexcept>

namespace normgen::mlirgen {

namespace {

// Collects MLIR's diagnostics while alive, so a failure carries its cause.
class Diagnostics {
public:
    explicit Diagnostics(mlir::MLIRContext &ctx)
        : handler_(&ctx, [this](mlir::Diagnostic &d) {
              llvm::raw_string_ostream os(text_);
              os << d.getLocation() << ": " << d << "\n";
              return mlir::success();
          }) {}
    [[noreturn]] void fail(const std::string &step) const { throw std::runtime_error("mlir: " + step + " failed\n" + text_); }

private:
    std::string text_;
    mlir::ScopedDiagnosticHandler handler_;
};

void run(mlir::PassManager &pm, mlir::ModuleOp module, const Diagnostics &d, const std::string &what) {
    if (mlir::failed(pm.run(module))) d.fail(what);
}

void init_llvm() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
}

std::unique_ptr<llvm::TargetMachine> host_machine() {
    init_llvm();
    llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
    std::string error;
    const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
    if (!target) throw std::runtime_error("mlir: no LLVM target for " + triple.str() + ": " + error);
    llvm::SubtargetFeatures features;
    for (const auto &f : llvm::sys::getHostCPUFeatures()) features.AddFeature(f.getKey(), f.getValue());
    std::unique_ptr<llvm::TargetMachine> tm(
        target->createTargetMachine(triple, llvm::sys::getHostCPUName(), features.getString(), llvm::TargetOptions(), llvm::Reloc::PIC_));
    if (!tm) throw std::runtime_error("mlir: cannot create a TargetMachine for " + triple.str());
    return tm;
}

// O3 for `tm`, with the streaming step around it (streaming.h: the aligned version before, the
// marks on the vector stores the loop vectorizer made after). The same for the AOT objects and
// the JIT that `verify` runs, so that both get the same code.
llvm::Error optimize(llvm::Module &ir, llvm::TargetMachine &tm, const StreamingArgs &streaming, StreamingResult *marked = nullptr) {
    for (llvm::Function &f : ir) {
        if (f.isDeclaration()) continue;
        f.addFnAttr("target-cpu", tm.getTargetCPU());
        f.addFnAttr("target-features", tm.getTargetFeatureString());
        // Full-width vectors where the CPU has them (LLVM's default for AVX-512 CPUs is 256 bits).
        f.addFnAttr("prefer-vector-width", "512");
        // A vector division marked arcp (only the math approximations' own, approximate_math) as
        // a reciprocal estimate with one Newton step.
        f.addFnAttr("reciprocal-estimates", "vec-divf:1");
    }
    if (streaming) try {
            version_for_streaming(ir, streaming);
        } catch (const std::runtime_error &e) {
            return llvm::createStringError(e.what());
        }
    if (llvm::Error e = mlir::makeOptimizingTransformer(3, 0, &tm)(&ir)) return e;
    if (streaming) {
        const StreamingResult r = mark_streaming_stores(ir);
        if (marked) *marked = r;
    }
    return llvm::Error::success();
}

// LLVM dialect -> LLVM IR, optimized at O3 for `tm` (the loop vectorizer does the SIMD work).
std::unique_ptr<llvm::Module> optimized_ir(mlir::ModuleOp module, llvm::LLVMContext &ctx, llvm::TargetMachine &tm, const StreamingArgs &streaming,
                                           StreamingResult *marked = nullptr) {
    Diagnostics d(*module->getContext());
    std::unique_ptr<llvm::Module> ir = mlir::translateModuleToLLVMIR(module, ctx, "normgen");
    if (!ir) d.fail("translating to LLVM IR");
    ir->setTargetTriple(tm.getTargetTriple());
    ir->setDataLayout(tm.createDataLayout());
    if (llvm::Error e = optimize(*ir, tm, streaming, marked))
        throw std::runtime_error("mlir: LLVM optimization failed: " + llvm::toString(std::move(e)));
    return ir;
}

// f32 transcendentals as polynomials (vectorizable, ~1-2 ulp); the rest to LLVM intrinsics and libm.
void approximate_math(mlir::ModuleOp module, const Diagnostics &d) {
    llvm::DenseSet<mlir::Operation *> declared;  // the declaration's own divisions stay exact
    module.walk([&](mlir::arith::DivFOp op) { declared.insert(op); });
    mlir::RewritePatternSet patterns(module->getContext());
    mlir::populateMathPolynomialApproximationPatterns(patterns, [](llvm::StringRef name) {
        name.consume_front("math.");
        return name == "exp" || name == "log" || name == "expm1" || name == "log1p";
    });
    mlir::populatePolynomialApproximateTanhPattern(patterns);
    // bf16 <-> f32 as integer shifts with round-to-nearest-even (no libgcc/compiler-rt helper needed).
    mlir::arith::populateExpandBFloat16Patterns(patterns);
    if (mlir::failed(mlir::applyPatternsGreedily(module, std::move(patterns)))) d.fail("approximating math functions");
    // The approximations' own divisions (tanh's rational p(x) / q(x), q a polynomial of the
    // clamped x: finite) may multiply by a reciprocal: vectorized, LLVM then emits vrcp14ps and a
    // Newton step (about 1 ulp; arcp with ninf is what its DAG combine asks) where vdivps, one
    // every 10-16 cycles for 16 lanes, bounded DyT's loop.
    module.walk([&](mlir::arith::DivFOp op) {
        if (!declared.contains(op.getOperation()) && op.getType().isF32())
            op.setFastmath(op.getFastmath() | mlir::arith::FastMathFlags::arcp | mlir::arith::FastMathFlags::ninf | mlir::arith::FastMathFlags::afn);
    });
}

}  // namespace

std::string print_op(mlir::Operation *op, bool locations) {
    std::string s;
    llvm::raw_string_ostream os(s);
    mlir::OpPrintingFlags flags;
    if (locations) flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/true);
    op->print(os, flags);
    return s;
}

StreamingArgs lower_cpu_to_llvm_dialect(mlir::ModuleOp module, const StageSink &sink) {
    mlir::MLIRContext &ctx = *module->getContext();
    Diagnostics d(ctx);
    // The streamed outputs' places among the LLVM function's arguments: a memref of rank r is
    // 3 + 2r of them (allocated and aligned pointers, offset, sizes, strides), anything else one.
    StreamingArgs streaming;
    module.walk([&](mlir::func::FuncOp fn) {
        unsigned first = 0;
        for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
            const mlir::Type t = fn.getArgument(i).getType();
            auto mt = llvm::dyn_cast<mlir::MemRefType>(t);
            if (fn.getArgAttr(i, kStreamingArgAttr)) {
                if (!mt) throw std::runtime_error("mlir: a streamed output that is not a memref");
                if (!streaming.function.empty() && streaming.function != fn.getName().str())
                    throw std::runtime_error("mlir: streamed outputs in two functions (" + streaming.function + ", " + fn.getName().str() + ")");
                streaming.function = fn.getName().str();
                streaming.outputs.push_back({first, (int)mt.getRank(), (int)(mt.getElementTypeBitWidth() / 8)});
                fn.removeArgAttr(i, kStreamingArgAttr);
            }
            first += mt ? 3 + 2 * (unsigned)mt.getRank() : 1;
        }
    });
    if (sink) sink("linalg", print_op(module, sink.locations));
    {
        mlir::PassManager pm(&ctx);
        pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertLinalgToLoopsPass());
        pm.addPass(mlir::createCanonicalizerPass());
        pm.addPass(mlir::createCSEPass());
        run(pm, module, d, "linalg -> loops");
    }
    approximate_math(module, d);
    if (sink) sink("loops", print_op(module, sink.locations));
    mlir::PassManager pm(&ctx);
    pm.addPass(mlir::createSCFToControlFlowPass());
    pm.addPass(mlir::memref::createExpandStridedMetadataPass());
    pm.addPass(mlir::createLowerAffinePass());  // the loops' and the strided metadata's affine.apply
    pm.addPass(mlir::createConvertMathToLLVMPass());   // sqrt, fma, abs, ...: LLVM intrinsics
    pm.addPass(mlir::createConvertMathToLibmPass());   // what is left (f64 transcendentals): libm calls
    pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass());
    pm.addPass(mlir::createArithToLLVMConversionPass());
    pm.addPass(mlir::createConvertIndexToLLVMPass());
    pm.addPass(mlir::createConvertFuncToLLVMPass());
    pm.addPass(mlir::createConvertControlFlowToLLVMPass());
    pm.addPass(mlir::createReconcileUnrealizedCastsPass());
    run(pm, module, d, "lowering to the LLVM dialect");
    return streaming;
}

std::string host_llvm_ir(mlir::ModuleOp module, const StreamingArgs &streaming) {
    auto tm = host_machine();
    llvm::LLVMContext ctx;
    auto ir = optimized_ir(module, ctx, *tm, streaming);
    std::string s;
    llvm::raw_string_ostream os(s);
    ir->print(os, nullptr);
    return s;
}

StreamingResult emit_host_object(mlir::ModuleOp module, const std::string &path, const StreamingArgs &streaming) {
    auto tm = host_machine();
    llvm::LLVMContext ctx;
    StreamingResult marked;
    auto ir = optimized_ir(module, ctx, *tm, streaming, &marked);
    std::string tmp = path + ".tmp";
    {
        std::error_code ec;
        llvm::raw_fd_ostream out(tmp, ec, llvm::sys::fs::OF_None);
        if (ec) throw std::runtime_error("cannot open " + tmp + ": " + ec.message());
        llvm::legacy::PassManager codegen;
        if (tm->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
            throw std::runtime_error("mlir: the TargetMachine cannot emit object files");
        codegen.run(*ir);
        out.close();
        if (out.has_error()) throw std::runtime_error("writing " + tmp + " failed");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
    return marked;
}

Isa host_isa() {
    llvm::StringMap<bool> f = llvm::sys::getHostCPUFeatures();
    for (const char *k : {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
        if (!f.lookup(k)) return Isa::Avx2;
    return Isa::Avx512;
}

std::vector<std::string> host_cpu_features() {
    llvm::StringMap<bool> f = llvm::sys::getHostCPUFeatures();
    std::vector<std::string> r;
    for (const char *k : {"sse4.1", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512bf16",
                          "avx512fp16", "avx512vnni"})
        if (f.lookup(k == std::string("sse4.1") ? "sse4.1" : k)) r.push_back(k);
    return r;
}

struct Jit::Impl {
    std::unique_ptr<mlir::ExecutionEngine> engine;
};

Jit::Jit(mlir::ModuleOp module, const std::string &function, const StreamingArgs &streaming) : impl_(std::make_unique<Impl>()) {
    init_llvm();
    auto tm = host_machine();
    mlir::ExecutionEngineOptions options;
    // options.transformer is a function_ref: the std::function it refers to must outlive create()
    // (assigned from the temporary it dangled; found by AddressSanitizer, stack-use-after-scope).
    const std::function<llvm::Error(llvm::Module *)> transformer = [&](llvm::Module *m) { return optimize(*m, *tm, streaming); };
    options.transformer = transformer;
    auto engine = mlir::ExecutionEngine::create(module, options);
    if (!engine) throw std::runtime_error("mlir: JIT compilation failed: " + llvm::toString(engine.takeError()));
    impl_->engine = std::move(*engine);
    auto sym = impl_->engine->lookup("_mlir_ciface_" + function);
    if (!sym) throw std::runtime_error("mlir: JIT has no _mlir_ciface_" + function + ": " + llvm::toString(sym.takeError()));
    ciface_ = *sym;
}

Jit::~Jit() = default;

std::string cuda_ptx(mlir::ModuleOp module, const std::string &cuda_root, const StageSink &sink) {
    mlir::MLIRContext &ctx = *module->getContext();
    Diagnostics d(ctx);
    if (sink) sink("gpu", print_op(module, sink.locations));
    mlir::PassManager pm(&ctx);
    mlir::GpuNVVMAttachTargetOptions target;
    target.chip = "sm_90";
    target.features = "+ptx80";
    target.optLevel = 3;
    pm.addPass(mlir::createGpuNVVMAttachTarget(target));
    auto &gm = pm.nest<mlir::gpu::GPUModuleOp>();
    gm.addPass(mlir::createCanonicalizerPass());
    gm.addPass(mlir::createCSEPass());
    gm.addPass(mlir::createSCFToControlFlowPass());
    gm.addPass(mlir::createConvertGpuOpsToNVVMOps());
    pm.addPass(mlir::createReconcileUnrealizedCastsPass());
    run(pm, module, d, "lowering to NVVM");
    if (sink) sink("nvvm", print_op(module, sink.locations));
    mlir::PassManager bin(&ctx);
    mlir::GpuModuleToBinaryPassOptions o;
    o.toolkitPath = cuda_root;
    o.compilationTarget = "isa";
    bin.addPass(mlir::createGpuModuleToBinaryPass(o));
    run(bin, module, d, "NVVM -> PTX");
    std::string ptx;
    module.walk([&](mlir::gpu::BinaryOp b) {
        for (mlir::Attribute a : b.getObjects())
            if (auto obj = llvm::dyn_cast<mlir::gpu::ObjectAttr>(a)) ptx = obj.getObject().str();
    });
    if (ptx.empty()) throw std::runtime_error("mlir: no PTX in the gpu.binary");
    if (sink) sink("ptx", ptx);
    return ptx;
}

}  // namespace normgen::mlirgen
