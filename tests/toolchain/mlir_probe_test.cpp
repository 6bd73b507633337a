// Runs the MLIR-built probe kernel (codegen/mlir/toolchain_probe.cpp), JIT-compiled from a module
// built through the C++ API, and compares it with a C++ loop; checks the AOT object path too.
#include <catch2/catch.hpp>

#include "toolchain_probe.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace {

// Random values in ±[0.5, 2): never zero, so a skipped element changes the sum.
std::vector<float> random_floats(std::int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = negative(rng) ? -mag(rng) : mag(rng);
  return v;
}

double reference_sum_of_squares(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

}  // namespace

TEST_CASE("MLIR probe: JIT-compiled sum of squares matches a C++ loop", "[toolchain][mlir]") {
  const std::int64_t n = GENERATE(as<std::int64_t>{}, 1, 2, 17, 1000, 65537);
  CAPTURE(n);
  std::mt19937 rng(static_cast<unsigned>(n));
  const std::vector<float> data = random_floats(n, rng);

  const double want = reference_sum_of_squares(data);
  const float got = normgen::mlir_probe::sum_of_squares(data.data(), n);
  CAPTURE(got, want);
  REQUIRE(std::isfinite(got));
  // Sequential f32 summation of positive terms errs by at most (n-1)·2^-24 of the sum: tight
  // enough that a dropped or doubled element fails for all but the largest n.
  REQUIRE(std::fabs(got - want) <= static_cast<double>(n) * std::ldexp(1.0, -24) * want);
}

TEST_CASE("MLIR probe: empty input sums to zero", "[toolchain][mlir]") {
  float dummy = 3.0f;
  REQUIRE(normgen::mlir_probe::sum_of_squares(&dummy, 0) == 0.0f);
}

TEST_CASE("MLIR probe: the kernel compiles to an ELF object exporting its C symbol",
          "[toolchain][mlir]") {
  const std::string path = std::string(NORMGEN_BINARY_DIR) + "/toolchain_mlir_probe.o";
  std::remove(path.c_str());
  normgen::mlir_probe::emit_sum_of_squares_object(path);

  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 64);
  CHECK(bytes.compare(0, 4, "\x7f" "ELF") == 0);
  // The symbol table holds the name as a plain string.
  CHECK(bytes.find(normgen::mlir_probe::kernel_c_symbol()) != std::string::npos);
}
