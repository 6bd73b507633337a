#include "codegen/tool/options.h"

#include "runtime/manifest_schema.h"

#include <algorithm>
#include <sstream>

namespace normgen {

std::vector<std::string> split_list(const std::string &list) {
    std::vector<std::string> r;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) r.push_back(item);
    return r;
}

std::vector<DType> parse_dtypes(const std::string &list) {
    if (list == "all") return {DType::F32, DType::BF16, DType::F16};
    std::vector<DType> r;
    for (const std::string &s : split_list(list)) {
        auto t = parse_dtype(s);
        if (!t || *t == DType::F64) throw Usage("--dtype: unknown storage type '" + s + "' (use f32, bf16, f16 or all)");
        r.push_back(*t);
    }
    if (r.empty()) throw Usage("--dtype: give at least one type");
    return r;
}

std::string shell_quote(const std::string &s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}

VerifyArgs parse_verify_args(const std::vector<std::string> &args) {
    VerifyArgs v;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&](const char *flag) -> std::string {
            if (i + 1 >= args.size()) throw Usage(std::string(flag) + " needs a value");
            return args[++i];
        };
        if (a == "--backend") v.backend = value("--backend");
        else if (a == "--dtype") v.dtypes = parse_dtypes(value("--dtype"));
        else if (a == "--target") {
            v.targets = split_list(value("--target"));
            v.targets_given = true;
        }
        else if (a == "--schedule") v.schedule = value("--schedule");
        else if (a == "--json") v.json = true;
        else if (a == "--quick") v.quick = true;
        else if (a == "--variant") {
            v.variant = value("--variant");
            if (v.variant != "core" && v.variant != "full") throw Usage("--variant: give core or full, not '" + v.variant + "'");
        }
        else if (a == "--failures") v.failures_only = true;
        else if (a == "--grad") v.grad = true;
        else if (a == "--seed") {
            v.seed = parse_seed(value("--seed"));
        } else if (!a.empty() && a[0] == '-') throw Usage("verify: unknown option '" + a + "'");
        else v.files.push_back(a);
    }
    if (v.files.empty()) throw Usage("verify: give at least one .norm file");
    if (v.backend != "halide" && v.backend != "mlir") throw Usage("verify: unknown backend '" + v.backend + "' (available: halide, mlir)");
    if (v.backend == "mlir") {
        // The MLIR CPU kernels are built for this host (mlir-cpu); the mlir-cuda kernels run here
        // emulated (cuda-emulated), on a GPU by normgen-cuda (the device pack).
        if (!v.targets_given) v.targets = {"host"};
        for (const std::string &t : v.targets)
            if (t != "host" && t != "cuda-emulated")
                throw Usage("verify: the mlir backend verifies target 'host' (mlir-cpu) or 'cuda-emulated' (mlir-cuda on this CPU) here, not '" + t + "'");
    }
    if (v.targets.empty()) throw Usage("--target: give at least one target");
    return v;
}

GenerateArgs parse_generate_args(const std::vector<std::string> &args, const std::vector<std::string> &flags) {
    GenerateArgs g;
    auto takes = [&](const std::string &f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw Usage(a + " needs a value");
            return args[++i];
        };
        if (a == "--out") g.out = value();
        else if (a == "--fragment") g.fragment = value();
        else if (a == "--manifest") g.manifest = value();
        else if (a == "--table") g.table = value();
        else if (a == "--source") g.source = value();
        else if (a == "--archive") g.archive = value();
        else if (a == "--schedule") g.schedule = value();
        else if (a == "--dtype") g.dtypes = parse_dtypes(value());
        else if (a == "--grad") g.grad = true;
        else if (a == "--tuning") g.tuning = value();
        else if (a == "--variants") {
            g.variants = split_list(value());
            for (const std::string &v : g.variants)
                if (!parse_variant(v)) throw Usage("--variants: '" + v + "' is not core or full");
        }
        else if (a == "--streaming-tool" && takes(a)) g.streaming_tool = value();
        else if (a == "--ptxas" && takes(a)) g.ptxas = value();
        else if (a == "--gpu-schedule" && takes(a)) g.gpu_schedule = value();
        else if (a == "--device" && takes(a)) g.device = value();
        else if (a == "--target" && takes(a)) g.targets = split_list(value());
        else if (a == "--cuda-schedule" && takes(a)) g.cuda_schedule = value();
        else if (a == "--no-cpu" && takes(a)) g.cpu = false;
        else if (a == "--cuda" && takes(a)) g.cuda = true;
        else if (!a.empty() && a[0] == '-') throw Usage("unknown option '" + a + "'");
        else g.files.push_back(a);
    }
    return g;
}

uint64_t parse_seed(const std::string &s) {
    size_t used = 0;
    uint64_t v = 0;
    try { v = std::stoull(s, &used); } catch (...) { used = 0; }
    if (used == 0 || used != s.size() || s[0] == '-') throw Usage("--seed: '" + s + "' is not a number");
    return v;
}

}  // namespace normgen
