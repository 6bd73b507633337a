// The benchmarks' threads: Halide's own thread pool, the one that runs the generated kernels. The
// copy roofline, the input fill and the kernels all run on it, with one thread count for all.
#pragma once

#include <type_traits>

namespace normgen::bench {

// Sets the thread count of Halide's pool once, before any kernel runs: $HL_NUM_THREADS when set
// (Halide's own variable), else std::thread::hardware_concurrency(). halide_set_num_threads(n)
// makes the pool use n threads in total (the calling thread works too). Returns n.
int configure_threads();

// The count configure_threads() chose (it is called on first use if it was not yet).
int bench_threads();

// Runs body(task, ctx) for task in [0, tasks) on Halide's pool (halide_do_par_for), tasks handed
// out dynamically. `body` must not throw.
void parallel_tasks(int tasks, void (*body)(int task, void *ctx), void *ctx);

template <typename F>
void parallel_for(int tasks, F &&f) {
    using Fn = std::remove_reference_t<F>;
    parallel_tasks(tasks, [](int t, void *c) { (*static_cast<Fn *>(c))(t); }, (void *)&f);
}

}  // namespace normgen::bench
