#include "codegen/mlir/emulate.h"

#include "runtime/errors.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

// A context switch between stacks (x86-64 System V): the callee-saved registers, the SSE and x87
// control words and the stack pointer. normgen_emu_switch(&save, load) saves this stack's state and
// its pointer into `save`, then resumes the stack `load` where it last switched away.
asm(R"(
    .text
    .globl normgen_emu_switch
    .type normgen_emu_switch,@function
normgen_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size normgen_emu_switch, .-normgen_emu_switch
    .section .note.GNU-stack,"",@progbits
)");
extern "C" void normgen_emu_switch(void **save, void *load);

namespace normgen::mlirgen {

namespace {

using PackedFn = void (*)(void **);

// ---- the threads of one block, as fibers --------------------------------------------------------

constexpr size_t kStackBytes = 128 << 10;

struct Fiber {
    void *sp = nullptr;
    enum State { Ready, AtBarrier, Done } state = Ready;
    std::vector<void *> args;  // the packed call's argument pointers
    int64_t tid = 0;
};

struct ThreadBlock {
    PackedFn fn = nullptr;
    std::vector<Fiber> fibers;
    std::vector<std::vector<unsigned char>> stacks;
    void *scheduler_sp = nullptr;
    int current = -1;
    std::vector<double> slots;  // an all-reduce's values, one per thread
    std::string error;
};

thread_local ThreadBlock *g_block = nullptr;

void yield_to_scheduler() {
    Fiber &f = g_block->fibers[(size_t)g_block->current];
    normgen_emu_switch(&f.sp, g_block->scheduler_sp);
}

[[noreturn]] void fiber_main() {
    ThreadBlock &b = *g_block;
    Fiber &f = b.fibers[(size_t)b.current];
    b.fn(f.args.data());
    f.state = Fiber::Done;
    normgen_emu_switch(&f.sp, b.scheduler_sp);
    std::abort();  // a finished fiber is never resumed
}

// A fresh stack whose first switch enters fiber_main (see the layout normgen_emu_switch pops).
void *initial_stack(std::vector<unsigned char> &stack) {
    uintptr_t top = ((uintptr_t)stack.data() + stack.size()) & ~(uintptr_t)15;
    uint64_t *p = reinterpret_cast<uint64_t *>(top);
    *--p = 0;                                       // fiber_main's (unused) return address slot
    *--p = (uint64_t)(uintptr_t)&fiber_main;        // 16-byte aligned: fiber_main starts as if called
    for (int r = 0; r < 6; ++r) *--p = 0;           // rbp rbx r12 r13 r14 r15
    --p;                                            // the control words: this thread's
    uint32_t mxcsr;
    uint16_t fpcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpcw));
    std::memcpy(p, &mxcsr, 4);
    std::memcpy(reinterpret_cast<char *>(p) + 4, &fpcw, 2);
    return p;
}

// Runs every thread of the block to its end, a barrier at a time.
void run_block(ThreadBlock &b) {
    g_block = &b;
    for (;;) {
        for (size_t t = 0; t < b.fibers.size(); ++t) {
            if (b.fibers[t].state != Fiber::Ready) continue;
            b.current = (int)t;
            normgen_emu_switch(&b.scheduler_sp, b.fibers[t].sp);
        }
        size_t waiting = 0, done = 0;
        for (const Fiber &f : b.fibers) (f.state == Fiber::Done ? done : waiting) += 1;
        if (done == b.fibers.size()) break;
        if (done > 0) {
            b.error = std::to_string(done) + " of " + std::to_string(b.fibers.size()) +
                      " threads returned while the others wait at a barrier (a barrier not every thread reaches)";
            break;  // (the waiting fibers' stacks are dropped with the block)
        }
        for (Fiber &f : b.fibers) f.state = Fiber::Ready;  // every thread is at the barrier: it opens
    }
    g_block = nullptr;
}

}  // namespace

}  // namespace normgen::mlirgen

// ---- what the emulated kernels call --------------------------------------------------------------

extern "C" void normgen_emu_barrier() {
    using namespace normgen::mlirgen;
    g_block->fibers[(size_t)g_block->current].state = Fiber::AtBarrier;
    yield_to_scheduler();
}

namespace {

// An all-reduce: every thread's value in its slot, a barrier, the slots combined in thread order
// (the same value for every thread), a barrier before the slots are used again.
template <class T, class Op>
T all_reduce(T v, Op op) {
    using namespace normgen::mlirgen;
    ThreadBlock &b = *g_block;
    b.slots.resize(b.fibers.size());
    b.slots[(size_t)b.current] = (double)v;
    normgen_emu_barrier();
    T r = (T)g_block->slots[0];
    for (size_t t = 1; t < g_block->slots.size(); ++t) r = op(r, (T)g_block->slots[t]);
    normgen_emu_barrier();
    return r;
}

template <class T>
T nan_max(T a, T b) { return a != a || b != b ? a + b : (a > b ? a : b); }  // NaN propagates (arith.maximumf)
template <class T>
T nan_min(T a, T b) { return a != a || b != b ? a + b : (a < b ? a : b); }

}  // namespace

extern "C" float normgen_emu_all_reduce_add_f32(float v) { return all_reduce(v, [](float a, float b) { return a + b; }); }
extern "C" double normgen_emu_all_reduce_add_f64(double v) { return all_reduce(v, [](double a, double b) { return a + b; }); }
extern "C" float normgen_emu_all_reduce_maximumf_f32(float v) { return all_reduce(v, nan_max<float>); }
extern "C" double normgen_emu_all_reduce_maximumf_f64(double v) { return all_reduce(v, nan_max<double>); }
extern "C" float normgen_emu_all_reduce_minimumf_f32(float v) { return all_reduce(v, nan_min<float>); }
extern "C" double normgen_emu_all_reduce_minimumf_f64(double v) { return all_reduce(v, nan_min<double>); }

namespace normgen::mlirgen {

using namespace mlir;

namespace {

const char *reduce_name(gpu::AllReduceOperation op) {
    switch (op) {
    case gpu::AllReduceOperation::ADD: return "add";
    case gpu::AllReduceOperation::MAXIMUMF: return "maximumf";
    case gpu::AllReduceOperation::MINIMUMF: return "minimumf";
    default: return nullptr;
    }
}

// The workgroup buffers of each emulated function, in argument order: elements and bytes each.
struct Workgroup {
    int64_t elements = 0, element_bytes = 4;
};
using Workgroups = std::map<std::string, std::vector<Workgroup>>;

Workgroups convert(ModuleOp module) {
    MLIRContext &ctx = *module->getContext();
    OpBuilder b(&ctx);
    Location loc = module.getLoc();
    Type idx = b.getIndexType();
    Workgroups wg;
    auto declare = [&](const std::string &name, TypeRange in, TypeRange out) {
        if (module.lookupSymbol<func::FuncOp>(name)) return;
        b.setInsertionPointToEnd(module.getBody());
        auto f = func::FuncOp::create(b, loc, name, b.getFunctionType(in, out));
        f.setPrivate();
    };
    declare("normgen_emu_barrier", {}, {});
    std::vector<gpu::GPUModuleOp> modules;
    for (auto gm : module.getOps<gpu::GPUModuleOp>()) modules.push_back(gm);
    for (gpu::GPUModuleOp gm : modules) {
        std::vector<gpu::GPUFuncOp> funcs;
        for (auto f : gm.getOps<gpu::GPUFuncOp>()) funcs.push_back(f);
        for (gpu::GPUFuncOp f : funcs) {
            const std::string name = f.getName().str();
            if (!f.getPrivateAttributions().empty()) throw std::runtime_error("emulation: " + name + " has private attributions");
            const int64_t block_x = f.getKnownBlockSize() ? (*f.getKnownBlockSize())[0] : 0;
            Block &entry = f.getBody().front();
            const unsigned nargs = f.getNumArguments();
            SmallVector<Type> types(f.getArgumentTypes().begin(), f.getArgumentTypes().end());
            types.push_back(idx);  // block index
            types.push_back(idx);  // thread index
            BlockArgument block_id = entry.insertArgument(nargs, idx, loc);
            BlockArgument thread_id = entry.insertArgument(nargs + 1, idx, loc);
            for (BlockArgument a : f.getWorkgroupAttributions()) {
                auto mt = cast<MemRefType>(a.getType());
                auto plain = MemRefType::get(mt.getShape(), mt.getElementType());
                a.setType(plain);
                types.push_back(plain);
                wg[name].push_back({mt.getNumElements(), (int64_t)(mt.getElementTypeBitWidth() / 8)});
            }
            b.setInsertionPointToEnd(module.getBody());
            auto nf = func::FuncOp::create(b, f.getLoc(), name, b.getFunctionType(types, {}));
            nf.getBody().takeBody(f.getBody());
            std::vector<Operation *> ops;
            nf.walk([&](Operation *op) { ops.push_back(op); });
            for (Operation *op : ops) {
                b.setInsertionPoint(op);
                auto axis_x = [](auto o) { return o.getDimension() == gpu::Dimension::x; };
                if (auto t = dyn_cast<gpu::ThreadIdOp>(op)) {
                    Value v = axis_x(t) ? Value(thread_id) : Value(arith::ConstantIndexOp::create(b, op->getLoc(), 0));
                    op->replaceAllUsesWith(ValueRange{v});
                    op->erase();
                } else if (auto bi = dyn_cast<gpu::BlockIdOp>(op)) {
                    Value v = axis_x(bi) ? Value(block_id) : Value(arith::ConstantIndexOp::create(b, op->getLoc(), 0));
                    op->replaceAllUsesWith(ValueRange{v});
                    op->erase();
                } else if (auto bd = dyn_cast<gpu::BlockDimOp>(op)) {
                    if (!block_x) throw std::runtime_error("emulation: " + name + " reads its block size but declares none");
                    Value v = arith::ConstantIndexOp::create(b, op->getLoc(), axis_x(bd) ? block_x : 1);
                    op->replaceAllUsesWith(ValueRange{v});
                    op->erase();
                } else if (isa<gpu::BarrierOp>(op)) {
                    func::CallOp::create(b, op->getLoc(), "normgen_emu_barrier", TypeRange{}, ValueRange{});
                    op->erase();
                } else if (auto r = dyn_cast<gpu::AllReduceOp>(op)) {
                    const char *rn = r.getOp() ? reduce_name(*r.getOp()) : nullptr;
                    Type t = r.getType();
                    if (!rn || !(t.isF32() || t.isF64()) || !r.getUniform())
                        throw std::runtime_error("emulation: " + name + ": an all-reduce it cannot run (only uniform add, maximumf, minimumf of f32/f64)");
                    const std::string callee = std::string("normgen_emu_all_reduce_") + rn + (t.isF32() ? "_f32" : "_f64");
                    OpBuilder::InsertionGuard g(b);
                    declare(callee, {t}, {t});
                    b.setInsertionPoint(op);
                    auto call = func::CallOp::create(b, op->getLoc(), callee, TypeRange{t}, ValueRange{r.getValue()});
                    op->replaceAllUsesWith(call);
                    op->erase();
                } else if (isa<gpu::ReturnOp>(op)) {
                    func::ReturnOp::create(b, op->getLoc());
                    op->erase();
                } else if (op->getDialect() && op->getDialect()->getNamespace() == "gpu") {
                    throw std::runtime_error("emulation: " + name + " uses " + op->getName().getStringRef().str() + ", which it does not emulate");
                }
            }
            f.erase();
        }
        gm.erase();
    }
    module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
    return wg;
}

void lower_to_llvm(ModuleOp module) {
    MLIRContext &ctx = *module->getContext();
    std::string diag;
    ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
        llvm::raw_string_ostream os(diag);
        os << d.getLocation() << ": " << d << "\n";
        return success();
    });
    PassManager pm(&ctx);
    pm.addPass(createSCFToControlFlowPass());
    pm.addPass(memref::createExpandStridedMetadataPass());
    pm.addPass(createLowerAffinePass());
    pm.addPass(createConvertMathToLLVMPass());
    pm.addPass(createConvertMathToLibmPass());
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createConvertIndexToLLVMPass());
    pm.addPass(createConvertFuncToLLVMPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    pm.addPass(createReconcileUnrealizedCastsPass());
    if (failed(pm.run(module))) throw std::runtime_error("emulation: lowering to the LLVM dialect failed\n" + diag);
}

}  // namespace

void emulate_gpu_funcs(ModuleOp module) { convert(module); }

struct EmulatedGpu::Impl {
    Workgroups workgroups;
    std::unique_ptr<ExecutionEngine> engine;
    std::map<std::string, std::string> entries;  // name -> its own copy (Function::function points here)
};

EmulatedGpu::EmulatedGpu(ModuleOp module) : impl_(std::make_unique<Impl>()) {
    impl_->workgroups = convert(module);
    lower_to_llvm(module);
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    ExecutionEngineOptions options;
    auto engine = ExecutionEngine::create(module, options);
    if (!engine) throw std::runtime_error("emulation: JIT compilation failed: " + llvm::toString(engine.takeError()));
    impl_->engine = std::move(*engine);
    impl_->engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
        llvm::orc::SymbolMap m;
        auto add = [&](const char *name, void *fn) { m[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported}; };
        add("normgen_emu_barrier", (void *)&normgen_emu_barrier);
        add("normgen_emu_all_reduce_add_f32", (void *)&normgen_emu_all_reduce_add_f32);
        add("normgen_emu_all_reduce_add_f64", (void *)&normgen_emu_all_reduce_add_f64);
        add("normgen_emu_all_reduce_maximumf_f32", (void *)&normgen_emu_all_reduce_maximumf_f32);
        add("normgen_emu_all_reduce_maximumf_f64", (void *)&normgen_emu_all_reduce_maximumf_f64);
        add("normgen_emu_all_reduce_minimumf_f32", (void *)&normgen_emu_all_reduce_minimumf_f32);
        add("normgen_emu_all_reduce_minimumf_f64", (void *)&normgen_emu_all_reduce_minimumf_f64);
        return m;
    });
}

EmulatedGpu::~EmulatedGpu() = default;

GpuDevice::Function EmulatedGpu::load(const std::string &, const std::string &entry) {
    auto fn = impl_->engine->lookupPacked(entry);
    if (!fn) throw std::runtime_error("emulation: no kernel '" + entry + "': " + llvm::toString(fn.takeError()));
    auto it = impl_->entries.emplace(entry, entry).first;
    return Function{(void *)&it->second, (void *)*fn};
}

uint64_t EmulatedGpu::alloc(size_t bytes) {
    void *p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return (uint64_t)(uintptr_t)p;
}
void EmulatedGpu::free(uint64_t p) { std::free((void *)(uintptr_t)p); }
void EmulatedGpu::upload(uint64_t dst, const void *src, size_t n) { std::memcpy((void *)(uintptr_t)dst, src, n); }
void EmulatedGpu::download(void *dst, uint64_t src, size_t n) { std::memcpy(dst, (const void *)(uintptr_t)src, n); }
void EmulatedGpu::fill(uint64_t dst, uint8_t byte, size_t n) { std::memset((void *)(uintptr_t)dst, byte, n); }

void EmulatedGpu::launch(const Function &f, unsigned grid, unsigned threads, std::vector<void *> &params) {
    const std::string &name = *static_cast<const std::string *>(f.module);
    const std::vector<Workgroup> &sizes = impl_->workgroups[name];
    ThreadBlock b;
    b.fn = reinterpret_cast<PackedFn>(f.function);
    b.fibers.resize(threads);
    b.stacks.assign(threads, std::vector<unsigned char>(kStackBytes));
    // Per block: its index, each thread's index, the workgroup buffers (memref descriptors:
    // allocated, aligned, offset, size, stride), shared by its threads.
    int64_t block_index = 0;
    std::vector<std::vector<unsigned char>> shared(sizes.size());
    std::vector<std::array<int64_t, 5>> descriptors(sizes.size());
    for (size_t w = 0; w < sizes.size(); ++w) shared[w].assign((size_t)(sizes[w].elements * sizes[w].element_bytes), 0);
    for (unsigned blk = 0; blk < grid; ++blk) {
        block_index = blk;
        for (size_t w = 0; w < sizes.size(); ++w) {
            std::fill(shared[w].begin(), shared[w].end(), 0xff);  // (a read before any write reads NaN)
            const int64_t p = (int64_t)(uintptr_t)shared[w].data();
            descriptors[w] = {p, p, 0, sizes[w].elements, 1};
        }
        for (unsigned t = 0; t < threads; ++t) {
            Fiber &fb = b.fibers[t];
            fb.state = Fiber::Ready;
            fb.tid = t;
            fb.args.assign(params.begin(), params.end());
            fb.args.push_back(&block_index);
            fb.args.push_back(&fb.tid);
            for (auto &d : descriptors)
                for (int64_t &word : d) fb.args.push_back(&word);
            fb.sp = initial_stack(b.stacks[t]);
        }
        run_block(b);
        if (!b.error.empty()) throw std::runtime_error("emulated kernel '" + name + "', block " + std::to_string(blk) + ": " + b.error);
    }
}

}  // namespace normgen::mlirgen
