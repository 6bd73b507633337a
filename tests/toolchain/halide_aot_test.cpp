// Runs the AOT-compiled Halide probe (codegen/halide/toolchain_probe_generator.cpp) and compares it
// with a scalar loop: out(x, y) = in(x, y) * scale + 1.
#include <catch2/catch.hpp>

#include "HalideBuffer.h"
#include "HalideRuntime.h"
#include "probe_scale_add.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>

namespace {

using Buffer = Halide::Runtime::Buffer<float, 2>;

// Random values in ±[0.5, 2): never zero, so a kernel that writes zeros or skips elements shows.
Buffer random_buffer(int width, int height, std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  Buffer b(width, height);
  b.for_each_value([&](float& v) { v = negative(rng) ? -mag(rng) : mag(rng); });
  return b;
}

void check_shape(int width, int height) {
  CAPTURE(width, height);
  std::mt19937 rng(1234u + 7u * width + height);
  Buffer in = random_buffer(width, height, rng);
  const float scale = -1.375f;
  Buffer out(width, height);
  out.fill(std::numeric_limits<float>::quiet_NaN());  // poisoned: an unwritten element fails

  REQUIRE(probe_scale_add(in, scale, out) == 0);

  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const float want = in(x, y) * scale + 1.0f;
      CAPTURE(x, y, in(x, y), out(x, y), want);
      // Halide may contract to an FMA, so allow an ulp or so; a NaN fails this comparison.
      REQUIRE(std::fabs(out(x, y) - want) <= 1e-6f * std::max(1.0f, std::fabs(want)));
    }
  }
}

}  // namespace

TEST_CASE("Halide AOT probe matches a scalar loop", "[toolchain][halide]") {
  SECTION("1x1") { check_shape(1, 1); }
  SECTION("17x3, width not a multiple of the vector width") { check_shape(17, 3); }
  SECTION("3x17") { check_shape(3, 17); }
  SECTION("256x64, many full vectors and rows across threads") { check_shape(256, 64); }
  SECTION("1000x7") { check_shape(1000, 7); }
}

namespace {
std::string g_last_halide_error;
void record_halide_error(void*, const char* msg) { g_last_halide_error = msg; }
}  // namespace

TEST_CASE("Halide AOT probe rejects an input smaller than the output", "[toolchain][halide]") {
  // Proves the generated bounds checks are there: the kernel must refuse rather than read past `in`.
  // Halide's default error handler aborts the process; a library reports instead, as normgen's
  // runtime will, so install a handler that records the message (and restore the old one after).
  g_last_halide_error.clear();
  halide_error_handler_t previous = halide_set_error_handler(record_halide_error);

  std::mt19937 rng(42);
  Buffer in = random_buffer(8, 2, rng);
  Buffer out(16, 2);
  out.fill(7.0f);
  const int rc = probe_scale_add(in, 2.0f, out);
  halide_set_error_handler(previous);

  CAPTURE(g_last_halide_error);
  CHECK(rc != 0);
  CHECK(g_last_halide_error.find("input") != std::string::npos);
  out.for_each_value([](float v) { REQUIRE(v == 7.0f); });
}
