// Command-line parsing shared by the driver's subcommands.
#pragma once

#include "dsl/norm_spec.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace normgen {

// A usage mistake: the driver prints it with a hint to --help and exits 1.
struct Usage : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// "f32,bf16" or "all" -> types; throws Usage on an unknown name.
std::vector<DType> parse_dtypes(const std::string &list);
std::vector<std::string> split_list(const std::string &list);
// A --seed value: a non-negative integer; Usage otherwise.
uint64_t parse_seed(const std::string &s);
// `s` as one word of a POSIX shell command line (single-quoted), for the commands the tools run.
std::string shell_quote(const std::string &s);

struct VerifyArgs {
    std::vector<std::string> files;
    std::string backend = "halide";
    std::vector<DType> dtypes{DType::F32, DType::BF16, DType::F16};
    std::vector<std::string> targets{"host", "x86-64-avx2"};
    bool targets_given = false;
    bool json = false;
    bool quick = false;
    bool failures_only = false;
    bool grad = false;  // --grad: verify the backward of each declaration (dsl/grad.h)
    std::string variant = "full";  // --variant core|full: the kernel without or with the optional outputs
    uint64_t seed = 0;
    std::string schedule;  // --schedule: overrides of every kernel's schedule record ("" = defaults)
};
VerifyArgs parse_verify_args(const std::vector<std::string> &args);

// The build-time generators' options (normgen-gen, normgen-mlir): `compile FILE --out DIR ...`.
struct GenerateArgs {
    std::vector<std::string> files;
    std::string out, fragment, manifest, table, source, archive, schedule, cuda_schedule;
    std::string tuning;          // --tuning DIR: also one kernel per schedule its database chose (tuning_db.h)
    std::string streaming_tool;  // --streaming-tool PATH: normgen-mlir, for kernels with streaming stores
    std::string ptxas;           // --ptxas PATH: assembles the Halide CUDA kernels' PTX for sm_90 (none: not assembled)
    std::string gpu_schedule;    // --gpu-schedule KNOBS: overrides of the halide-gpu records
    std::string device;          // merge --device cuda: only the kernels of that device (the device pack's manifest)
    std::vector<std::string> variants;  // --variants core,full: only these (default: every variant of the declaration)
    std::vector<DType> dtypes{DType::F32, DType::BF16, DType::F16};
    std::vector<std::string> targets{"host", "x86-64-avx2"};
    bool cpu = true, cuda = false;  // normgen-mlir: --no-cpu, --cuda
    bool grad = false;              // --grad: compile the backward of the declaration (dsl/grad.h)
};
// `flags` lists the options beyond the common ones (--out --fragment --manifest --table --source
// --archive --schedule --dtype --tuning --variants) that this generator takes ("--target", "--cuda-schedule",
// "--no-cpu", "--cuda", "--streaming-tool"); any other option is a Usage error.
GenerateArgs parse_generate_args(const std::vector<std::string> &args, const std::vector<std::string> &flags);

}  // namespace normgen
