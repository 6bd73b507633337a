// .npy I/O (runtime/npy.h) and the f16 / bf16 conversions (runtime/half.h): what the golden cases
// and `normgen run` exchange data through, and how a reduced-precision kernel's inputs and outputs
// are rounded. Round trips are exact; malformed files are user errors that name the file; the
// conversions round to nearest even, checked against an independent brute-force rounding.
#include "runtime/errors.h"
#include "runtime/half.h"
#include "runtime/npy.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace normgen;
namespace fs = std::filesystem;
using Shape = std::vector<int64_t>;

namespace {

// A fresh folder per test run, removed at the end.
struct TempDir {
    fs::path path;
    TempDir() {
        std::random_device rd;
        path = fs::temp_directory_path() / ("normgen_npy_test_" + std::to_string(rd()) + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string file(const std::string &name) const { return (path / name).string(); }
};

std::string slurp(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void spit(const std::string &path, const std::string &bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), (std::streamsize)bytes.size());
}

// A version-1.0 .npy file with the given header dict and raw payload, padded as NumPy does.
std::string npy_bytes(const std::string &dict, const std::string &payload, char version = 1) {
    std::string header = dict;
    size_t pre = version == 1 ? 10 : 12;
    size_t total = pre + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::string b = std::string("\x93NUMPY", 6) + version + '\0';
    if (version == 1) {
        b += (char)(header.size() & 0xff);
        b += (char)(header.size() >> 8);
    } else {
        for (int i = 0; i < 4; ++i) b += (char)((header.size() >> (8 * i)) & 0xff);
    }
    return b + header + payload;
}

template <typename T>
std::string raw(const std::vector<T> &v) {
    return std::string((const char *)v.data(), v.size() * sizeof(T));
}

// read_npy(path) must throw UserError, and the message must name the file.
void check_user_error(const std::string &path, const std::string &what) {
    INFO(what << ": " << path);
    try {
        HostTensor t = read_npy(path);
        FAIL_CHECK("no error; read shape " << shape_text(t.shape));
    } catch (const UserError &e) {
        std::string msg = e.what();
        INFO("message: " << msg);
        CHECK(msg.find(path) != std::string::npos);
    } catch (const std::exception &e) {
        FAIL_CHECK("not a UserError: " << e.what());
    }
}

bool is_half_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// The value of an IEEE binary16 bit pattern, from the definition (independent of half_to_float).
double half_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? std::ldexp((double)man, -24) : std::ldexp(1024.0 + man, exp - 25);
    return sign ? -v : v;
}

// Round-to-nearest-even to binary16 by brute force over the 31744 finite non-negative halves.
uint16_t half_rne_brute(float f) {
    static const std::vector<double> values = [] {
        std::vector<double> v;
        for (uint32_t h = 0; h <= 0x7bff; ++h) v.push_back(half_value((uint16_t)h));
        v.push_back(65536.0);  // the next step after 65504: rounding there means Inf
        return v;
    }();
    double a = std::fabs((double)f);
    uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isinf(f)) return sign | 0x7c00;
    auto it = std::upper_bound(values.begin(), values.end(), a);  // first value > a
    if (it == values.end()) return sign | 0x7c00;
    size_t hi = it - values.begin(), lo = hi - 1;
    double dlo = a - values[lo], dhi = values[hi] - a;  // exact: a and the halves are floats
    size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return (uint16_t)(sign | (pick >= 0x7c00 ? 0x7c00 : pick));
}

// Round-to-nearest-even to bfloat16 from the definition: the two neighbours are the float with the
// low 16 bits cleared and the next bfloat16 up (in magnitude).
uint16_t bf16_rne_brute(float f) {
    uint32_t b = float_to_bits(f);
    uint32_t lo = b & 0xffff0000u, hi = lo + 0x10000u;
    double a = std::fabs((double)f), vlo = std::fabs((double)bits_to_float(lo));
    double vhi = (hi & 0x7fffffffu) >= 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs((double)bits_to_float(hi));
    double dlo = a - vlo, dhi = vhi - a;
    uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (((lo >> 16) & 1u) == 0 ? lo : hi);
    return (uint16_t)(pick >> 16);
}

float f(double v) { return (float)v; }

}  // namespace

// ---- .npy round trips ------------------------------------------------------------------------------

TEST_CASE("write_npy / read_npy round-trip f64 exactly and f32 to float rounding", "[runtime][npy]") {
    TempDir dir;
    std::mt19937_64 rng(std::random_device{}());
    std::normal_distribution<double> nd;
    const Shape shapes[] = {{}, {1}, {3}, {2, 3, 4}, {1, 1, 129}};
    for (const Shape &shape : shapes) {
        INFO("shape " << shape_text(shape));
        HostTensor t{shape, {}};
        for (int64_t i = 0; i < t.numel(); ++i) t.data.push_back(nd(rng) * std::pow(10.0, (int)(i % 7) - 3));
        if (t.numel() >= 3) {  // values that must survive: -0, a subnormal, an irrational
            t.data[0] = -0.0;
            t.data[1] = 4.9406564584124654e-324;
            t.data[2] = std::acos(-1.0);
        }

        std::string p64 = dir.file("a64.npy"), p32 = dir.file("a32.npy");
        write_npy(p64, t, NpyType::F64);
        write_npy(p32, t, NpyType::F32);
        CHECK_FALSE(fs::exists(p64 + ".tmp"));
        CHECK_FALSE(fs::exists(p32 + ".tmp"));

        HostTensor r64 = read_npy(p64), r32 = read_npy(p32);
        CHECK(r64.shape == shape);
        CHECK(r32.shape == shape);
        REQUIRE(r64.data.size() == t.data.size());
        REQUIRE(r32.data.size() == t.data.size());
        for (size_t i = 0; i < t.data.size(); ++i) {
            INFO("element " << i);
            CHECK(std::memcmp(&r64.data[i], &t.data[i], 8) == 0);  // bit-exact, -0 included
            double want32 = (double)(float)t.data[i];
            CHECK(std::memcmp(&r32.data[i], &want32, 8) == 0);
        }

        // The file is what NumPy writes: magic, version 1.0, the header padded so the data starts on
        // a 64-byte boundary and ends in '\n', the shape as a Python tuple, then the payload.
        for (const auto &[path, descr, elem] : {std::tuple<std::string, std::string, size_t>{p64, "<f8", 8},
                                                 std::tuple<std::string, std::string, size_t>{p32, "<f4", 4}}) {
            std::string b = slurp(path);
            REQUIRE(b.size() >= 10);
            CHECK(b.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
            size_t hlen = (unsigned char)b[8] | ((unsigned char)b[9] << 8);
            CHECK((10 + hlen) % 64 == 0);
            std::string header = b.substr(10, hlen);
            CHECK(header.back() == '\n');
            CHECK(header.find("'descr': '" + descr + "'") != std::string::npos);
            CHECK(header.find("'fortran_order': False") != std::string::npos);
            std::string tuple = shape.empty() ? "()" : shape.size() == 1 ? "(" + std::to_string(shape[0]) + ",)" : "(";
            if (shape.size() > 1) {
                for (size_t i = 0; i < shape.size(); ++i) tuple += (i ? ", " : "") + std::to_string(shape[i]);
                tuple += ")";
            }
            INFO("header " << header);
            CHECK(header.find("'shape': " + tuple) != std::string::npos);
            CHECK(b.size() == 10 + hlen + elem * (size_t)t.numel());
        }
    }
}

TEST_CASE("read_npy reads the other dtypes it promises: f16, i4, i8, and format 2.0", "[runtime][npy]") {
    TempDir dir;
    std::string p = dir.file("h.npy");
    spit(p, npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }",
                      raw(std::vector<uint16_t>{0x3c00, 0xc000, 0x0001, 0x7bff})));
    HostTensor h = read_npy(p);
    CHECK(h.shape == Shape{4});
    CHECK(h.data == std::vector<double>{1.0, -2.0, std::ldexp(1.0, -24), 65504.0});

    spit(p, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", raw(std::vector<int32_t>{-7, 0, 2147483647, -2147483647 - 1})));
    HostTensor i4 = read_npy(p);
    CHECK(i4.shape == Shape{2, 2});
    CHECK(i4.data == std::vector<double>{-7, 0, 2147483647.0, -2147483648.0});

    spit(p, npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", raw(std::vector<int64_t>{-5, 1ll << 40, 3})));
    CHECK(read_npy(p).data == std::vector<double>{-5, std::ldexp(1.0, 40), 3});

    spit(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", raw(std::vector<double>{1.5, -0.25}), 2));
    HostTensor v2 = read_npy(p);
    CHECK(v2.shape == Shape{2});
    CHECK(v2.data == std::vector<double>{1.5, -0.25});
}

TEST_CASE("read_npy reads every golden file", "[runtime][npy][golden]") {
    std::string golden = NORMGEN_GOLDEN_DIR;
    INFO("NORMGEN_GOLDEN_DIR = " << golden);
    REQUIRE(fs::is_directory(golden));
    int files = 0;
    for (const auto &e : fs::recursive_directory_iterator(golden)) {
        if (e.path().extension() != ".npy") continue;
        INFO(e.path().string());
        HostTensor t = read_npy(e.path().string());
        ++files;
        CHECK(!t.shape.empty());
        CHECK((int64_t)t.data.size() == t.numel());
        for (double v : t.data) CHECK(std::isfinite(v));
        // The golden files are version 1.0, little-endian float64, C order (golden/README.md).
        std::string b = slurp(e.path().string());
        CHECK(b.size() == 10 + ((unsigned char)b[8] | ((unsigned char)b[9] << 8)) + 8 * (size_t)t.numel());
    }
    CHECK(files >= 80);
    HostTensor x = read_npy(golden + "/layer_norm/x.npy");
    CHECK(x.shape == Shape{5, 37});
    HostTensor q = read_npy(golden + "/qk_norm/q.npy");
    CHECK(q.shape == Shape{2, 5, 4, 16});
    HostTensor g = read_npy(golden + "/scale_norm/g.npy");
    REQUIRE(g.shape == Shape{1});
    CHECK(g.data[0] == 1.75);
}

TEST_CASE("malformed .npy files are user errors that name the file", "[runtime][npy][negative]") {
    TempDir dir;
    const std::string good_dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
    const std::string payload = raw(std::vector<double>{1, 2, 3});
    {
        std::string p = dir.file("ok.npy");
        spit(p, npy_bytes(good_dict, payload));
        CHECK(read_npy(p).data == std::vector<double>{1, 2, 3});  // the baseline the bad files break
    }
    struct Bad {
        const char *name, *what;
        std::string bytes;
    };
    std::string good = npy_bytes(good_dict, payload);
    std::string bad_magic = good;
    bad_magic[1] = 'X';
    std::string bad_version = good;
    bad_version[6] = 9;
    const Bad bad[] = {
        {"missing.npy", "missing file", ""},
        {"empty.npy", "empty file", std::string()},
        {"magic.npy", "bad magic", bad_magic},
        {"text.npy", "not a .npy at all", "x,y\n1,2\n"},
        {"version.npy", "unknown format version", bad_version},
        {"header.npy", "truncated header", good.substr(0, 30)},
        {"data.npy", "truncated data", good.substr(0, good.size() - 5)},
        {"nodata.npy", "header only", good.substr(0, good.size() - payload.size())},
        {"c16.npy", "unsupported dtype <c16", npy_bytes("{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }", payload + payload)},
        {"be.npy", "big-endian >f8", npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }", payload)},
        {"u1.npy", "unsupported dtype |u1", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "abc")},
        {"fortran.npy", "Fortran order", npy_bytes("{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }", payload)},
        {"nodescr.npy", "no descr", npy_bytes("{'fortran_order': False, 'shape': (3,), }", payload)},
        {"noshape.npy", "no shape", npy_bytes("{'descr': '<f8', 'fortran_order': False, }", payload)},
    };
    for (const Bad &b : bad) {
        std::string p = dir.file(b.name);
        if (std::string(b.name) != "missing.npy") spit(p, b.bytes);
        check_user_error(p, b.what);
    }
}

TEST_CASE("a header whose shape is absurd is a user error, not bad_alloc or a wrong shape", "[runtime][npy][negative]") {
    // A damaged or hostile header must not make the reader allocate what the file does not hold,
    // overflow the element count, or misread a dimension: each is a malformed file (UserError).
    // (A plainly huge claim such as (100000000000,) also escapes as std::bad_alloc today; it is left
    // out here because, where the kernel overcommits memory, the reader would zero-fill it and be
    // killed rather than throw. The cases below fail fast whatever the allocator does.)
    TempDir dir;
    const std::string six = raw(std::vector<double>{1, 2, 3, 4, 5, 6});
    const struct {
        const char *name, *shape;
    } bad[] = {
        {"wrap.npy", "(4611686018427387904,)"},    // 2^62 elements: bytes = 2^65 wraps size_t
        {"product.npy", "(4294967296, 4294967296)"},  // the element count overflows int64
        {"digits.npy", "(99999999999999999999,)"},  // does not fit an int64
        {"negative.npy", "(3, -2)"},               // NumPy never writes this; not [3, 2]
    };
    for (const auto &b : bad) {
        std::string p = dir.file(b.name);
        spit(p, npy_bytes(std::string("{'descr': '<f8', 'fortran_order': False, 'shape': ") + b.shape + ", }", six));
        check_user_error(p, std::string("shape ") + b.shape);
    }
}

TEST_CASE("write_npy to a path it cannot write is a user error that names the file", "[runtime][npy][negative]") {
    TempDir dir;
    std::string p = dir.file("no/such/folder/x.npy");
    try {
        write_npy(p, HostTensor{{2}, {1, 2}});
        FAIL("no error");
    } catch (const UserError &e) {
        CHECK(std::string(e.what()).find(p) != std::string::npos);
    }
    CHECK_FALSE(fs::exists(p));
    CHECK_FALSE(fs::exists(p + ".tmp"));
}

// ---- f16 and bf16 --------------------------------------------------------------------------------

TEST_CASE("half_to_float gives the IEEE binary16 value of every bit pattern", "[runtime][half]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        float v = half_to_float((uint16_t)h);
        INFO("half 0x" << std::hex << h);
        if (is_half_nan((uint16_t)h)) {
            REQUIRE(std::isnan(v));
            continue;
        }
        if ((h & 0x7fff) == 0x7c00) {
            REQUIRE(std::isinf(v));
            REQUIRE(std::signbit(v) == (h >> 15 == 1));
            continue;
        }
        REQUIRE((double)v == half_value((uint16_t)h));
        REQUIRE(std::signbit(v) == (h >> 15 == 1));  // -0 stays -0
    }
}

TEST_CASE("float_to_half(half_to_float(h)) == h for all 65536 patterns but NaN payloads", "[runtime][half]") {
    int nans = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        uint16_t back = float_to_half(half_to_float((uint16_t)h));
        INFO("half 0x" << std::hex << h << " -> 0x" << back);
        if (is_half_nan((uint16_t)h)) {
            ++nans;
            REQUIRE(is_half_nan(back));  // a NaN stays a NaN (never Inf), with its sign
            REQUIRE((back & 0x8000) == (h & 0x8000));
            continue;
        }
        REQUIRE(back == h);
    }
    CHECK(nans == 2 * 1023);
}

TEST_CASE("bf16_to_float / float_to_bf16 round-trip all 65536 patterns but NaN payloads", "[runtime][half]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        float v = bf16_to_float((uint16_t)h);
        uint16_t back = float_to_bf16(v);
        INFO("bf16 0x" << std::hex << h << " -> 0x" << back);
        if (is_bf16_nan((uint16_t)h)) {
            REQUIRE(std::isnan(v));
            REQUIRE(is_bf16_nan(back));
            continue;
        }
        REQUIRE(back == h);
    }
}

TEST_CASE("float_to_half rounds to nearest, ties to even", "[runtime][half]") {
    // Ties between two halves: the even one wins.
    CHECK(float_to_half(f(1 + std::ldexp(1.0, -11))) == 0x3c00);      // 1 | 1 + 2^-10: down to even 1.0
    CHECK(float_to_half(f(1 + 3 * std::ldexp(1.0, -11))) == 0x3c02);  // 0x3c01 (odd) | 0x3c02: up
    CHECK(float_to_half(f(-(1 + 3 * std::ldexp(1.0, -11)))) == 0xbc02);
    CHECK(float_to_half(f(1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -23))) == 0x3c01);  // just above a tie: up
    CHECK(float_to_half(f(1 + 3 * std::ldexp(1.0, -11) - std::ldexp(1.0, -23))) == 0x3c01);  // just below: down
    CHECK(float_to_half(f(2047.5)) == 0x6800);  // 2047 (odd, 0x67ff) | 2048: up, carrying into the exponent
    CHECK(float_to_half(f(2046.5)) == 0x67fe);  // 2046 (even) | 2047: down
    // Subnormal ties (steps of 2^-24).
    CHECK(float_to_half(f(std::ldexp(1.0, -25))) == 0x0000);      // 0 | 2^-24: down to 0
    CHECK(float_to_half(f(3 * std::ldexp(1.0, -25))) == 0x0002);  // 1 (odd) | 2: up
    CHECK(float_to_half(f(5 * std::ldexp(1.0, -25))) == 0x0002);  // 2 (even) | 3: down
    CHECK(float_to_half(f(std::ldexp(1.0, -25) + std::ldexp(1.0, -40))) == 0x0001);
    CHECK(float_to_half(f(-std::ldexp(1.0, -25))) == 0x8000);  // -0, sign kept
    CHECK(float_to_half(f(1023.5 * std::ldexp(1.0, -24))) == 0x0400);  // last subnormal (odd) | first normal
    CHECK(float_to_half(f(std::ldexp(1.0, -30))) == 0x0000);
    // Overflow: 65520 is the tie between 65504 (0x7bff, odd) and 2^16, so it goes to Inf.
    CHECK(float_to_half(65504.0f) == 0x7bff);
    CHECK(float_to_half(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
    CHECK(float_to_half(65520.0f) == 0x7c00);
    CHECK(float_to_half(-65520.0f) == 0xfc00);
    CHECK(float_to_half(1e30f) == 0x7c00);
    CHECK(float_to_half(INFINITY) == 0x7c00);
    CHECK(float_to_half(-INFINITY) == 0xfc00);
    CHECK(is_half_nan(float_to_half(NAN)));
    CHECK(is_half_nan(float_to_half(bits_to_float(0x7f800001u))));  // a NaN with only a low payload bit
}

TEST_CASE("float_to_half agrees with brute-force nearest-even on every kind of float", "[runtime][half]") {
    std::mt19937_64 rng(std::random_device{}());
    // Random bit patterns in the half range and around it, plus every float within a few ulps of
    // each half and of each midpoint between neighbouring halves.
    std::vector<float> probes;
    std::uniform_int_distribution<uint32_t> bits(0, 0x47ffffffu);
    for (int i = 0; i < 200000; ++i) probes.push_back(bits_to_float(bits(rng) | (rng() & 1 ? 0x80000000u : 0)));
    for (uint32_t h = 0; h < 0x7c00; h += 7) {
        double lo = half_value((uint16_t)h), hi = h + 1 < 0x7c00 ? half_value((uint16_t)(h + 1)) : 65536.0;
        for (double c : {lo, (lo + hi) / 2}) {
            float fc = (float)c;
            float a = fc, b = fc;
            for (int k = 0; k < 3; ++k) {
                probes.push_back(a);
                probes.push_back(b);
                a = std::nextafter(a, 0.0f);
                b = std::nextafter(b, INFINITY);
            }
        }
    }
    size_t bad = 0;
    for (float p : probes) {
        uint16_t got = float_to_half(p), want = half_rne_brute(p);
        if (got != want && bad++ < 10) {
            INFO("float 0x" << std::hex << float_to_bits(p) << " (" << std::scientific << p << "): got 0x" << got << ", want 0x" << want);
            CHECK(got == want);
        }
    }
    CHECK(bad == 0);
}

TEST_CASE("float_to_bf16 rounds to nearest, ties to even", "[runtime][half]") {
    CHECK(float_to_bf16(f(1 + std::ldexp(1.0, -8))) == 0x3f80);      // 1 (even) | 1 + 2^-7: down
    CHECK(float_to_bf16(f(1 + 3 * std::ldexp(1.0, -8))) == 0x3f82);  // 0x3f81 (odd) | 0x3f82: up
    CHECK(float_to_bf16(f(-(1 + 3 * std::ldexp(1.0, -8)))) == 0xbf82);
    CHECK(float_to_bf16(f(1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -23))) == 0x3f81);  // above a tie: up
    CHECK(float_to_bf16(bits_to_float(0x3fffffffu)) == 0x4000);  // rounds up across the exponent
    CHECK(float_to_bf16(bits_to_float(0x00008000u)) == 0x0000);  // float-subnormal tie, down to even 0
    CHECK(float_to_bf16(bits_to_float(0x00018000u)) == 0x0002);  // 0x0001 (odd) | 0x0002: up
    CHECK(float_to_bf16(bits_to_float(0x7f7f7fffu)) == 0x7f7f);  // just below the top tie: the largest bf16
    CHECK(float_to_bf16(bits_to_float(0x7f7f8000u)) == 0x7f80);  // top tie, 0x7f7f is odd: up to Inf
    CHECK(float_to_bf16(INFINITY) == 0x7f80);
    CHECK(float_to_bf16(-INFINITY) == 0xff80);
    CHECK(float_to_bf16(-0.0f) == 0x8000);
    CHECK(is_bf16_nan(float_to_bf16(NAN)));
    CHECK(is_bf16_nan(float_to_bf16(bits_to_float(0x7f800001u))));  // would truncate to Inf if not caught
    CHECK(is_bf16_nan(float_to_bf16(bits_to_float(0xffffffffu))));

    std::mt19937_64 rng(std::random_device{}());
    size_t bad = 0;
    for (int i = 0; i < 200000; ++i) {
        float p = bits_to_float((uint32_t)rng());
        if (i % 4 == 0) p = bits_to_float((float_to_bits(p) & 0xffff0000u) | 0x8000u);  // force a tie
        if (!std::isfinite(p)) continue;  // NaN and Inf are checked above
        uint16_t got = float_to_bf16(p), want = bf16_rne_brute(p);
        if (got != want && bad++ < 10) {
            INFO("float 0x" << std::hex << float_to_bits(p) << ": got 0x" << got << ", want 0x" << want);
            CHECK(got == want);
        }
    }
    CHECK(bad == 0);
}
