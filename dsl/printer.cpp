#include "dsl/printer.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace normgen {

std::string format_number(double v) {
    char buf[64];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*g", p, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

namespace {

// Precedence: + - (1) < * / (2) < unary minus (3) < calls, names, numbers (4).
int precedence(const Node &n) {
    if (n.kind == Node::Binary) {
        switch (n.binary) {
        case BinaryOp::Add: case BinaryOp::Sub: return 1;
        case BinaryOp::Mul: case BinaryOp::Div: return 2;
        default: return 4;
        }
    }
    if (n.kind == Node::Unary && n.unary == UnaryOp::Neg) return 3;
    if (n.kind == Node::Literal && n.value < 0) return 3;
    return 4;
}

void print_node(const NormSpec &spec, const Node &n, std::ostream &os);

void print_operand(const NormSpec &spec, const Node &n, int min_prec, std::ostream &os) {
    bool paren = precedence(n) < min_prec;
    if (paren) os << "(";
    print_node(spec, n, os);
    if (paren) os << ")";
}

void print_over(const NormSpec &spec, const Node &n, std::ostream &os) {
    os << "over: ";
    for (size_t i = 0; i < n.over_written.size(); ++i) os << (i ? ", " : "") << spec.axes[n.over_written[i]].name;
}

void print_node(const NormSpec &spec, const Node &n, std::ostream &os) {
    switch (n.kind) {
    case Node::Literal: os << format_number(n.value); return;
    case Node::Const: case Node::Value: os << n.name; return;
    case Node::Tensor:
        os << n.name;
        if (!n.at.empty()) {
            os << "[";
            for (size_t i = 0; i < n.at.size(); ++i) os << (i ? ", " : "") << n.at[i].second;
            os << "]";
        }
        return;
    case Node::Unary:
        if (n.unary == UnaryOp::Round) {
            os << "round(";
            print_node(spec, *n.args[0], os);
            os << ", to: " << (n.name.empty() ? dtype_name(n.round_type) : n.name) << ")";
        } else if (n.unary == UnaryOp::Neg) {
            os << "-";
            print_operand(spec, *n.args[0], 3, os);
        } else {
            os << unary_name(n.unary) << "(";
            print_node(spec, *n.args[0], os);
            os << ")";
        }
        return;
    case Node::Binary: {
        int p = precedence(n);
        if (p == 4) {  // max, min, pow: written as calls
            os << binary_name(n.binary) << "(";
            print_node(spec, *n.args[0], os);
            os << ", ";
            print_node(spec, *n.args[1], os);
            os << ")";
            return;
        }
        // Left-associative: the right operand needs parentheses at equal precedence.
        print_operand(spec, *n.args[0], p, os);
        os << " " << binary_name(n.binary) << " ";
        print_operand(spec, *n.args[1], p + 1, os);
        return;
    }
    case Node::Reduce:
        os << reduce_name(n.reduce) << "(";
        print_node(spec, *n.args[0], os);
        os << ", ";
        print_over(spec, n, os);
        os << ")";
        return;
    case Node::Count:
        os << "count(";
        print_over(spec, n, os);
        os << ")";
        return;
    }
}

// Prints a shape, writing each split view `c: (g, cg)` the first time it appears in the file.
std::string shape_text(const NormSpec &spec, const std::vector<AxisId> &dims, std::set<AxisId> &splits_written) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) {
        const Axis &a = spec.axes[dims[i]];
        s += (i ? ", " : "") + a.name;
        if (a.is_split() && splits_written.insert(dims[i]).second) {
            s += ": (";
            for (size_t k = 0; k < a.parts.size(); ++k) s += (k ? ", " : "") + spec.axes[a.parts[k]].name;
            s += ")";
        }
    }
    return s + "]";
}

}  // namespace

std::string print_expr(const NormSpec &spec, const Node &node) {
    std::ostringstream os;
    print_node(spec, node, os);
    return os.str();
}

std::string print_norm(const NormSpec &spec) {
    std::ostringstream os;
    std::set<AxisId> splits;
    os << "norm " << spec.name << "(";
    bool first = true;
    for (const TensorInfo &t : spec.tensors) {
        if (t.role != TensorInfo::Input) continue;
        os << (first ? "" : ", ") << t.name << ": " << shape_text(spec, t.dims, splits);
        first = false;
    }
    os << ")";
    std::ostringstream outs;
    // Params come before outputs in the checker's order of first appearance, so their split views
    // must be written before the outputs'. Render the params first, then assemble.
    std::ostringstream body;
    for (const TensorInfo &t : spec.tensors)
        if (t.role == TensorInfo::Param) body << "  param " << t.name << ": " << shape_text(spec, t.dims, splits) << "\n";
    for (size_t i = 0; i < spec.outputs.size(); ++i) {
        const OutputInfo &o = spec.outputs[i];
        outs << (i ? ", " : "") << o.name << (o.optional ? "?" : "");
        if (o.shape_written) outs << ": " << shape_text(spec, o.dims, splits);
        if (!o.updates.empty()) outs << " updates " << o.updates;
    }
    // A long signature puts its outputs on a continuation line.
    bool wrap = os.str().size() + outs.str().size() + 6 > 100;
    os << (wrap ? "\n    -> " : " -> ") << outs.str() << " {\n" << body.str();
    for (const ConstInfo &c : spec.consts) os << "  const " << c.name << " = " << format_number(c.value) << "\n";
    for (const Axis &a : spec.axes)
        if (a.fixed_extent) os << "  axis " << a.name << " = " << *a.fixed_extent << "\n";
    for (const ValueDef &v : spec.values) os << "  " << v.name << " = " << print_expr(spec, *v.expr) << "\n";
    if (spec.accumulate_written) os << "  accumulate " << dtype_name(spec.accumulate) << "\n";
    if (spec.variance_written) os << "  variance " << variance_name(spec.variance) << "\n";
    for (const StorageGroup &g : spec.storage) {
        os << "  storage ";
        for (size_t i = 0; i < g.tensors.size(); ++i) os << (i ? ", " : "") << g.tensors[i];
        os << ": ";
        for (size_t i = 0; i < g.allowed.size(); ++i) os << (i ? " | " : "") << dtype_name(g.allowed[i]);
        os << "\n";
    }
    os << "}\n";
    return os.str();
}

uint64_t text_hash(const std::string &text) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    return h;
}

uint64_t canonical_hash(const NormSpec &spec) { return text_hash(print_norm(spec)); }

}  // namespace normgen
