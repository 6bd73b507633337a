#include "codegen/common/ptxas.h"

#include "codegen/tool/subprocess.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <stdexcept>

namespace normgen {

using nlohmann::json;

// ptxas -v, per kernel: "Used 24 registers, used 1 barriers, 1056 bytes smem" and "0 bytes stack
// frame, 0 bytes spill stores, 0 bytes spill loads".
json ptxas_stats(const std::string &log) {
    json j;
    auto most = [&](const char *re, const char *key) {
        long long m = 0;
        const std::regex r(re);
        for (auto it = std::sregex_iterator(log.begin(), log.end(), r); it != std::sregex_iterator(); ++it)
            m = std::max(m, std::stoll((*it)[1]));
        j[key] = m;
    };
    most("Used ([0-9]+) registers", "registers");
    most("([0-9]+) bytes spill stores", "spill_stores");
    most("([0-9]+) bytes spill loads", "spill_loads");
    most("([0-9]+) bytes stack frame", "stack_frame");
    most("([0-9]+) bytes smem", "shared_bytes");
    return j;
}

json assemble_ptx(const std::string &ptxas, const std::string &ptx_path, const std::string &cubin_path) {
    const std::string tmp = cubin_path + ".tmp";
    ProcessResult r = run_process({ptxas, "-arch=sm_90", "-v", ptx_path, "-o", tmp});
    if (r.status != 0) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw std::runtime_error("ptxas rejected " + ptx_path + " (exit " + std::to_string(r.status) + "):\n" + r.output);
    }
    std::filesystem::rename(tmp, cubin_path);
    return ptxas_stats(r.output);
}

}  // namespace normgen
