#include "codegen/tool/tool_main.h"

#include "codegen/tool/options.h"
#include "dsl/diagnostics.h"
#include "runtime/errors.h"

#include <iostream>

namespace normgen {

int run_tool(const std::string &name, int argc, char **argv, const std::function<int(const std::vector<std::string> &)> &command,
             const std::string &help) {
    if (!help.empty() && argc > 1) {
        const std::string a = argv[1];
        if (a == "-h" || a == "--help" || a == "help") {
            std::cout << help;
            return 0;
        }
    }
    try {
        return command(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const Usage &e) {
        std::cerr << name << ": " << e.what() << "\n(see " << name << " --help)\n";
        return 1;
    } catch (const DiagnosticError &e) {
        std::cerr << e.render();
        return 1;
    } catch (const UserError &e) {
        std::cerr << name << ": error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << name << ": internal error: " << e.what() << "\n(this is a bug in normgen; please report it)\n";
        return 2;
    } catch (...) {
        // Not a std::exception (a library's own error type that no wrapper translated).
        std::cerr << name << ": internal error: an exception of an unknown type\n(this is a bug in normgen; please report it)\n";
        return 2;
    }
}

}  // namespace normgen
