// Error kinds. A UserError is a bad call (wrong shape, missing input, unreadable file, bad option
// value): the tools print it and exit 1. An InternalError is a normgen bug (an invariant broken):
// the tools say so and exit 2; so does any other exception that escapes.
#pragma once

#include <stdexcept>
#include <string>

namespace normgen {

class UserError : public std::runtime_error {
public:
    explicit UserError(const std::string &msg) : std::runtime_error(msg) {}
};

class InternalError : public std::logic_error {
public:
    explicit InternalError(const std::string &msg) : std::logic_error(msg) {}
};

// Throws InternalError naming the place: for states a correct normgen never reaches.
[[noreturn]] inline void internal_error(const std::string &what, const char *file, int line) {
    throw InternalError(what + " (at " + file + ":" + std::to_string(line) + ")");
}

}  // namespace normgen

// NORMGEN_ASSERT(cond, "what broke"): an invariant of normgen itself, never a user's mistake.
#define NORMGEN_ASSERT(cond, what) \
    do {                           \
        if (!(cond)) ::normgen::internal_error(std::string("assertion failed: ") + #cond + ": " + (what), __FILE__, __LINE__); \
    } while (0)
