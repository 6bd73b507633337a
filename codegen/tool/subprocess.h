// Running normgen's own helper programs (the build-time and tuning steps, never a kernel call):
// normgen-mlir beside the Halide tools (LLVM 22 steps), the system C++ compiler to link a tuning
// candidate into a shared object. Arguments are passed as a vector, never through a shell.
#pragma once

#include <string>
#include <vector>

namespace normgen {

struct ProcessResult {
    int status = -1;     // the exit status; 128 + N when killed by signal N; -1 when it could not start
    std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (searched on PATH when it has no slash) with the rest as arguments, waits for it,
// and returns its status and output.
ProcessResult run_process(const std::vector<std::string> &argv);

// A helper program spoken to line by line (normgen-measure, the tuner's timing process): its stdin
// and stdout are pipes, its stderr is this program's. It ignores SIGINT: the user's Ctrl-C belongs
// to this program, which decides what to keep and then ends the helper.
class LineProcess {
public:
    explicit LineProcess(const std::vector<std::string> &argv);  // throws std::runtime_error if it cannot start
    ~LineProcess();  // closes its stdin, waits a moment, then kills it
    LineProcess(const LineProcess &) = delete;
    LineProcess &operator=(const LineProcess &) = delete;
    void send(const std::string &line);
    // The next line it writes (without the newline); throws std::runtime_error once it has exited.
    std::string receive();

private:
    int pid_ = -1, to_ = -1, from_ = -1;
    std::string buffer_, name_;
};

// A program installed beside the running executable (normgen-mlir beside normgen or normgen-gen),
// or just `name` (to be found on PATH) when there is none.
std::string sibling_tool(const std::string &name);

}  // namespace normgen
