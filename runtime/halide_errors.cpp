#include "runtime/halide_errors.h"

#include <HalideRuntime.h>

#include <mutex>

// halide_set_error_handler is defined by the Halide runtime that comes with the kernels (the
// normgen_kernels library). The reference is strong on purpose: a program that links this library
// before the kernels' archive pulls the runtime object in from it.

namespace normgen {

namespace {

thread_local std::string t_error;  // messages of the calling thread
std::mutex g_mutex;
std::string g_last;                // the latest message of any thread (a worker's error)

void record_error(void * /*user_context*/, const char *msg) {
    std::string m = msg ? msg : "(no message)";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    if (!t_error.empty()) t_error += "\n";
    t_error += m;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_last = m;
}

}  // namespace

void install_halide_error_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        halide_set_error_handler(&record_error);
    });
}

std::string take_halide_error() {
    std::string m;
    m.swap(t_error);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (m.empty()) m = g_last;
    g_last.clear();
    return m;
}

}  // namespace normgen
