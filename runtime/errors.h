// Error kinds at run time. A UserError is a bad call (wrong shape, missing input, unreadable file):
// the CLI prints it and exits 1. Anything else escaping is a normgen bug: exit 2.
#pragma once

#include <stdexcept>
#include <string>

namespace normgen {

class UserError : public std::runtime_error {
public:
    explicit UserError(const std::string &msg) : std::runtime_error(msg) {}
};

}  // namespace normgen
