// The C++ builder API: declare a layer in code and get the same NormSpec the .norm text gives.
//
//   normgen::NormBuilder b("rms_norm");
//   auto x = b.input("x", {"rows", "d"});
//   auto w = b.param("weight", {"d"});
//   auto eps = b.constant("eps", 1e-6);
//   auto ms = b.let("ms", mean(x * x, {"d"}));
//   b.output("y", x * rsqrt(ms + eps) * w);
//   b.storage({"x", "y"}, {DType::F32, DType::BF16, DType::F16});
//   (rounding points: round(e, DType::BF16) or round(e, "x"); an indexed parameter: w[{0}])
//   NormSpec spec = b.build();   // runs the same checker as the text front end
//
// The builder records an AST and hands it to check_norm(), so a mistake made in C++ is reported by the
// same diagnostics (without a file location).
#pragma once

#include "dsl/ast.h"
#include "dsl/norm_spec.h"

#include <initializer_list>
#include <string>
#include <vector>

namespace normgen {

class BExpr {
public:
    BExpr(double v);  // NOLINT: numbers convert implicitly so `1 + w` reads as in the DSL
    explicit BExpr(ast::ExprPtr e) : e_(std::move(e)) {}
    const ast::ExprPtr &ast() const { return e_; }
    // An element of an input or parameter along its leading fixed-extent axes: w[{0}] is `w[0]`.
    BExpr operator[](std::vector<int64_t> indices) const;

private:
    ast::ExprPtr e_;
};

BExpr operator+(const BExpr &a, const BExpr &b);
BExpr operator-(const BExpr &a, const BExpr &b);
BExpr operator*(const BExpr &a, const BExpr &b);
BExpr operator/(const BExpr &a, const BExpr &b);
BExpr operator-(const BExpr &a);

using AxisList = std::vector<std::string>;
BExpr sum(const BExpr &x, const AxisList &over);
BExpr mean(const BExpr &x, const AxisList &over);
BExpr var(const BExpr &x, const AxisList &over);
BExpr max(const BExpr &x, const AxisList &over);
BExpr min(const BExpr &x, const AxisList &over);
BExpr count(const AxisList &over);
BExpr sqrt(const BExpr &x);
BExpr rsqrt(const BExpr &x);
BExpr tanh(const BExpr &x);
BExpr exp(const BExpr &x);
BExpr log(const BExpr &x);
BExpr abs(const BExpr &x);
BExpr sigmoid(const BExpr &x);
BExpr max(const BExpr &a, const BExpr &b);
BExpr min(const BExpr &a, const BExpr &b);
BExpr pow(const BExpr &a, const BExpr &b);
// Rounding points: round(e, to: bf16), and round(e, to: x) (x's storage type in each kernel).
BExpr round(const BExpr &x, DType to);
BExpr round(const BExpr &x, const std::string &like);

// One axis of a shape: "d", or a split view split("c", {"g", "cg"}).
struct BAxis {
    BAxis(const char *n) : name(n) {}  // NOLINT
    BAxis(std::string n) : name(std::move(n)) {}  // NOLINT
    BAxis(std::string n, std::vector<std::string> p) : name(std::move(n)), parts(std::move(p)) {}
    std::string name;
    std::vector<std::string> parts;
};
inline BAxis split(std::string name, std::vector<std::string> parts) { return BAxis(std::move(name), std::move(parts)); }
using BShape = std::vector<BAxis>;

struct OutputOptions {
    bool optional = false;
    std::optional<BShape> shape;
    std::string updates;
};

inline OutputOptions optional_output() {
    OutputOptions o;
    o.optional = true;
    return o;
}
inline OutputOptions updates_input(std::string input) {
    OutputOptions o;
    o.updates = std::move(input);
    return o;
}

class NormBuilder {
public:
    explicit NormBuilder(std::string name);
    BExpr input(const std::string &name, const BShape &shape);
    BExpr param(const std::string &name, const BShape &shape);
    BExpr constant(const std::string &name, double value);
    void axis(const std::string &name, int64_t extent);
    BExpr let(const std::string &name, const BExpr &value);
    // Defines `name = value`, declares it an output, and returns a reference to it.
    BExpr output(const std::string &name, const BExpr &value, const OutputOptions &opts = {});
    // Declares an already defined value an output (e.g. saved statistics: mark_output("mu", {true})).
    void mark_output(const std::string &name, const OutputOptions &opts = {});
    void accumulate(DType t);
    void variance(VarianceAlgorithm v);
    void storage(const std::vector<std::string> &tensors, const std::vector<DType> &types);
    NormSpec build() const;

private:
    ast::NormDecl decl_;
};

}  // namespace normgen
