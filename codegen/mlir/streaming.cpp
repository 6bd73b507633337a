#include "codegen/mlir/streaming.h"

#include "llvm/Analysis/ValueTracking.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicsX86.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PatternMatch.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <cstdio>
#include <regex>
#include <set>
#include <stdexcept>

namespace normgen::mlirgen {

namespace {

// Whether a type node of Halide's TBAA tree names buffer `b`: "y", "y$1", "y.width16.base0", "y$1.width16.base0".
bool names_buffer(const llvm::MDNode *type, const std::vector<std::regex> &buffers) {
    if (!type || type->getNumOperands() == 0) return false;
    const auto *name = llvm::dyn_cast<llvm::MDString>(type->getOperand(0));
    if (!name) return false;
    const std::string s = name->getString().str();
    for (const std::regex &r : buffers)
        if (std::regex_match(s, r)) return true;
    return false;
}

// Whether a store's access tag (base type, access type, offset) points into one of the buffers.
bool stores_to(const llvm::StoreInst &st, const std::vector<std::regex> &buffers) {
    const llvm::MDNode *tag = st.getMetadata(llvm::LLVMContext::MD_tbaa);
    if (!tag || tag->getNumOperands() < 2) return false;
    for (unsigned k = 0; k < 2; ++k)
        if (names_buffer(llvm::dyn_cast<llvm::MDNode>(tag->getOperand(k)), buffers)) return true;
    return false;
}

// Whether `v` is Halide's emulated float -> bfloat16 rounding of a float `f` before the shift:
// bits + 0x7fff + ((bits >> 16) & 1), bits = bitcast(f), the three terms added in any order. Returns
// f, or the i32 bits themselves where no float is in sight: LLVM folds the bitcast of a float
// loaded from memory into the load (fused add + RMSNorm's h, narrowed from its f32 row), and those
// stores stayed emulated.
llvm::Value *emulated_bf16_rounding(llvm::Value *v) {
    using namespace llvm::PatternMatch;
    std::vector<llvm::Value *> terms;
    llvm::Value *a = nullptr, *b = nullptr;
    if (!match(v, m_Add(m_Value(a), m_Value(b)))) return nullptr;
    for (llvm::Value *t : {a, b}) {
        llvm::Value *c = nullptr, *d = nullptr;
        if (t->hasOneUse() && match(t, m_Add(m_Value(c), m_Value(d)))) terms.insert(terms.end(), {c, d});
        else terms.push_back(t);
    }
    if (terms.size() != 3) return nullptr;
    for (llvm::Value *bits : terms) {
        llvm::Value *f = nullptr;
        if (!match(bits, m_BitCast(m_Value(f))) || !f->getType()->getScalarType()->isFloatTy()) f = bits;
        if (!f->getType()->getScalarType()->isFloatTy() && !f->getType()->getScalarType()->isIntegerTy(32)) continue;
        bool half = false, lsb = false;
        for (llvm::Value *t : terms) {
            if (t == bits) continue;
            if (match(t, m_SpecificInt(0x7fff))) half = true;
            else if (match(t, m_And(m_LShr(m_Specific(bits), m_SpecificInt(16)), m_One()))) lsb = true;
        }
        if (half && lsb) return f;
    }
    return nullptr;
}

// Replaces each trunc(rounding >> 16) to i16 of `f` by the bits of fptrunc(float to bfloat), and
// each rounding & 0xffff0000 (a rounding point to bf16 inside the computation, `round(e, to: x)`
// in a bf16 kernel: the float -> bfloat16 -> float round trip as LLVM folds it) by the bits of
// fpext(fptrunc(float to bfloat)); the integer operations left without uses are erased.
int make_bf16_native(llvm::Function &f) {
    using namespace llvm::PatternMatch;
    struct Found {
        llvm::Instruction *at;  // the trunc, or the and
        llvm::Value *x;         // the float (or its i32 bits) rounded
        bool round_trip;        // the and: back to float
    };
    std::vector<Found> found;
    for (llvm::BasicBlock &bb : f)
        for (llvm::Instruction &i : bb) {
            llvm::Value *sum = nullptr;
            bool round_trip = false;
            if (auto *t = llvm::dyn_cast<llvm::TruncInst>(&i)) {
                if (!t->getSrcTy()->getScalarType()->isIntegerTy(32) || !t->getDestTy()->getScalarType()->isIntegerTy(16) ||
                    !match(t->getOperand(0), m_LShr(m_Value(sum), m_SpecificInt(16))))
                    continue;
            } else if (i.getType()->getScalarType()->isIntegerTy(32) && match(&i, m_And(m_Value(sum), m_SpecificInt(0xffff0000u)))) {
                round_trip = true;
            } else {
                continue;
            }
            if (llvm::Value *x = emulated_bf16_rounding(sum)) found.push_back({&i, x, round_trip});
        }
    for (const Found &fd : found) {
        llvm::IRBuilder<> b(fd.at);
        auto vector_of = [&](llvm::Type *t) -> llvm::Type * {
            if (auto *vt = llvm::dyn_cast<llvm::VectorType>(fd.at->getType())) return llvm::VectorType::get(t, vt->getElementCount());
            return t;
        };
        llvm::Type *f32 = vector_of(b.getFloatTy());
        llvm::Value *x = fd.x;
        if (!x->getType()->getScalarType()->isFloatTy()) x = b.CreateBitCast(x, f32);
        llvm::Value *bf = b.CreateFPTrunc(x, vector_of(b.getBFloatTy()));
        llvm::Value *bits = b.CreateBitCast(fd.round_trip ? b.CreateFPExt(bf, f32) : bf, fd.at->getType());
        fd.at->replaceAllUsesWith(bits);
        // The integer operations left without uses (each queued once; an erased one is no
        // longer anyone's operand, so it is never queued again).
        std::vector<llvm::Instruction *> work{fd.at};
        std::set<llvm::Instruction *> queued{fd.at};
        while (!work.empty()) {
            llvm::Instruction *d = work.back();
            work.pop_back();
            queued.erase(d);
            if (!d->use_empty() || d->mayHaveSideEffects()) continue;
            for (llvm::Value *op : d->operands())
                if (auto *oi = llvm::dyn_cast<llvm::Instruction>(op); oi && queued.insert(oi).second) work.push_back(oi);
            d->eraseFromParent();
        }
    }
    return (int)found.size();
}

// Halide compiles the whole value a bf16 store converts strictly: its float -> bfloat16 cast wraps
// the value in strict_float, and any strict op makes the module per-instruction (no flags, and no
// fusion by default). Every multiply and add of a bf16 kernel's loop so came out unfused (DyT: 13
// vmulps + 10 vaddps an element where the f32 kernel has 10 FMAs). Contraction is the one relaxation
// given back: it fuses a product into the sum that consumes it, never reorders, never assumes away
// NaN or infinity, and cannot cross a rounding point to bf16 or f16 (integer operations, or the
// native conversion made above). A point that rounds to f32 in a bf16 kernel (`round(e, to: w)`
// naming a tensor stored as f32 there; no catalog layer has one) is a no-op in the IR, and a
// product before it may be fused into the sum after it: the value then differs from the declared
// rounding by less than the unit of f32 the verifier allows at such a point.
int allow_contraction(llvm::Function &f) {
    int n = 0;
    for (llvm::BasicBlock &bb : f)
        for (llvm::Instruction &i : bb) {
            const unsigned op = i.getOpcode();
            if (op != llvm::Instruction::FMul && op != llvm::Instruction::FAdd && op != llvm::Instruction::FSub) continue;
            if (i.hasAllowContract()) continue;
            i.setHasAllowContract(true);
            ++n;
        }
    return n;
}

bool has_feature(const llvm::Function &f, const std::string &feature) {
    const llvm::Attribute a = f.getFnAttribute("target-features");
    if (!a.isValid()) return false;
    const std::string s = "," + a.getValueAsString().str() + ",";
    return s.find("," + feature + ",") != std::string::npos;
}

// The stored value through an empty inline asm, so that instruction selection cannot fold the
// cast that made it into the store: a store of bfloat vectors (LLVM 22) or a truncating store
// (vpmovdw: an i32 -> i16 trunc stored) has no non-temporal form on x86, and the mark is dropped.
void keep_in_register(llvm::StoreInst &st) {
    llvm::Type *t = st.getValueOperand()->getType();
    llvm::InlineAsm *keep = llvm::InlineAsm::get(llvm::FunctionType::get(t, {t}, false), "", "=v,0", false);
    st.setOperand(0, llvm::IRBuilder<>(&st).CreateCall(keep, {st.getValueOperand()}));
}

// An sfence before every return of `f`: its streaming stores are weakly ordered, and whoever
// waits for the function (a parallel task's completion) must not overtake them.
void fence_returns(llvm::Function &f) {
    llvm::Function *sfence = llvm::Intrinsic::getOrInsertDeclaration(f.getParent(), llvm::Intrinsic::x86_sse_sfence);
    for (llvm::BasicBlock &bb : f)
        if (auto *ret = llvm::dyn_cast<llvm::ReturnInst>(bb.getTerminator())) llvm::IRBuilder<>(ret).CreateCall(sfence);
}

// Whether the aligned version needs dimension k's stride to be whole 64-byte lines. Every outer
// dimension's but, from rank 3 up, the second-innermost's: there the kernel runs the two innermost
// axes as one loop when they are contiguous (fuse_trailing, checked at run time: BatchNorm's and
// GroupNorm's h x w planes), whose stores need only the planes on line boundaries, so 56 x 56
// planes stream too; the unfused loops' stores, unproven, stay ordinary.
bool whole_lines(const StreamingArgs::Output &o, int k) { return o.rank < 3 || k != o.rank - 2; }

// The integer arguments of output `o` the aligned version needs to be whole 64-byte lines (in
// elements): its offset and the strides whole_lines names. The check tests them, the clone masks them.
std::vector<unsigned> line_args(const StreamingArgs::Output &o) {
    std::vector<unsigned> r{o.first + 2};
    for (int k = 0; k + 1 < o.rank; ++k)
        if (whole_lines(o, k)) r.push_back(o.first + 3 + (unsigned)o.rank + (unsigned)k);
    return r;
}

}  // namespace

void version_for_streaming(llvm::Module &m, const StreamingArgs &args) {
    llvm::Function *f = m.getFunction(args.function);
    if (!f || f->isDeclaration()) throw std::runtime_error("streaming stores: the module has no function " + args.function);
    if (!f->getReturnType()->isVoidTy()) throw std::runtime_error("streaming stores: " + args.function + " returns a value");
    llvm::LLVMContext &ctx = m.getContext();
    for (const StreamingArgs::Output &o : args.outputs)
        if (o.first + 3 + 2 * (unsigned)o.rank > f->arg_size() || o.elem_bytes < 1 || 64 % o.elem_bytes != 0)
            throw std::runtime_error("streaming stores: output arguments past " + args.function + "'s");

    llvm::ValueToValueMapTy vmap;
    llvm::Function *nt = llvm::CloneFunction(f, vmap);
    nt->setName(args.function + "_streaming");
    nt->setLinkage(llvm::GlobalValue::InternalLinkage);
    // Inlined into the check's branch, its facts would be lost (the argument's alignment goes,
    // and the masks fold away under the dominating check).
    nt->addFnAttr(llvm::Attribute::NoInline);
    // The clone: what the check established, as IR LLVM reasons with (the masks are identities there).
    llvm::IRBuilder<> b(&*nt->getEntryBlock().getFirstInsertionPt());
    auto masked = [&](unsigned i, int64_t multiple) {
        llvm::Argument *a = nt->getArg(i);
        llvm::Value *v = b.CreateAnd(a, llvm::ConstantInt::get(a->getType(), -multiple));
        a->replaceUsesWithIf(v, [&](llvm::Use &u) { return u.getUser() != v; });
    };
    for (const StreamingArgs::Output &o : args.outputs) {
        const int64_t multiple = 64 / o.elem_bytes;
        nt->addParamAttr(o.first + 1, llvm::Attribute::getWithAlignment(ctx, llvm::Align(64)));
        for (unsigned i : line_args(o)) masked(i, multiple);
    }

    // The original: a check at its entry (its static allocas stay in the entry block), the clone on success.
    llvm::BasicBlock *body = &f->getEntryBlock();
    llvm::BasicBlock *check = llvm::BasicBlock::Create(ctx, "streaming.check", f, body);
    llvm::BasicBlock *call = llvm::BasicBlock::Create(ctx, "streaming.call", f, body);
    std::vector<llvm::AllocaInst *> allocas;
    for (llvm::Instruction &i : *body)
        if (auto *a = llvm::dyn_cast<llvm::AllocaInst>(&i); a && a->isStaticAlloca()) allocas.push_back(a);
    for (llvm::AllocaInst *a : allocas) a->moveBefore(check->end());
    b.SetInsertPoint(check);
    llvm::Value *ok = b.getTrue();
    auto zero_low_bits = [&](llvm::Value *v, int64_t multiple) {
        if (v->getType()->isPointerTy()) v = b.CreatePtrToInt(v, b.getInt64Ty());
        return b.CreateICmpEQ(b.CreateAnd(v, llvm::ConstantInt::get(v->getType(), multiple - 1)), llvm::ConstantInt::get(v->getType(), 0));
    };
    for (const StreamingArgs::Output &o : args.outputs) {
        const int64_t multiple = 64 / o.elem_bytes;
        ok = b.CreateAnd(ok, zero_low_bits(f->getArg(o.first + 1), 64));
        for (unsigned i : line_args(o)) ok = b.CreateAnd(ok, zero_low_bits(f->getArg(i), multiple));
    }
    b.CreateCondBr(ok, call, body);
    b.SetInsertPoint(call);
    std::vector<llvm::Value *> pass;
    for (llvm::Argument &a : f->args()) pass.push_back(&a);
    b.CreateCall(nt, pass);
    b.CreateRetVoid();
}

StreamingResult mark_streaming_stores(llvm::Module &m) {
    StreamingResult r;
    llvm::MDNode *nt = llvm::MDNode::get(m.getContext(), {llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(m.getContext()), 1))});
    for (llvm::Function &f : m) {
        bool any = false;
        for (llvm::BasicBlock &bb : f)
            for (llvm::Instruction &i : bb) {
                auto *st = llvm::dyn_cast<llvm::StoreInst>(&i);
                if (!st || !st->getValueOperand()->getType()->isVectorTy()) continue;
                const uint64_t bytes = m.getDataLayout().getTypeStoreSize(st->getValueOperand()->getType()).getFixedValue();
                // A whole vector on its boundary (what x86's non-temporal stores take), into a
                // buffer the caller passed: an argument or a field of a memref descriptor.
                if (bytes < 16 || bytes > 64 || st->getAlign().value() < bytes) continue;
                const llvm::Value *base = llvm::getUnderlyingObject(st->getPointerOperand(), 0);
                if (!llvm::isa<llvm::Argument>(base) && !llvm::isa<llvm::LoadInst>(base)) continue;
                st->setMetadata(llvm::LLVMContext::MD_nontemporal, nt);
                if (llvm::isa<llvm::CastInst>(st->getValueOperand())) keep_in_register(*st);  // bf16 storage: a trunc to i16
                ++r.marked;
                any = true;
            }
        if (!any) continue;
        ++r.functions;
        fence_returns(f);
    }
    return r;
}

StreamingResult compile_streaming_object(const std::string &bitcode_path, const std::vector<std::string> &buffers,
                                         const std::string &object_path, bool native_bf16) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::LLVMContext ctx;
    auto buf = llvm::MemoryBuffer::getFile(bitcode_path);
    if (!buf) throw std::runtime_error("streaming stores: cannot read " + bitcode_path + ": " + buf.getError().message());
    auto parsed = llvm::parseBitcodeFile((*buf)->getMemBufferRef(), ctx);
    if (!parsed) throw std::runtime_error("streaming stores: " + bitcode_path + " is not LLVM bitcode: " + llvm::toString(parsed.takeError()));
    std::unique_ptr<llvm::Module> m = std::move(*parsed);

    std::vector<std::regex> names;
    for (const std::string &b : buffers) {
        std::string esc;
        for (char c : b) esc += std::isalnum((unsigned char)c) || c == '_' ? std::string(1, c) : std::string("\\") + c;
        names.emplace_back(esc + "(\\$[0-9]+)?(\\..*)?");
    }

    StreamingResult r;
    llvm::MDNode *nt = llvm::MDNode::get(ctx, {llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), 1))});
    for (llvm::Function &f : *m) {
        if (native_bf16 && has_feature(f, "+avx512bf16")) {
            const int converted = make_bf16_native(f);
            r.bf16 += converted;
            if (converted > 0) r.contracted += allow_contraction(f);
        }
        if (names.empty()) continue;
        bool any = false;
        for (llvm::BasicBlock &bb : f)
            for (llvm::Instruction &i : bb) {
                auto *st = llvm::dyn_cast<llvm::StoreInst>(&i);
                if (!st || !st->getValueOperand()->getType()->isVectorTy() || !stores_to(*st, names)) continue;
                const uint64_t bytes = m->getDataLayout().getTypeStoreSize(st->getValueOperand()->getType()).getFixedValue();
                const uint64_t align = st->getAlign().value();
                // Only stores Halide proved aligned: a full vector (or at least 32 bytes of it) on its boundary.
                if (align < 16 || align < std::min<uint64_t>(bytes, 32)) continue;
                st->setMetadata(llvm::LLVMContext::MD_nontemporal, nt);
                // A native bf16 conversion stored as is loses the mark: LLVM 22 folds the bitcast
                // into a store of bfloat vectors, which has no non-temporal pattern on x86, and
                // emits vmovaps. An empty inline asm keeps the stored value an integer vector.
                if (auto *bc = llvm::dyn_cast<llvm::BitCastInst>(st->getValueOperand()); bc && bc->getSrcTy()->getScalarType()->isBFloatTy())
                    keep_in_register(*st);
                ++r.marked;
                any = true;
            }
        if (!any) continue;
        ++r.functions;
        fence_returns(f);
    }

    const llvm::Triple triple(m->getTargetTriple());
    std::string err;
    const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
    if (!target) throw std::runtime_error("streaming stores: no LLVM target for " + triple.str() + ": " + err);
    // The CPU and its features come from each function's attributes (Halide sets them per target).
    std::unique_ptr<llvm::TargetMachine> tm(
        target->createTargetMachine(triple, "generic", "", llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
    if (!tm) throw std::runtime_error("streaming stores: cannot create a TargetMachine for " + triple.str());
    m->setDataLayout(tm->createDataLayout());
    const std::string tmp = object_path + ".tmp";
    {
        std::error_code ec;
        llvm::raw_fd_ostream out(tmp, ec, llvm::sys::fs::OF_None);
        if (ec) throw std::runtime_error("cannot open " + tmp + ": " + ec.message());
        llvm::legacy::PassManager codegen;
        if (tm->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
            throw std::runtime_error("streaming stores: the TargetMachine cannot emit object files");
        codegen.run(*m);
        out.close();
        if (out.has_error()) throw std::runtime_error("writing " + tmp + " failed");
    }
    if (std::rename(tmp.c_str(), object_path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + object_path);
    return r;
}

}  // namespace normgen::mlirgen
