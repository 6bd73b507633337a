// libFuzzer target: the .norm front end. Any text must end in a NormSpec or in located diagnostics
// (DiagnosticError), never in a crash, a hang or another exception; an accepted declaration must
// print to text that reads back to the same canonical form, its plan must be computable, and its
// backward (`normgen grad`) must be a declaration that checks, or a located refusal.
#include "codegen/common/kernel_plan.h"
#include "dsl/checker.h"
#include "dsl/grad.h"
#include "dsl/printer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace normgen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 64 * 1024) return 0;  // the property holds at any size; keep executions fast
    const std::string text((const char *)data, size);
    NormSpec spec;
    try {
        spec = load_norm_text("fuzz.norm", text);
    } catch (const DiagnosticError &e) {
        (void)e.render();  // the renderer runs on every diagnostic (long lines are clipped)
        return 0;
    }
    const std::string once = print_norm(spec);
    std::string twice;
    try {
        twice = print_norm(load_norm_text("printed.norm", once));
    } catch (const DiagnosticError &e) {
        std::fprintf(stderr, "an accepted declaration printed to text that does not check:\n%s\n%s", once.c_str(), e.render().c_str());
        std::abort();
    }
    if (once != twice) {
        std::fprintf(stderr, "print(parse(print(s))) != print(s):\n%s\n---\n%s", once.c_str(), twice.c_str());
        std::abort();
    }
    (void)spec.eps_uses();
    (void)spec.affine_terms();
    (void)rounding_points(spec);
    for (Variant v : variants_of(spec))
        for (DType t : {DType::F32, DType::BF16}) (void)plan_text(spec, make_plan(spec, t, v));
    // differentiate() checks what it emits and throws std::logic_error when that fails (a bug: the
    // fuzzer reports it as an uncaught exception); a refusal is a DiagnosticError.
    try {
        GradResult g = differentiate(spec);
        (void)g.text;
    } catch (const DiagnosticError &) {
    }
    return 0;
}
