// Runs the built `normgen` binary as a user would, for the CLI tests.
#pragma once

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace normgen::testing {

struct Result {
    int code;
    std::string out;  // stdout and stderr together
};

// Runs build/bin/<program> with `args` (a shell command line).
inline Result tool_cli(const std::string &program, const std::string &args) {
    std::string cmd = std::string(NORMGEN_BINARY_DIR) + "/bin/" + program + " " + args + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline Result normgen_cli(const std::string &args) { return tool_cli("normgen", args); }

}  // namespace normgen::testing
