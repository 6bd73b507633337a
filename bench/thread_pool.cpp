#include "bench/thread_pool.h"

#include <HalideRuntime.h>

#include <cstdint>
#include <cstdlib>
#include <thread>

namespace normgen::bench {

namespace {
int g_threads = 0;

struct TaskClosure {
    void (*body)(int, void *);
    void *ctx;
};

int run_task(void *, int task, uint8_t *closure) {
    auto *c = reinterpret_cast<TaskClosure *>(closure);
    c->body(task, c->ctx);
    return 0;
}
}  // namespace

int configure_threads() {
    if (g_threads > 0) return g_threads;
    int n = 0;
    if (const char *s = std::getenv("HL_NUM_THREADS")) n = std::atoi(s);
    if (n <= 0) n = (int)std::thread::hardware_concurrency();
    if (n <= 0) n = 1;
    halide_set_num_threads(n);
    g_threads = n;
    return n;
}

int bench_threads() { return configure_threads(); }

void parallel_tasks(int tasks, void (*body)(int, void *), void *ctx) {
    TaskClosure c{body, ctx};
    halide_do_par_for(nullptr, run_task, 0, tasks, reinterpret_cast<uint8_t *>(&c));
}

}  // namespace normgen::bench
