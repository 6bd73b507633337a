#include "dsl/parser.h"

#include "dsl/lexer.h"

#include <algorithm>

namespace normgen {
namespace {

class Parser {
public:
    Parser(const SourceFile &file, DiagnosticSink &sink) : sink_(sink), toks_(lex(file, sink)) {}

    ast::NormDecl parse_file() {
        ast::NormDecl d = parse_norm_decl();
        if (peek().kind != Tok::End) fail(peek(), "expected end of file after the closing '}' of the norm");
        return d;
    }

private:
    DiagnosticSink &sink_;
    std::vector<Token> toks_;
    size_t pos_ = 0;
    int depth_ = 0;
    static constexpr int kMaxDepth = 200;        // nested parentheses, calls and unary minus
    static constexpr int kMaxTreeDepth = 500;    // levels of the expression tree (ASan's frames need the room)

    // Bounds the recursion so a pathological file is a diagnostic, not a stack overflow.
    struct DepthGuard {
        Parser &p;
        explicit DepthGuard(Parser &parser) : p(parser) {
            if (++p.depth_ > kMaxDepth)
                p.fail(p.peek(), "expression nested too deeply (more than " + std::to_string(kMaxDepth) + " levels)");
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token &peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
    const Token &next() { const Token &t = peek(); if (pos_ < toks_.size() - 1) ++pos_; return t; }
    bool at(Tok k) const { return peek().kind == k; }
    bool at_word(const char *w) const { return peek().kind == Tok::Ident && peek().text == w; }

    static std::string describe(const Token &t) {
        if (t.kind == Tok::Ident) return "'" + t.text + "'";
        if (t.kind == Tok::Number) return "number '" + t.text + "'";
        return tok_spelling(t.kind);
    }
    [[noreturn]] void fail(const Token &t, const std::string &msg) { sink_.fatal(t.loc, msg); }

    const Token &expect(Tok k, const char *context) {
        if (!at(k)) fail(peek(), std::string("expected ") + tok_spelling(k) + " " + context + ", found " + describe(peek()));
        return next();
    }
    ast::Name expect_name(const char *what) {
        if (!at(Tok::Ident)) fail(peek(), std::string("expected ") + what + ", found " + describe(peek()));
        const Token &t = next();
        return {t.text, t.loc};
    }

    // normDecl ::= 'norm' IDENT '(' tensorDecl (',' tensorDecl)* ')' '->' outputs '{' stmt* '}'
    ast::NormDecl parse_norm_decl() {
        ast::NormDecl d;
        if (!at_word("norm")) fail(peek(), "expected 'norm' to begin a declaration, found " + describe(peek()));
        d.loc = next().loc;
        d.name = expect_name("the name of the norm");
        expect(Tok::LParen, "before the inputs of the norm");
        // No inputs is allowed when the body declares a parameter (WeightNorm normalizes its weight).
        const Token &no_inputs = peek();
        if (!at(Tok::RParen)) {
            do {
                ast::TensorDecl t;
                t.name = expect_name("an input name");
                expect(Tok::Colon, "between an input's name and its shape");
                t.shape = parse_shape();
                d.inputs.push_back(std::move(t));
            } while (at(Tok::Comma) && (next(), true));
        }
        expect(Tok::RParen, "after the inputs of the norm");
        if (!at(Tok::Arrow)) fail(peek(), "expected '->' and the outputs of the norm, found " + describe(peek()));
        next();
        do {
            d.outputs.push_back(parse_output_decl());
        } while (at(Tok::Comma) && (next(), true));
        expect(Tok::LBrace, "to open the body of the norm");
        while (!at(Tok::RBrace)) {
            if (at(Tok::End)) fail(peek(), "expected '}' to close the body of norm '" + d.name.text + "'");
            d.body.push_back(parse_stmt());
        }
        d.close_loc = next().loc;
        bool has_param = false;
        for (const ast::Stmt &st : d.body) has_param = has_param || st.kind == ast::Stmt::Param;
        if (d.inputs.empty() && !has_param)
            fail(no_inputs, "a norm needs at least one input (or a parameter it normalizes, as WeightNorm's 'param v: [o, i]')");
        return d;
    }

    // shape ::= '[' [shapeAxis (',' shapeAxis)*] ']'
    ast::Shape parse_shape() {
        ast::Shape s;
        s.loc = expect(Tok::LBracket, "to open a shape").loc;
        if (at(Tok::RBracket)) { next(); return s; }
        do {
            // shapeAxis ::= IDENT [':' '(' IDENT ',' IDENT (',' IDENT)* ')']
            ast::ShapeAxis a;
            a.name = expect_name("an axis name");
            if (at(Tok::Colon)) {
                next();
                expect(Tok::LParen, "to open the parts of a split axis, as in c: (g, cg)");
                do a.parts.push_back(expect_name("an axis name")); while (at(Tok::Comma) && (next(), true));
                expect(Tok::RParen, "to close the parts of a split axis");
                if (a.parts.size() < 2) fail(peek(), "a split axis needs at least two parts, as in c: (g, cg)");
            }
            s.axes.push_back(std::move(a));
        } while (at(Tok::Comma) && (next(), true));
        expect(Tok::RBracket, "to close a shape");
        return s;
    }

    // outputDecl ::= IDENT ['?'] [':' shape] ['updates' IDENT]
    ast::OutputDecl parse_output_decl() {
        ast::OutputDecl o;
        o.name = expect_name("an output name");
        if (at(Tok::Question)) { next(); o.optional = true; }
        if (at(Tok::Colon)) { next(); o.shape = parse_shape(); }
        if (at_word("updates")) { next(); o.updates = expect_name("the input that this output updates"); }
        return o;
    }

    ast::Stmt parse_stmt() {
        ast::Stmt s;
        if (!at(Tok::Ident)) fail(peek(), "expected a statement (param, const, axis, accumulate, variance, storage or NAME = expr), found " + describe(peek()));
        const Token &head = peek();
        s.loc = head.loc;
        bool keyword_form = peek(1).kind != Tok::Equal;  // `const = 1` would be a Let of a variable named const
        if (keyword_form && head.text == "param") {
            next();
            s.kind = ast::Stmt::Param;
            s.name = expect_name("a parameter name");
            expect(Tok::Colon, "between a parameter's name and its shape");
            s.shape = parse_shape();
        } else if (keyword_form && (head.text == "const" || head.text == "axis")) {
            next();
            s.kind = head.text == "const" ? ast::Stmt::Const : ast::Stmt::Axis;
            s.name = expect_name(s.kind == ast::Stmt::Const ? "a constant name" : "an axis name");
            expect(Tok::Equal, s.kind == ast::Stmt::Const ? "after the constant's name" : "after the axis name");
            bool neg = false;
            s.value_loc = peek().loc;
            if (s.kind == ast::Stmt::Const && at(Tok::Minus)) { next(); neg = true; }
            const Token &n = expect(Tok::Number, s.kind == ast::Stmt::Const ? "as the constant's value" : "as the axis extent");
            s.value = neg ? -n.number : n.number;
            s.value_spelling = (neg ? "-" : "") + n.text;
        } else if (keyword_form && (head.text == "accumulate" || head.text == "variance")) {
            next();
            s.kind = head.text == "accumulate" ? ast::Stmt::Accumulate : ast::Stmt::Variance;
            s.word = expect_name(s.kind == ast::Stmt::Accumulate ? "an accumulation type (f32 or f64)"
                                                                 : "a variance algorithm (two_pass, welford or one_pass)");
        } else if (keyword_form && head.text == "storage") {
            next();
            s.kind = ast::Stmt::Storage;
            do s.tensors.push_back(expect_name("a tensor name")); while (at(Tok::Comma) && (next(), true));
            expect(Tok::Colon, "between the tensors and their storage types");
            do s.dtypes.push_back(expect_name("a storage type (f32, bf16 or f16)")); while (at(Tok::Bar) && (next(), true));
        } else {
            s.kind = ast::Stmt::Let;
            s.name = expect_name("a name");
            if (!at(Tok::Equal))
                fail(peek(), "expected '=' after '" + s.name.text + "' (or a statement keyword: param, const, axis, accumulate, variance, storage), found " + describe(peek()));
            next();
            s.expr = parse_expr();
        }
        return s;
    }

    // expr ::= term (('+' | '-') term)*
    ast::ExprPtr parse_expr() {
                ast::ExprPtr lhs = parse_term();
        while (at(Tok::Plus) || at(Tok::Minus)) {
            const Token &op = next();
            lhs = binary(op.kind == Tok::Plus ? '+' : '-', op, lhs, parse_term());
        }
        return lhs;
    }

    // term ::= unary (('*' | '/') unary)*
    ast::ExprPtr parse_term() {
        ast::ExprPtr lhs = parse_unary();
        while (at(Tok::Star) || at(Tok::Slash)) {
            const Token &op = next();
            lhs = binary(op.kind == Tok::Star ? '*' : '/', op, lhs, parse_unary());
        }
        return lhs;
    }

    // unary ::= '-' unary | primary
    ast::ExprPtr parse_unary() {
        DepthGuard guard(*this);
        if (at(Tok::Minus)) {
            auto e = std::make_shared<ast::Expr>();
            e->kind = ast::Expr::Neg;
            e->loc = next().loc;
            e->args.push_back(parse_unary());
            e->depth = 1 + e->args[0]->depth;
            return e;
        }
        return parse_primary();
    }

    // primary ::= NUMBER | IDENT | IDENT '[' INT (',' INT)* ']' | IDENT '(' [args] ')' | '(' expr ')'
    // args    ::= expr (',' expr)* [',' ('over' ':' IDENT (',' IDENT)* | 'to' ':' IDENT)]
    ast::ExprPtr parse_primary() {
        auto e = std::make_shared<ast::Expr>();
        e->loc = peek().loc;
        if (at(Tok::Number)) {
            e->kind = ast::Expr::Number;
            e->number = peek().number;
            e->spelling = next().text;
            return e;
        }
        if (at(Tok::LParen)) {
            next();
            ast::ExprPtr inner = parse_expr();
            expect(Tok::RParen, "to close a parenthesized expression");
            return inner;
        }
        if (!at(Tok::Ident)) fail(peek(), "expected an expression, found " + describe(peek()));
        e->name = next().text;
        if (at(Tok::LBracket)) {  // an element of a tensor: weight[0], weight[1, 2]
            e->kind = ast::Expr::Index;
            next();
            do {
                const Token &n = peek();
                bool neg = at(Tok::Minus);
                if (neg) next();
                const Token &v = expect(Tok::Number, "as an index (a constant integer)");
                e->indices.push_back(neg ? -v.number : v.number);
                e->index_spellings.push_back((neg ? "-" : "") + v.text);
                e->index_locs.push_back(n.loc);
            } while (at(Tok::Comma) && (next(), true));
            expect(Tok::RBracket, ("to close the index of '" + e->name + "'").c_str());
            return e;
        }
        if (!at(Tok::LParen)) { e->kind = ast::Expr::Ref; return e; }
        e->kind = ast::Expr::Call;
        next();
        if (!at(Tok::RParen)) {
            do {
                // Keyword arguments come last: `over: a, b` (a list to the closing parenthesis) or `to: T`.
                if (at_word("over") && peek(1).kind == Tok::Colon) {
                    e->has_over = true;
                    e->over_loc = next().loc;
                    next();
                    do e->over.push_back(expect_name("an axis name after 'over:'")); while (at(Tok::Comma) && (next(), true));
                    break;
                }
                if (at_word("to") && peek(1).kind == Tok::Colon) {
                    e->has_to = true;
                    e->to_loc = next().loc;
                    next();
                    e->to = expect_name("a storage type (f32, bf16, f16) or a tensor name after 'to:'");
                    break;
                }
                e->args.push_back(parse_expr());
                e->depth = std::max(e->depth, 1 + e->args.back()->depth);
            } while (at(Tok::Comma) && (next(), true));
        }
        expect(Tok::RParen, ("to close the call to '" + e->name + "'").c_str());
        return e;
    }

    ast::ExprPtr binary(char op, const Token &at, ast::ExprPtr a, ast::ExprPtr b) {
        auto e = std::make_shared<ast::Expr>();
        e->kind = ast::Expr::Binary;
        e->op = op;
        e->loc = at.loc;
        e->depth = 1 + std::max(a->depth, b->depth);
        e->args = {std::move(a), std::move(b)};
        check_tree_depth(*e, at);
        return e;
    }

    // A flat chain `x + x + ... + x` nests as deeply as parentheses do once parsed: every later pass
    // walks the tree recursively, so its depth is bounded too (at the operator that passes it).
    void check_tree_depth(const ast::Expr &e, const Token &at) {
        if (e.depth > kMaxTreeDepth)
            fail(at, "expression too deep: more than " + std::to_string(kMaxTreeDepth) +
                         " levels of operators (split it into named values)");
    }
};

}  // namespace

ast::NormDecl parse_norm(const SourceFile &file) {
    DiagnosticSink sink(std::make_shared<SourceFile>(file));
    Parser p(file, sink);
    return p.parse_file();
}

}  // namespace normgen
