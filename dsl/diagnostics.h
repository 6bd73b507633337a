// Source locations and user-facing diagnostics for the .norm front end.
//
// Every user error is rendered the way compilers do it:
//
//   layer.norm:4:22: error: unknown axis 'q'
//     ms = mean(x * x, over: q)
//                            ^
//
// A DiagnosticError carries one or more of these; anything else thrown from the front end is a
// normgen bug (internal error), never a user mistake.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace normgen {

struct SourceLoc {
    int line = 0;  // 1-based; 0 means "no location" (e.g. built through the C++ API)
    int col = 0;   // 1-based
    bool valid() const { return line > 0; }
};

// The text of one .norm file, kept so diagnostics can quote the offending line.
struct SourceFile {
    std::string path;
    std::string text;
    std::string line_text(int line) const;
};

struct Diagnostic {
    std::string file;
    SourceLoc loc;
    std::string message;
    std::string source_line;  // the quoted line, empty when there is no location
    std::string render() const;
};

class DiagnosticError : public std::runtime_error {
public:
    explicit DiagnosticError(std::vector<Diagnostic> diags);
    const std::vector<Diagnostic> &diagnostics() const { return diags_; }
    std::string render() const;

private:
    std::vector<Diagnostic> diags_;
};

// Collects diagnostics for one file; throw_if_any() raises them together.
class DiagnosticSink {
public:
    explicit DiagnosticSink(std::shared_ptr<const SourceFile> file) : file_(std::move(file)) {}
    void error(SourceLoc loc, std::string message);
    bool has_errors() const { return !diags_.empty(); }
    void throw_if_any() const;
    [[noreturn]] void fatal(SourceLoc loc, std::string message);

private:
    std::shared_ptr<const SourceFile> file_;
    std::vector<Diagnostic> diags_;
};

}  // namespace normgen
