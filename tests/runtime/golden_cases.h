// The PyTorch golden cases (tests/golden and its backward/ folder, made by tests/golden/make_golden.py),
// shared by the forward and backward golden tests: a minimal JSON reader for cases.json, the cases, how the catalog expresses
// each one, and the comparison with its tolerance.
#pragma once

#include "dsl/checker.h"
#include "runtime/npy.h"
#include "runtime/shapes.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace normgen::golden {

using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;

// ---- A minimal JSON reader (objects, arrays, strings, numbers, true/false/null) -----------------

struct Json {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<Json> array;
    std::vector<std::pair<std::string, Json>> object;  // in file order

    const Json *find(const std::string &key) const {
        for (const auto &kv : object)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
    const Json &at(const std::string &key) const {
        const Json *j = find(key);
        if (!j) throw std::runtime_error("cases.json: missing key '" + key + "'");
        return *j;
    }
};

class JsonParser {
public:
    explicit JsonParser(const std::string &text) : s_(text) {}
    Json parse() {
        Json j = value();
        skip_ws();
        if (i_ != s_.size()) fail("trailing characters");
        return j;
    }

private:
    const std::string &s_;
    size_t i_ = 0;

    [[noreturn]] void fail(const std::string &what) const {
        throw std::runtime_error("cases.json: " + what + " at offset " + std::to_string(i_));
    }
    void skip_ws() {
        while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_;
    }
    char peek() {
        skip_ws();
        if (i_ >= s_.size()) fail("unexpected end");
        return s_[i_];
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++i_;
    }
    bool literal(const char *word) {
        size_t n = std::char_traits<char>::length(word);
        if (s_.compare(i_, n, word) != 0) return false;
        i_ += n;
        return true;
    }
    std::string str() {
        expect('"');
        std::string r;
        while (i_ < s_.size() && s_[i_] != '"') {
            char c = s_[i_++];
            if (c == '\\') {
                if (i_ >= s_.size()) fail("bad escape");
                char e = s_[i_++];
                switch (e) {
                case 'n': r += '\n'; break;
                case 't': r += '\t'; break;
                case 'r': r += '\r'; break;
                case 'b': r += '\b'; break;
                case 'f': r += '\f'; break;
                case 'u': r += '?'; i_ += 4; break;  // not used by cases.json; kept as a placeholder
                default: r += e;
                }
            } else {
                r += c;
            }
        }
        if (i_ >= s_.size()) fail("unterminated string");
        ++i_;
        return r;
    }
    Json value() {
        Json j;
        char c = peek();
        if (c == '{') {
            j.kind = Json::Object;
            ++i_;
            if (peek() == '}') { ++i_; return j; }
            for (;;) {
                std::string k = str();
                expect(':');
                j.object.emplace_back(k, value());
                if (peek() == ',') { ++i_; continue; }
                expect('}');
                return j;
            }
        }
        if (c == '[') {
            j.kind = Json::Array;
            ++i_;
            if (peek() == ']') { ++i_; return j; }
            for (;;) {
                j.array.push_back(value());
                if (peek() == ',') { ++i_; continue; }
                expect(']');
                return j;
            }
        }
        if (c == '"') {
            j.kind = Json::String;
            j.string = str();
            return j;
        }
        if (literal("true")) { j.kind = Json::Bool; j.boolean = true; return j; }
        if (literal("false")) { j.kind = Json::Bool; return j; }
        if (literal("null")) return j;
        size_t used = 0;
        try {
            j.number = std::stod(s_.substr(i_, 40), &used);
        } catch (const std::exception &) {
            fail("bad value");
        }
        j.kind = Json::Number;
        i_ += used;
        return j;
    }
};

// ---- The cases -------------------------------------------------------------------------------------

struct GoldenCase {
    std::string name, layer;
    std::vector<std::pair<std::string, Shape>> inputs, outputs;
    std::vector<std::pair<std::string, double>> consts;
    std::map<std::string, std::string> layout;
    // The kernel storage types the case stands for, where a declared rounding point depends on them
    // (the Llama RMSNorm's round(..., to: x) in bf16); empty: the declaration's defaults.
    StorageMap storage;
};


Shape to_shape(const Json &j) {
    Shape s;
    for (const Json &e : j.array) s.push_back((int64_t)e.number);
    return s;
}

std::vector<GoldenCase> load_cases(const std::string &dir) {
    std::string path = dir + "/cases.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot open (is the golden folder missing?)");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    Json root = JsonParser(text).parse();
    std::vector<GoldenCase> cases;
    for (const Json &c : root.at("cases").array) {
        GoldenCase g;
        g.name = c.at("name").string;
        g.layer = c.at("layer").string;
        for (const auto &kv : c.at("inputs").object) g.inputs.emplace_back(kv.first, to_shape(kv.second));
        for (const auto &kv : c.at("outputs").object) g.outputs.emplace_back(kv.first, to_shape(kv.second));
        for (const auto &kv : c.at("consts").object) g.consts.emplace_back(kv.first, kv.second.number);
        for (const auto &kv : c.at("layout").object) g.layout[kv.first] = kv.second.string;
        if (const Json *s = c.find("storage"))
            for (const auto &kv : s->object) {
                std::optional<DType> t = parse_dtype(kv.second.string);
                if (!t) throw std::runtime_error("cases.json: case " + g.name + ": unknown storage type '" + kv.second.string + "'");
                g.storage[kv.first] = *t;
            }
        cases.push_back(g);
    }
    return cases;
}

NormSpec catalog(const std::string &name) {
    return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + name + ".norm");
}

// How a golden case is expressed by the catalog.
struct Mapping {
    std::string declaration;
    // Golden consts whose value the declaration deliberately does not carry, mapped to the override
    // that sets them (a const of the same name, or `g` for GroupNorm's `groups`). Every other golden
    // const must equal the declaration's own constant.
    std::map<std::string, std::string> overridden;
    bool batch_norm_1d = false;  // x [n, c] is the declaration's x [n, c, 1, 1]
};

// The table: one entry per case in cases.json (a test below checks the two lists match).
const std::map<std::string, Mapping> &case_table() {
    static const std::map<std::string, Mapping> table = {
        {"layer_norm", {"layer_norm", {}, false}},
        {"layer_norm_no_affine_bf16_inputs", {"layer_norm_no_affine", {}, false}},
        {"layer_norm_last_two_axes", {"layer_norm_last_two_axes", {}, false}},
        {"layer_norm_large_mean", {"layer_norm_no_affine", {}, false}},
        {"layer_norm_eps_outside_root", {"layer_norm_eps_outside_root", {{"eps", "eps"}}, false}},
        {"rms_norm", {"rms_norm", {}, false}},
        {"rms_norm_gemma_bf16_inputs", {"rms_norm_gemma", {}, false}},
        {"fused_add_rms_norm", {"fused_add_rms_norm", {}, false}},
        {"qk_norm", {"qk_norm", {}, false}},
        {"deepnorm", {"deepnorm", {}, false}},
        {"scale_norm", {"scale_norm", {}, false}},
        {"batch_norm_nchw_train", {"batch_norm_train", {}, false}},
        {"batch_norm_nchw_eval", {"batch_norm_eval", {}, false}},
        {"batch_norm_1d_train", {"batch_norm_train", {}, true}},
        {"batch_norm_1d_eval", {"batch_norm_eval", {}, true}},
        {"group_norm_nchw", {"group_norm_nchw", {{"groups", "g"}}, false}},
        {"group_norm_nhwc", {"group_norm_nhwc", {{"groups", "g"}}, false}},
        {"instance_norm", {"instance_norm", {}, false}},
        {"dyt", {"dyt", {}, false}},
        {"rms_norm_llama_bf16_inputs", {"rms_norm_llama", {}, false}},
        {"weight_norm", {"weight_norm", {}, false}},
        {"poly_norm", {"poly_norm", {}, false}},
    };
    return table;
}

// Golden tolerance: 1e-10 relative, plus an absolute term for values near 0. The absolute term is
// 1e-12, or 8 ulps of the case's largest input when that is more: a normalized output near 0 is
// x - mean, and the mean is only known to a few ulps of x by anyone, PyTorch included (in
// layer_norm_large_mean, x ~ 1e4, PyTorch's outputs differ from both of our references, which agree
// with each other, by ~2.6e-12 = 1.4 ulp(1e4)). A one-pass variance would be ~1e-8 off, still caught.
constexpr double kRtol = 1e-10;

// Elementwise comparison: err_i = |got - want| / (atol + rtol * |want|), must be <= 1. A NaN on either
// side, or a size mismatch, is a failure. (Also the hand-written references' comparator:
// reference_test.cpp.)
struct Diff {
    bool size_ok = true;
    size_t got_size = 0, want_size = 0;
    double worst = 0;  // worst normalized error (inf for NaN)
    size_t at = 0, failures = 0;
    double got = 0, want = 0;
};

inline Diff compare(const Vec &got, const Vec &want, double rtol, double atol) {
    Diff d;
    d.got_size = got.size();
    d.want_size = want.size();
    if (got.size() != want.size()) {
        d.size_ok = false;
        return d;
    }
    for (size_t i = 0; i < got.size(); ++i) {
        double e = std::fabs(got[i] - want[i]) / (atol + rtol * std::fabs(want[i]));
        if (std::isnan(e)) e = INFINITY;
        if (!(e <= 1)) ++d.failures;
        if (i == 0 || !(e <= d.worst)) {
            d.worst = e;
            d.at = i;
            d.got = got[i];
            d.want = want[i];
        }
    }
    return d;
}

inline Diff compare(const Vec &got, const Vec &want, double atol) { return compare(got, want, kRtol, atol); }

std::string describe(const Diff &d, size_t n) {
    std::ostringstream os;
    os.precision(17);
    if (!d.size_ok) return "size mismatch";
    os << d.failures << " of " << n << " out of tolerance; worst at [" << d.at << "]: got " << d.got << ", want " << d.want
       << " (error / tolerance = " << d.worst << ")";
    return os.str();
}

#define CHECK_GOLDEN(got, want, atol)                                                                                  \
    do {                                                                                                               \
        const Vec &got_ = (got), &want_ = (want);                                                                      \
        Diff diff_ = compare(got_, want_, (atol));                                                                     \
        INFO(#got ": " << describe(diff_, want_.size()) << " (atol " << (atol) << ")");                                \
        CHECK((diff_.size_ok && diff_.worst <= 1));                                                                    \
    } while (0)

HostTensor read_golden(const std::string &dir, const GoldenCase &c, const std::string &tensor) {
    return read_npy(dir + "/" + c.name + "/" + tensor + ".npy");
}

double case_atol(const std::string &dir, const GoldenCase &c) {
    double m = 0;
    for (const auto &kv : c.inputs)
        for (double v : read_golden(dir, c, kv.first).data) m = std::max(m, std::fabs(v));
    return std::max(1e-12, 8 * DBL_EPSILON * m);
}

}  // namespace normgen::golden
