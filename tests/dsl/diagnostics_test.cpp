// Every user mistake gets `file:line:col: error: message`, the line, and a caret. Each case below
// asserts the message text and the exact location of its first diagnostic.
#include "dsl/checker.h"

#include <catch2/catch.hpp>

#include <sstream>

using namespace normgen;

namespace {

struct Case {
    const char *what;
    std::string source;
    int line;
    std::string anchor;  // the text the caret must point at: its first occurrence on `line`
    std::string message; // a substring of the message
    int occurrence = 1;  // which occurrence of `anchor` on the line
};

std::string line_of(const std::string &src, int line) {
    std::istringstream is(src);
    std::string l;
    for (int i = 0; i < line && std::getline(is, l); ++i) {}
    return l;
}

int col_of(const std::string &src, int line, const std::string &anchor, int occurrence) {
    std::string l = line_of(src, line);
    size_t pos = std::string::npos, from = 0;
    for (int k = 0; k < occurrence; ++k) {
        pos = l.find(anchor, from);
        if (pos == std::string::npos) return -1;
        from = pos + 1;
    }
    return (int)pos + 1;
}

Diagnostic first_diagnostic(const std::string &src) {
    try {
        load_norm_text("t.norm", src);
    } catch (const DiagnosticError &e) {
        REQUIRE(!e.diagnostics().empty());
        return e.diagnostics().front();
    }
    FAIL("expected a diagnostic, but the declaration was accepted:\n" << src);
    return {};
}

// A valid declaration the cases below break one piece at a time.
const char *kValid = R"(norm ln(x: [rows, d]) -> y {
  param weight: [d]
  const eps = 1e-5
  mu = mean(x, over: d)
  v = var(x, over: d)
  y = (x - mu) * rsqrt(v + eps) * weight
  accumulate f32
  storage x, y: f32 | bf16
})";

}  // namespace

TEST_CASE("the valid base declaration is accepted", "[dsl][diagnostics]") {
    NormSpec s = load_norm_text("t.norm", kValid);
    CHECK(s.outputs.size() == 1);
}

TEST_CASE("diagnostics: text and location", "[dsl][diagnostics]") {
    const std::vector<Case> cases = {
        {"unexpected character", "norm a(x: [d]) -> y {\n  y = x $ 2\n}", 2, "$", "unexpected character '$'"},
        {"malformed number", "norm a(x: [d]) -> y {\n  const eps = 1e-\n  y = x\n}", 2, "1e-", "malformed number '1e-'"},
        {"number glued to letters", "norm a(x: [d]) -> y {\n  y = x * 2x\n}", 2, "2x", "malformed number '2x'"},
        {"missing ')'", "norm a(x: [d] -> y {\n  y = x\n}", 1, "->", "expected ')' after the inputs of the norm, found '->'"},
        {"missing '}'", "norm a(x: [d]) -> y {\n  y = x\n", 3, "", "expected '}' to close the body of norm 'a'"},
        {"statement without '='", "norm a(x: [d]) -> y {\n  y x\n}", 2, "x", "expected '=' after 'y'"},
        {"unknown axis in over", "norm a(x: [rows, d]) -> y {\n  y = mean(x, over: q)\n}", 2, "q", "unknown axis 'q'"},
        {"reduction over an axis the operand lacks",
         "norm a(x: [rows, d], z: [c]) -> y {\n  s = sum(z, over: d)\n  y = x * s\n}", 2, "over",
         "cannot reduce 'z' over axis 'd': it only has axes [c]"},
        {"output shape mismatch", "norm a(x: [rows, d]) -> y: [rows] {\n  y = x * 2\n}", 1, "[rows]",
         "shape mismatch: output 'y' is declared [rows] but its value has axes [rows, d]"},
        {"updates shape mismatch",
         "norm a(x: [n, c], r: [n]) -> y, r_out updates r {\n  m = mean(x, over: n)\n  y = x - m\n  r_out = m + mean(r, over: n)\n}",
         1, "r {", "shape mismatch: output 'r_out' has shape [c] but updates 'r' of shape [n]"},
        {"use before definition", "norm a(x: [d]) -> y {\n  y = b * 2\n  b = x + 1\n}", 2, "b", "'b' is used before its definition at 3:3"},
        {"cycle", "norm a(x: [d]) -> y {\n  y = x * b\n  b = c + 1\n  c = y * 2\n}", 2, "b", "cycle: 'y' depends on itself (y -> b -> c -> y)"},
        {"self reference", "norm a(x: [d]) -> y {\n  y = y + x\n}", 2, "y", "cycle: 'y' depends on itself (y -> y)", 2},
        {"unknown function", "norm a(x: [d]) -> y {\n  y = sqr(x)\n}", 2, "sqr", "unknown function 'sqr'"},
        {"wrong arity", "norm a(x: [d]) -> y {\n  y = rsqrt(x, x)\n}", 2, "rsqrt", "'rsqrt' takes 1 argument, got 2"},
        {"wrong arity of pow", "norm a(x: [d]) -> y {\n  y = pow(x)\n}", 2, "pow", "'pow' takes 2 arguments, got 1"},
        {"missing output", "norm a(x: [d]) -> y, z {\n  y = x\n}", 1, "z", "missing output: 'z' is declared as an output but never defined"},
        {"duplicate name", "norm a(x: [d]) -> y {\n  param x: [d]\n  y = x\n}", 2, "x", "duplicate name 'x': first declared at 1:8"},
        {"duplicate output", "norm a(x: [d]) -> y, y {\n  y = x\n}", 1, "y", "duplicate output 'y'", 2},
        {"bad storage dtype", "norm a(x: [d]) -> y {\n  y = x\n  storage x, y: f32 | f8\n}", 3, "f8", "bad storage type 'f8'"},
        {"bad accumulation type", "norm a(x: [d]) -> y {\n  y = x\n  accumulate f16\n}", 3, "f16",
         "accumulation type must be f32 or f64, got 'f16'"},
        {"unknown accumulation type", "norm a(x: [d]) -> y {\n  y = x\n  accumulate quad\n}", 3, "quad", "unknown type 'quad'"},
        {"unknown name", "norm a(x: [d]) -> y {\n  y = x * weight\n}", 2, "weight", "unknown name 'weight'"},
        {"axis used as a value", "norm a(x: [rows, d]) -> y {\n  y = x / d\n}", 2, "d", "'d' is an axis, not a value; use count(over: d)"},
        {"unknown variance algorithm", "norm a(x: [d]) -> y {\n  y = x - mean(x, over: d)\n  variance kahan\n}", 3, "kahan",
         "unknown variance algorithm 'kahan'"},
        {"variance without var()", "norm a(x: [d]) -> y {\n  y = x - mean(x, over: d)\n  variance welford\n}", 3, "variance",
         "a variance algorithm is declared but the norm has no var(...) reduction"},
        {"split without a fixed extent", "norm a(x: [n, c: (g, cg)]) -> y {\n  y = x - mean(x, over: cg)\n}", 1, "c:",
         "split axis 'c' = (g, cg) needs the extent of all but one part: add 'axis g = N'"},
        {"over on an elementwise function", "norm a(x: [d]) -> y {\n  y = tanh(x, over: d)\n}", 2, "over",
         "'tanh' is elementwise and does not reduce; remove 'over:'"},
        {"reduction without over", "norm a(x: [d]) -> y {\n  y = x - mean(x)\n}", 2, "mean", "'mean' needs 'over:' naming the axes to reduce"},
        {"updates names a non-input", "norm a(x: [d]) -> y updates q {\n  y = x\n}", 1, "q", "'q' is not an input of the norm"},
        {"storage of an unknown tensor", "norm a(x: [d]) -> y {\n  y = x\n  storage x, z: f32\n}", 3, "z",
         "storage names 'z', which is not an input, parameter or output"},
        {"unused input", "norm a(x: [d], r: [d]) -> y {\n  y = x\n}", 1, "r:", "input 'r' is not used by any value"},
        {"axis twice in a shape", "norm a(x: [d, d]) -> y {\n  y = x\n}", 1, "d", "axis 'd' appears twice in the shape of 'x'", 2},
        {"axis twice in over", "norm a(x: [r, d]) -> y {\n  y = x - mean(x, over: d, d)\n}", 2, "d", "axis 'd' is listed twice in 'over:'", 2},
        {"output that is an input", "norm a(x: [d]) -> x {\n  y = x\n}", 1, "x {", "output 'x' is an input"},
        {"only optional outputs (found by fuzzing: a crash in the plan)", "norm a(x: [d]) -> y?, z? {\n  y = x\n  z = x * 2\n}", 1, "y?",
         "every output is optional ('?'); at least one output must be required"},
        {"a value named like an input, used before (found by fuzzing: a crash)", "norm a(x: [d]) -> y {\n  v = x\n  x = v * 2\n  y = x\n}", 3, "x",
         "duplicate name 'x'"},
        {"a number past the double range (found by fuzzing: printed as inf)", "norm a(x: [d]) -> y {\n  y = x + 1e5555\n}", 2, "1e5555",
         "number '1e5555' is too large"},
        {"huge axis extent (found by fuzzing: the cast was undefined)", "norm a(x: [n, c: (g, cg)]) -> y {\n  axis g = 3e77\n  y = x - mean(x, over: cg)\n}", 2, "3e77",
         "the extent of axis 'g' must be a positive integer, got 3e77"},
        {"non-integer axis extent", "norm a(x: [n, c: (g, cg)]) -> y {\n  axis g = 2.5\n  y = x - mean(x, over: cg)\n}", 2, "2.5",
         "the extent of axis 'g' must be a positive integer, got 2.5"},
        {"split declared after unsplit use", "norm a(w: [c], x: [n, c: (g, cg)]) -> y {\n  axis g = 2\n  y = x * w\n}", 1, "c:",
         "axis 'c' is used unsplit at 1:12 before being split here"},
        {"output shape with an unknown axis", "norm a(x: [d]) -> y: [q] {\n  y = x\n}", 1, "q", "unknown axis 'q' in the shape of output 'y'"},
        {"too deep", "norm a(x: [d]) -> y {\n  y = " + std::string(300, '(') + "x" + std::string(300, ')') + "\n}", 2, "(",
         "expression nested too deeply", 201},
        {"empty input list", "norm a() -> y {\n  y = 1\n}", 1, ")", "a norm needs at least one input (or a parameter it normalizes"},
        {"index out of range", "norm a(x: [d]) -> y {\n  param w: [k]\n  axis k = 3\n  y = x * w[3]\n}", 4, "3",
         "index 3 is out of range for axis 'k' of 'w' (extent 3: 0 to 2)"},
        {"negative index", "norm a(x: [d]) -> y {\n  param w: [k]\n  axis k = 3\n  y = x * w[-1]\n}", 4, "-1",
         "index -1 is out of range for axis 'k' of 'w'"},
        {"fractional index", "norm a(x: [d]) -> y {\n  param w: [k]\n  axis k = 3\n  y = x * w[0.5]\n}", 4, "0.5",
         "index 0.5 is out of range"},
        {"index of an axis without a fixed extent", "norm a(x: [d]) -> y {\n  param w: [k]\n  y = x * w[0]\n}", 3, "0",
         "axis 'k' of 'w' has no fixed extent; add 'axis k = N' to index it"},
        {"too many indices", "norm a(x: [d]) -> y {\n  param w: [k]\n  axis k = 3\n  y = x * w[0, 1]\n}", 4, "1",
         "'w' has 1 axes [k], but 2 indices are given"},
        {"index of a value", "norm a(x: [d]) -> y {\n  v = x * 2\n  y = v[0]\n}", 3, "v", "'v' is not a tensor; only an input or a parameter can be indexed"},
        {"index that is not a number", "norm a(x: [d]) -> y {\n  param w: [k]\n  axis k = 3\n  y = x * w[i]\n}", 4, "i]",
         "expected number as an index (a constant integer)"},
        {"round without to", "norm a(x: [d]) -> y {\n  y = round(x * 2)\n}", 2, "round", "'round' needs 'to:' naming a storage type or a tensor"},
        {"round to an unknown type", "norm a(x: [d]) -> y {\n  y = round(x * 2, to: f8)\n}", 2, "f8",
         "'f8' is neither a storage type (f32, bf16, f16) nor an input, parameter or output"},
        {"round to f64", "norm a(x: [d]) -> y {\n  y = round(x * 2, to: f64)\n}", 2, "f64", "'f64' is neither a storage type"},
        {"to on another function", "norm a(x: [d]) -> y {\n  y = tanh(x, to: bf16)\n}", 2, "to:", "'to:' belongs to round(e, to: T)"},
        {"round with over", "norm a(x: [d]) -> y {\n  y = round(x, over: d)\n}", 2, "over", "'round' is elementwise and does not reduce"},
        {"trailing tokens", "norm a(x: [d]) -> y {\n  y = x\n}\nnorm b", 4, "norm", "expected end of file"},
    };
    for (const Case &c : cases) {
        SECTION(c.what) {
            Diagnostic d = first_diagnostic(c.source);
            INFO("case: " << c.what << "\n" << d.render());
            CHECK(d.file == "t.norm");
            CHECK(d.message.find(c.message) != std::string::npos);
            CHECK(d.loc.line == c.line);
            int col = c.anchor.empty() ? 1 : col_of(c.source, c.line, c.anchor, c.occurrence);
            REQUIRE(col > 0);
            CHECK(d.loc.col == col);
        }
    }
}

TEST_CASE("a diagnostic renders as file:line:col, the line, and a caret", "[dsl][diagnostics]") {
    Diagnostic d = first_diagnostic("norm a(x: [rows, d]) -> y {\n  y = mean(x, over: q)\n}");
    CHECK(d.render() ==
          "t.norm:2:21: error: unknown axis 'q'\n"
          "    y = mean(x, over: q)\n"
          "                      ^\n");
}

TEST_CASE("the checker reports several independent errors at once", "[dsl][diagnostics]") {
    try {
        load_norm_text("t.norm", "norm a(x: [d]) -> y {\n  y = foo(x) + bar\n  accumulate f16\n}");
        FAIL("accepted");
    } catch (const DiagnosticError &e) {
        REQUIRE(e.diagnostics().size() >= 2);
        CHECK(e.render().find("unknown function 'foo'") != std::string::npos);
        CHECK(e.render().find("accumulation type must be f32 or f64") != std::string::npos);
    }
}

TEST_CASE("a missing file is a diagnostic, not a crash", "[dsl][diagnostics]") {
    CHECK_THROWS_AS(load_norm_file("no/such/file.norm"), DiagnosticError);
}

TEST_CASE("a diagnostic on a long line shows a window around the caret", "[dsl][diagnostics]") {
    // A 300 KB line with the mistake in its middle.
    const std::string src = "norm a(x: [d]) -> y {\n  y = x +" + std::string(200000, ' ') + "zz" + std::string(100000, ' ') + "+ x\n}";
    Diagnostic d = first_diagnostic(src);
    CHECK(d.message.find("unknown name 'zz'") != std::string::npos);
    const std::string r = d.render();
    INFO(r);
    CHECK(r.size() < 400);
    std::istringstream is(r);
    std::string head, line, caret;
    std::getline(is, head);
    std::getline(is, line);
    std::getline(is, caret);
    CHECK(line.find("...") != std::string::npos);
    CHECK(line.find("zz") != std::string::npos);
    // The caret sits under the z.
    REQUIRE(caret.find('^') != std::string::npos);
    CHECK(line.substr(caret.find('^'), 2) == "zz");
    // A short line is never clipped.
    CHECK(first_diagnostic("norm a(x: [d]) -> y {\n  y = x + zz\n}").render().find("...") == std::string::npos);
}

TEST_CASE("thousands of mistakes print the first twenty and a count", "[dsl][diagnostics]") {
    std::string src = "norm a(x: [d]) -> y {\n";
    for (int i = 0; i < 1000; ++i) src += "  v" + std::to_string(i) + " = nope" + std::to_string(i) + "\n";
    src += "  y = x\n}";
    try {
        load_norm_text("t.norm", src);
        FAIL("accepted");
    } catch (const DiagnosticError &e) {
        CHECK(e.diagnostics().size() >= 1000);
        CHECK(e.render().find("... and 980 more errors") != std::string::npos);
    }
}

TEST_CASE("flat chains and chains of values are bounded like nesting: a diagnostic, never a stack overflow", "[dsl][diagnostics]") {
    std::string chain;
    for (int i = 0; i < 50000; ++i) chain += "x + ";
    Diagnostic d = first_diagnostic("norm a(x: [d]) -> y {\n  y = " + chain + "x\n}");
    CHECK(d.message.find("expression too deep: more than 500 levels of operators") != std::string::npos);
    CHECK(d.loc.line == 2);
    std::string lets = "norm a(x: [d]) -> y {\n  v0 = x\n";
    for (int i = 1; i < 1500; ++i) lets += "  v" + std::to_string(i) + " = v" + std::to_string(i - 1) + " + 1\n";
    Diagnostic v = first_diagnostic(lets + "  y = v1499\n}");
    CHECK(v.message.find("levels deep through the values it uses (at most 1000)") != std::string::npos);
    // 400 terms are fine.
    std::string ok;
    for (int i = 0; i < 400; ++i) ok += "x * " + std::to_string(i) + " + ";
    CHECK_NOTHROW(load_norm_text("t.norm", "norm a(x: [d]) -> y {\n  y = " + ok + "x\n}"));
}
