// The lab's schedule: a copy of codegen/halide/schedule.cpp with extra knobs, used only to measure
// schedule changes (bench/lab/README section in bench/README.md). codegen/ stays untouched.
#pragma once

#include "codegen/halide/schedule.h"

#include <string>

namespace normgen::bench::lab {

struct LabSchedule {
    hl::CpuSchedule base;        // the production knobs (vector width, task size, row schedule)
    // LAB: lanes of each row reduction's accumulator (0 = the vector width). A multiple of the
    // vector width gives reduce_lanes / vector_width independent accumulators, so the add chain of
    // a reduction pass is no longer one vector long (4-cycle add latency per 16 floats on AVX-512).
    int reduce_lanes = 0;
};

std::string lab_schedule_cpu(hl::LoweredPipeline &p, const NormSpec &spec, const Halide::Target &target, const LabSchedule &s);

}  // namespace normgen::bench::lab
