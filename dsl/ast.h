// The syntax tree of a .norm file, exactly as written, with source locations.
// The checker (checker.h) turns it into the validated IR, NormSpec.
#pragma once

#include "dsl/diagnostics.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace normgen::ast {

struct Name {
    std::string text;
    SourceLoc loc;
};

// One axis of a shape: `d`, or a view that splits an axis, `c: (g, cg)`.
struct ShapeAxis {
    Name name;
    std::vector<Name> parts;  // non-empty for a split view
};

struct Shape {
    std::vector<ShapeAxis> axes;
    SourceLoc loc;
};

struct TensorDecl {
    Name name;
    Shape shape;
};

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
    enum Kind { Number, Ref, Index, Neg, Binary, Call };
    Kind kind = Number;
    SourceLoc loc;
    double number = 0;
    std::string spelling;  // number as written (for diagnostics)
    std::string name;      // Ref, Index: the name; Call: the function
    char op = 0;           // Binary: + - * /
    std::vector<ExprPtr> args;
    bool has_over = false;  // Call with `over: a, b`
    std::vector<Name> over;
    SourceLoc over_loc;
    bool has_to = false;    // Call with `to: T` (round)
    Name to;
    SourceLoc to_loc;
    // Index: `weight[0, 2]`, the constants as written with their locations.
    std::vector<double> indices;
    std::vector<std::string> index_spellings;
    std::vector<SourceLoc> index_locs;
    int depth = 1;  // levels of the tree below and including this node (the parser bounds it)
};

struct OutputDecl {
    Name name;
    bool optional = false;
    std::optional<Shape> shape;
    std::optional<Name> updates;  // the input this output may overwrite in place
};

struct Stmt {
    enum Kind { Param, Const, Axis, Let, Accumulate, Variance, Storage };
    Kind kind = Let;
    SourceLoc loc;    // the keyword (or the name of a Let)
    Name name;        // Param, Const, Axis, Let
    Shape shape;      // Param
    double value = 0; // Const, Axis
    std::string value_spelling;
    SourceLoc value_loc;
    ExprPtr expr;     // Let
    Name word;        // Accumulate dtype, Variance algorithm
    std::vector<Name> tensors;  // Storage
    std::vector<Name> dtypes;   // Storage
};

struct NormDecl {
    Name name;
    SourceLoc loc;
    std::vector<TensorDecl> inputs;
    std::vector<OutputDecl> outputs;
    std::vector<Stmt> body;
    SourceLoc close_loc;
};

}  // namespace normgen::ast
