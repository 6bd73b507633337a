// libFuzzer target: the schedule-record readers (`--schedule 'knob=value,...'` and JSON records).
// Any text must give a record within its knobs' ranges or a UserError naming the knob; never a crash.
#include "codegen/common/kernel_plan.h"
#include "codegen/common/schedule_record.h"
#include "dsl/checker.h"
#include "runtime/errors.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace normgen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const NormSpec spec = load_norm_text("ln.norm", R"(norm ln(x: [rows, d]) -> y {
  mu = mean(x, over: d)
  v = var(x, over: d)
  y = (x - mu) * rsqrt(v + 1e-5)
})");
    static const KernelPlan plan = make_plan(spec, DType::F32, Variant::Core);
    const std::string text((const char *)data, size);
    // A JSON record (or object of knobs) straight to the reader; a command-line list of knobs unless
    // the text could name a file (the option reads a file of that name).
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    const bool path_like = text.find('/') != std::string::npos || text.find(".json") != std::string::npos || text.find('\0') != std::string::npos;
    for (ScheduleKind kind : {ScheduleKind::HalideCpu, ScheduleKind::MlirCpu, ScheduleKind::MlirCuda}) {
        try {
            if (!j.is_discarded()) {
                ScheduleRecord r = ScheduleRecord::from_json(j, kind, "fuzz");
                if (!(ScheduleRecord::from_json(r.to_json(), kind, "fuzz") == r)) std::abort();
            }
        } catch (const UserError &) {
        }
        if (path_like) continue;
        try {
            check_schedule_overrides(kind, text);
            ScheduleRecord r = choose_schedule(plan, kind, Isa::Avx512, text);
            if (!(ScheduleRecord::from_json(r.to_json(), kind, "fuzz") == r)) std::abort();
        } catch (const UserError &) {
        }
    }
    return 0;
}
