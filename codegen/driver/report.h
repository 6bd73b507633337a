// `normgen report RESULTS.json -o DIR`: Google Benchmark JSON from bench/normgen_bench into a
// markdown report (per layer and case: each implementation's GB/s, % of the copy rooflines,
// speedup over the best vendor; a summary; every case normgen loses) and one PNG plot per layer.
#pragma once

#include <string>
#include <vector>

namespace normgen {

struct ReportOptions {
    // Google Benchmark JSON (--benchmark_out_format=json): one run, or several runs of the same
    // grid, merged per case: every row of a case from the run whose tuned row is the case's median
    // (so a case's rows and its limit come from one run).
    std::vector<std::string> inputs;
    std::string out_dir;     // created if missing; report.md, data.json, LAYER.png
    bool plots = true;       // --no-plots: markdown only
    bool print = false;      // --print: also write the markdown to stdout
};

// Throws UserError on a missing/malformed file or one without normgen_bench rows (nothing is
// written then). Returns 0; plots that could not be drawn (no python3/matplotlib) are reported on
// stderr and leave the markdown in place.
int run_report(const ReportOptions &opt);

}  // namespace normgen
