// The one `main` of normgen's executables (normgen, normgen-gen, normgen-mlir): runs a command and
// maps what escapes it to an exit code and a message on stderr.
//   exit 1  a user's mistake: Usage (with a pointer to --help), a located diagnostic
//           (DiagnosticError, printed as file:line:col with the line and a caret), a UserError
//   exit 2  a normgen bug: InternalError or any other exception (std:: or not), said to be one
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace normgen {

// `help`, when given, is printed (exit 0) for `-h`, `--help` or `help` as the first argument; tools
// without it answer --help themselves.
int run_tool(const std::string &name, int argc, char **argv, const std::function<int(const std::vector<std::string> &)> &command,
             const std::string &help = "");

}  // namespace normgen
