// Toolchain probe: the smallest Generator that still exercises what the real kernels will use —
// a buffer input, a scalar parameter, a vectorized and parallelized schedule, and a tail for widths
// that are not a multiple of the vector width. Built AOT by add_halide_library in CMakeLists.txt.
#include "Halide.h"

namespace {

class ProbeScaleAdd : public Halide::Generator<ProbeScaleAdd> {
public:
  Input<Buffer<float, 2>> input{"input"};  // dim 0 (x) is the contiguous one
  Input<float> scale{"scale"};
  Output<Buffer<float, 2>> output{"output"};

  void generate() {
    output(x, y) = input(x, y) * scale + 1.0f;
  }

  void schedule() {
    const int vec = natural_vector_size<float>();
    // GuardWithIf: a row narrower than the vector (d = 1, d = 17) is still correct; the default
    // tail strategy for outputs (ShiftInwards) would demand width >= vec and fail at run time.
    output.vectorize(x, vec, Halide::TailStrategy::GuardWithIf).parallel(y);
  }

private:
  Var x{"x"}, y{"y"};
};

}  // namespace

HALIDE_REGISTER_GENERATOR(ProbeScaleAdd, probe_scale_add)
