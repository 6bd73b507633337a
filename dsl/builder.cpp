#include "dsl/builder.h"

#include "dsl/checker.h"
#include "dsl/printer.h"

#include <stdexcept>

namespace normgen {
namespace {

ast::ExprPtr node(ast::Expr::Kind k) {
    auto e = std::make_shared<ast::Expr>();
    e->kind = k;
    return e;
}

BExpr binary(char op, const BExpr &a, const BExpr &b) {
    auto e = node(ast::Expr::Binary);
    e->op = op;
    e->args = {a.ast(), b.ast()};
    return BExpr(e);
}

BExpr call(const char *fn, std::vector<BExpr> args, const AxisList *over = nullptr) {
    auto e = node(ast::Expr::Call);
    e->name = fn;
    for (const auto &a : args) e->args.push_back(a.ast());
    if (over) {
        e->has_over = true;
        for (const auto &ax : *over) e->over.push_back({ax, {}});
    }
    return BExpr(e);
}

ast::Name name_of(const std::string &s) { return {s, {}}; }

ast::Shape shape_of(const BShape &shape) {
    ast::Shape s;
    for (const BAxis &a : shape) {
        ast::ShapeAxis sa;
        sa.name = name_of(a.name);
        for (const auto &p : a.parts) sa.parts.push_back(name_of(p));
        s.axes.push_back(sa);
    }
    return s;
}

BExpr ref(const std::string &name) {
    auto e = node(ast::Expr::Ref);
    e->name = name;
    return BExpr(e);
}

}  // namespace

BExpr::BExpr(double v) : e_(node(ast::Expr::Number)) {
    e_->number = v;
    e_->spelling = format_number(v);
}

BExpr BExpr::operator[](std::vector<int64_t> indices) const {
    if (e_->kind != ast::Expr::Ref) throw std::invalid_argument("normgen builder: only an input or a parameter can be indexed");
    auto e = node(ast::Expr::Index);
    e->name = e_->name;
    for (int64_t i : indices) {
        e->indices.push_back((double)i);
        e->index_spellings.push_back(std::to_string(i));
        e->index_locs.push_back({});
    }
    return BExpr(e);
}

BExpr round(const BExpr &x, DType to) {
    BExpr e = call("round", {x});
    e.ast()->has_to = true;
    e.ast()->to = name_of(dtype_name(to));
    return e;
}

BExpr round(const BExpr &x, const std::string &like) {
    BExpr e = call("round", {x});
    e.ast()->has_to = true;
    e.ast()->to = name_of(like);
    return e;
}

BExpr operator+(const BExpr &a, const BExpr &b) { return binary('+', a, b); }
BExpr operator-(const BExpr &a, const BExpr &b) { return binary('-', a, b); }
BExpr operator*(const BExpr &a, const BExpr &b) { return binary('*', a, b); }
BExpr operator/(const BExpr &a, const BExpr &b) { return binary('/', a, b); }
BExpr operator-(const BExpr &a) {
    auto e = node(ast::Expr::Neg);
    e->args = {a.ast()};
    return BExpr(e);
}

BExpr sum(const BExpr &x, const AxisList &over) { return call("sum", {x}, &over); }
BExpr mean(const BExpr &x, const AxisList &over) { return call("mean", {x}, &over); }
BExpr var(const BExpr &x, const AxisList &over) { return call("var", {x}, &over); }
BExpr max(const BExpr &x, const AxisList &over) { return call("max", {x}, &over); }
BExpr min(const BExpr &x, const AxisList &over) { return call("min", {x}, &over); }
BExpr count(const AxisList &over) { return call("count", {}, &over); }
BExpr sqrt(const BExpr &x) { return call("sqrt", {x}); }
BExpr rsqrt(const BExpr &x) { return call("rsqrt", {x}); }
BExpr tanh(const BExpr &x) { return call("tanh", {x}); }
BExpr exp(const BExpr &x) { return call("exp", {x}); }
BExpr log(const BExpr &x) { return call("log", {x}); }
BExpr abs(const BExpr &x) { return call("abs", {x}); }
BExpr sigmoid(const BExpr &x) { return call("sigmoid", {x}); }
BExpr max(const BExpr &a, const BExpr &b) { return call("max", {a, b}); }
BExpr min(const BExpr &a, const BExpr &b) { return call("min", {a, b}); }
BExpr pow(const BExpr &a, const BExpr &b) { return call("pow", {a, b}); }

NormBuilder::NormBuilder(std::string name) { decl_.name = name_of(name); }

BExpr NormBuilder::input(const std::string &name, const BShape &shape) {
    decl_.inputs.push_back({name_of(name), shape_of(shape)});
    return ref(name);
}

BExpr NormBuilder::param(const std::string &name, const BShape &shape) {
    ast::Stmt s;
    s.kind = ast::Stmt::Param;
    s.name = name_of(name);
    s.shape = shape_of(shape);
    decl_.body.push_back(s);
    return ref(name);
}

BExpr NormBuilder::constant(const std::string &name, double value) {
    ast::Stmt s;
    s.kind = ast::Stmt::Const;
    s.name = name_of(name);
    s.value = value;
    s.value_spelling = format_number(value);
    decl_.body.push_back(s);
    return ref(name);
}

void NormBuilder::axis(const std::string &name, int64_t extent) {
    ast::Stmt s;
    s.kind = ast::Stmt::Axis;
    s.name = name_of(name);
    s.value = (double)extent;
    s.value_spelling = std::to_string(extent);
    decl_.body.push_back(s);
}

BExpr NormBuilder::let(const std::string &name, const BExpr &value) {
    ast::Stmt s;
    s.kind = ast::Stmt::Let;
    s.name = name_of(name);
    s.expr = value.ast();
    decl_.body.push_back(s);
    return ref(name);
}

BExpr NormBuilder::output(const std::string &name, const BExpr &value, const OutputOptions &opts) {
    BExpr r = let(name, value);
    mark_output(name, opts);
    return r;
}

void NormBuilder::mark_output(const std::string &name, const OutputOptions &opts) {
    ast::OutputDecl o;
    o.name = name_of(name);
    o.optional = opts.optional;
    if (opts.shape) o.shape = shape_of(*opts.shape);
    if (!opts.updates.empty()) o.updates = name_of(opts.updates);
    decl_.outputs.push_back(o);
}

void NormBuilder::accumulate(DType t) {
    ast::Stmt s;
    s.kind = ast::Stmt::Accumulate;
    s.word = name_of(dtype_name(t));
    decl_.body.push_back(s);
}

void NormBuilder::variance(VarianceAlgorithm v) {
    ast::Stmt s;
    s.kind = ast::Stmt::Variance;
    s.word = name_of(variance_name(v));
    decl_.body.push_back(s);
}

void NormBuilder::storage(const std::vector<std::string> &tensors, const std::vector<DType> &types) {
    ast::Stmt s;
    s.kind = ast::Stmt::Storage;
    for (const auto &t : tensors) s.tensors.push_back(name_of(t));
    for (DType t : types) s.dtypes.push_back(name_of(dtype_name(t)));
    decl_.body.push_back(s);
}

NormSpec NormBuilder::build() const { return check_norm(decl_, nullptr); }

}  // namespace normgen
