// What a tool prints when something that is not a std::exception escapes a command: Halide's
// errors (Halide::Error does not derive from std::exception) become internal errors with Halide's
// message, exit 2, instead of ending the program in std::terminate.
#include "codegen/halide/jit.h"
#include "codegen/tool/tool_main.h"

#include <catch2/catch.hpp>

#include <iostream>
#include <sstream>

using namespace normgen;

namespace {

// Runs `command` through run_tool with stderr captured.
int run_captured(const std::function<int(const std::vector<std::string> &)> &command, std::string &err) {
    char arg0[] = "tool";
    char *argv[] = {arg0, nullptr};
    std::ostringstream capture;
    std::streambuf *old = std::cerr.rdbuf(capture.rdbuf());
    const int rc = run_tool("tool", 1, argv, command);
    std::cerr.rdbuf(old);
    err = capture.str();
    return rc;
}

}  // namespace

TEST_CASE("a Halide error escaping a command is an internal error with Halide's message, exit 2", "[halide][cli]") {
    std::string err;
    const int rc = run_captured(hl::with_halide_errors([](const std::vector<std::string> &) -> int {
                                    throw Halide::InternalError("the lowering met something odd");
                                }),
                                err);
    CHECK(rc == 2);
    CHECK_THAT(err, Catch::Contains("tool: internal error: Halide: the lowering met something odd"));
    CHECK_THAT(err, Catch::Contains("bug in normgen"));
}

TEST_CASE("an exception of an unknown type is still an internal error, exit 2", "[cli]") {
    std::string err;
    CHECK(run_captured([](const std::vector<std::string> &) -> int { throw 42; }, err) == 2);
    CHECK_THAT(err, Catch::Contains("an exception of an unknown type"));
    // And a command that returns normally keeps its exit code.
    CHECK(run_captured([](const std::vector<std::string> &) { return 0; }, err) == 0);
}
