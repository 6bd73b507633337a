// The kernel registry: the generated kernels a program was linked with, described by the manifest
// the build wrote beside them, and the choice of one for a layer, a storage type and this CPU.
//
// The manifest (JSON, written by normgen-gen into the build tree as generated/manifest.json):
//
//   { "normgen_manifest": 1,
//     "kernels": [ {
//         "function": "layer_norm__f32__avx512__core",  // C symbol; the entry point is <function>_argv
//         "layer": "layer_norm", "source": "dsl/catalog/layer_norm.norm",
//         "norm": "<canonical .norm text>",
//         "dtype": "f32",                // the storage type asked for: f32 | bf16 | f16
//         "target": "<backend target>", "isa": "avx512" | "avx2" | "sm_90",
//         "cpu_features": ["avx2", "fma", ...],      // __builtin_cpu_supports names
//         "variant": "core" | "full",    // core: required outputs; full: optional outputs too
//         "backend": "halide" | "mlir",  // absent: halide
//         "device": "cpu" | "cuda" | "opencl",  // absent: cpu. MLIR CUDA entries carry "ptx", "cubin",
//                                        // "entry", "block_threads", "grid_axes", "extent_axes", "ptxas";
//                                        // Halide GPU entries are host code (in the kernel table) that
//                                        // launches their device code: CUDA ones carry "ptx" and "ptxas"
//         "bits_storage": ["f16", "bf16"], // these types' buffers typed uint16, the same bits (a GPU
//                                        // kernel whose device lacks the type, or Halide its codegen)
//         "split": {"axes": [...], "dims": [[...]]},  // MLIR CPU: runtime/mlir_abi.h
//         "schedule": {"kind": "halide-cpu", "knobs": {...}},  // the schedule record
//         "schedule_text": "row schedule: ...",              // what it did, in words
//         "library": "kernels/layer_norm.halide.a",   // the archive holding it (one per .norm file and backend)
//         "grad_of": "layer_norm",       // a backward kernel (layer layer_norm_grad); absent: a forward one
//         "tuned": [{"shape": {...}, "cpu": {...}, "sizes": {...}, "gbps": G, "frac": F, "limit": "copy_nt"}],
//                                        // the shape classes tuning chose this kernel for (select_for)
//         "tuned_only": true,            // a kernel built for those classes alone (absent: a default kernel)
//         "requires": {"alignment": 32, "outputs": ["y"], "multiple_of": {"d": 8}, "extent": {"cg": 10}},
//                                        // what a call must give (run_kernel checks): streaming stores'
//                                        // alignment, a fixed extent (each part optional)
//         "header": "kernels/<function>.h",            // file paths are relative to the manifest's folder
//         "args": [ { "name": "x", "role": "input" | "param" | "output", "dtype": "f32",
//                     "dims": ["rows", "d"],         // declared axes, memory order, outermost first
//                     "buffer_dims": ["d", "rows"],  // halide_buffer_t dims, innermost first, atomic axes
//                     "optional": false, "updates": "" }, ... ] } ] }
//
// The args are in the kernel's argument order: inputs and params (NormSpec::tensors order), then
// the outputs. Loading checks every entry against its own `norm` text, so a manifest that does not
// match the declaration it carries is refused rather than run.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/kernel_table.h"
#include "runtime/manifest_schema.h"
#include "runtime/shapes.h"
#include "runtime/tensor.h"
#include "codegen/common/kernel_plan.h"
#include "codegen/common/tuning_keys.h"

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace normgen {

struct KernelArg {
    enum Role { Input, Param, Output };
    std::string name;
    Role role = Input;
    DType dtype = DType::F32;
    std::vector<std::string> dims;         // declared axes, outermost first
    std::vector<std::string> buffer_dims;  // halide_buffer_t dimensions, innermost first (atomic axes)
    std::vector<AxisId> buffer_axes;       // the atomic axis id of each buffer dimension
    bool optional = false;                 // an optional output (saved statistics)
    std::string updates;                   // the input this output may overwrite in place, or ""
};

const char *role_name(KernelArg::Role r);  // "input", "param", "output"

class Registry {
public:
    struct Kernel {
        std::string function;   // C symbol of the pipeline; `argv` is <function>_argv
        std::string layer;
        std::string source;
        std::string norm;       // canonical declaration text
        DType dtype = DType::F32;  // the storage type asked for (the manifest's "dtype")
        std::string target;
        Isa isa = Isa::Avx2;
        std::vector<std::string> cpu_features;
        Variant variant = Variant::Core;
        Backend backend = Backend::Halide;  // the manifest's "backend" (absent = halide)
        Device device = Device::Cpu;        // MLIR CUDA kernels are listed, never bound to the table; Halide GPU ones are
        std::vector<DType> bits_storage;    // f16/bf16 whose buffers are uint16 (the same bits): OpenCL, CUDA's bf16
        struct Cuda {                    // device "cuda" only (a Halide one: ptx and the ptxas figures)
            std::string image, ptx;      // the cubin and the PTX it was assembled from (manifest folder)
            std::string entry;           // the kernel's name in the image
            int block_threads = 256;
            std::vector<std::string> grid_axes, extent_axes;
            int registers = 0, spill_stores = 0, spill_loads = 0;  // ptxas -v
            // The two-kernel form (column sums): `entry` runs on min(rows, column_blocks) blocks, a
            // row being one index of `row_axes`, writing per-block partials into one scratch buffer
            // per `scratch` output ([blocks, its axes], accumulation type), then `final_entry`
            // reduces them; a `scratch` statistic is a per-block buffer the main kernel keeps to
            // itself. Both take the memrefs, the scratch memrefs (in `scratch` order), the extents
            // and the block count. "" when one kernel.
            std::string final_entry;
            std::vector<std::string> row_axes;
            int column_blocks = 0;
            struct Scratch {
                std::string output;     // a column output's partials, or
                std::string statistic;  // a statistic held per block ("" for partials)
                std::vector<std::string> axes;
                DType dtype = DType::F32;  // the declaration's accumulation type
            };
            std::vector<Scratch> scratch;
        } cuda;
        std::string schedule;         // what the schedule did, in words (the manifest's "schedule_text")
        std::string schedule_record;  // the schedule record, JSON (the manifest's "schedule")
        std::string library, header;
        std::string grad_of;          // a backward kernel (`normgen grad`): the forward layer; "" otherwise
        // What a call must give this kernel (the manifest's "requires"): streaming stores need the
        // outputs' data aligned to `alignment` bytes and axis `axis` a multiple of `multiple`; a
        // kernel with a fixed extent (fixed_inner_extent) takes only `fixed_extent` along
        // `fixed_axis`. Nothing set: any dense call.
        struct Requirement {
            int alignment = 0;
            std::vector<std::string> outputs;
            std::string axis;
            int64_t multiple = 1;
            std::string fixed_axis;
            int64_t fixed_extent = 0;
            bool any() const { return alignment > 0 || fixed_extent > 0; }
        } requirement;
        // The shape classes a tuned kernel won (the manifest's "tuned", written from the tuning
        // database by the generators): each with the CPU it was measured on and what it reached.
        struct Tuned {
            ShapeClass shape;
            CpuFingerprint cpu;
            std::map<std::string, int64_t> sizes;
            double gbps = 0, frac = 0;
            double vs_fallback = 0;  // its speedup over the Halide default there (foreign_refusal)
            std::string limit;
        };
        std::vector<Tuned> tuned;
        bool tuned_only = false;  // built for its tuned classes alone (select() never returns it)
        std::shared_ptr<const KernelPlan> plan;  // the kernel's plan (its shape classes are computed from it)
        std::vector<KernelArg> args;  // in argument order
        int (*argv)(void **) = nullptr;
        std::shared_ptr<const NormSpec> spec;  // parsed from `norm`, shared by the layer's kernels

        bool full() const { return variant == Variant::Full; }
        const KernelArg *find_arg(const std::string &name) const;  // nullptr if not an argument
        StorageMap storage() const;  // the storage type of every argument (what the reference needs)
        bool runs_here() const;  // a CPU kernel whose every cpu feature this CPU supports
        // Whether a call may take this kernel (its requirement met); "" when it may, else why not.
        std::string refuses(const std::map<std::string, TensorView> &tensors, const AxisExtents &ext) const;
    };

    // A kernel chosen for a call's shapes (select_for), and why.
    struct Selection {
        const Kernel *kernel = nullptr;  // nullptr when the layer has no kernel for the type here
        ShapeClass shape;                // the call's shape class on this CPU
        std::string why;                 // one line: the tuned class and CPU it won, or why the default
    };

    Registry() = default;
    Registry(Registry &&) = default;
    Registry &operator=(Registry &&) = default;

    // Reads the manifest and binds each kernel to its entry in `table`. Throws UserError naming the
    // path on a missing or unreadable file, bad JSON, a malformed entry, a `norm` text that does not
    // check or does not match the entry's args, or a function absent from the table.
    static Registry load(const std::string &manifest_path, const KernelEntry *table, size_t n);

    const std::string &path() const { return path_; }
    std::vector<const Kernel *> kernels() const;
    const Kernel *find(const std::string &function) const;  // nullptr if absent
    std::shared_ptr<const NormSpec> spec(const std::string &layer) const;  // nullptr if absent

    // The best kernel for `layer` with storage type `dtype` that this CPU can run: the widest ISA
    // whose cpu_features are all supported (avx512, then avx2), restricted to `isa` when given;
    // the core variant unless `need_optional_outputs` (then full; a layer without optional
    // outputs has only core, which then writes everything), of `backend`. nullptr when none fits.
    const Kernel *select(const std::string &layer, DType dtype, bool need_optional_outputs,
                         std::optional<Isa> isa = std::nullopt, Backend backend = Backend::Halide) const;
    // The kernel of `layer` for a device (cuda, opencl: a Halide GPU kernel, host code that
    // launches it, run by run_kernel; cpu: any, whatever this CPU runs), nullptr when none. The
    // device itself may be absent from this machine: run_kernel says so.
    const Kernel *select_device(const std::string &layer, DType dtype, Device device, bool need_optional_outputs = false,
                                Backend backend = Backend::Halide) const;
    // The backward kernel of forward layer `layer` (its `normgen grad` declaration, layer
    // <layer>_grad, built with GRAD ON / the catalog's grad kernels), chosen as select() chooses.
    const Kernel *select_grad(const std::string &layer, DType dtype, std::optional<Isa> isa = std::nullopt,
                              Backend backend = Backend::Halide) const;

    // Dispatch by shape: the kernel, of either backend, that tuning chose for the call's shape class
    // on the CPU nearest this one (codegen/common/tuning_keys.h: the same class, or one within
    // kNearShape octaves; this CPU's own choices, or another's that foreign_refusal lets travel), among the kernels that run
    // here and whose requirement the call meets (a streaming-store kernel needs its outputs aligned:
    // an unaligned call takes the next choice); else the default Halide kernel, select()'s. The
    // tensors are the call's (run_kernel's map); their shapes bind the axes as run_kernel does.
    Selection select_for(const std::string &layer, DType dtype, const std::map<std::string, TensorView> &tensors,
                         bool need_optional_outputs = false) const;
    // The same from sizes by axis name (no tensors: the pointers' alignment is taken as met when
    // `aligned` is true, else a kernel with a requirement is skipped).
    Selection select_for_sizes(const std::string &layer, DType dtype, const std::map<std::string, int64_t> &sizes,
                               bool need_optional_outputs = false, bool aligned = true) const;
    // select_for of the backward kernel of forward layer `layer` (<layer>_grad).
    Selection select_grad_for(const std::string &layer, DType dtype, const std::map<std::string, TensorView> &tensors) const;

private:
    Selection choose(const std::string &layer, DType dtype, const std::vector<int64_t> &extents, bool need_optional_outputs,
                     const std::map<std::string, TensorView> *tensors, bool aligned) const;
    std::string path_;
    std::vector<std::unique_ptr<Kernel>> kernels_;
    std::map<std::string, std::shared_ptr<const NormSpec>> specs_;
};

// Whether this CPU supports a feature, by its __builtin_cpu_supports name ("avx2", "avx512f",
// "sse4.1", ...). Unknown names are unsupported.
bool cpu_supports(const std::string &feature);

// The ISA this CPU gets: Avx512 (AVX-512 F/CD/BW/DQ/VL), Avx2 (AVX2, FMA, F16C), or none. A
// kernel's own cpu_features decide whether it runs (Kernel::runs_here). cpu_isa_name(): its name,
// or "none".
std::optional<Isa> cpu_isa();
std::string cpu_isa_name();

// $NORMGEN_MANIFEST when set and not empty, else `compiled_in`.
std::string manifest_path_from_env(const std::string &compiled_in);

}  // namespace normgen

// The manifest path compiled into the program: the normgen_kernels target defines
// NORMGEN_DEFAULT_MANIFEST (the manifest.json of its build tree) for everything that links it.
#ifdef NORMGEN_DEFAULT_MANIFEST
#define NORMGEN_COMPILED_MANIFEST_PATH NORMGEN_DEFAULT_MANIFEST
#else
#define NORMGEN_COMPILED_MANIFEST_PATH "generated/manifest.json"
#endif

namespace normgen {
// Defined here (internal linkage) rather than in registry.cpp so that it sees the definition of the
// translation unit that calls it, which is where the kernels' target puts NORMGEN_DEFAULT_MANIFEST.
static inline std::string default_manifest_path() { return manifest_path_from_env(NORMGEN_COMPILED_MANIFEST_PATH); }
}  // namespace normgen
