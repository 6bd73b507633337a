#include "dsl/diagnostics.h"

#include <sstream>

namespace normgen {

std::string SourceFile::line_text(int line) const {
    if (line <= 0) return {};
    size_t pos = 0;
    for (int l = 1; l < line; ++l) {
        pos = text.find('\n', pos);
        if (pos == std::string::npos) return {};
        ++pos;
    }
    size_t end = text.find('\n', pos);
    std::string s = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!s.empty() && s.back() == '\r') s.pop_back();
    return s;
}

std::string Diagnostic::render() const {
    std::ostringstream os;
    os << (file.empty() ? "<input>" : file);
    if (loc.valid()) os << ":" << loc.line << ":" << loc.col;
    os << ": error: " << message << "\n";
    if (loc.valid() && !source_line.empty()) {
        os << "  " << source_line << "\n  ";
        // Keep tabs so the caret lines up under tab-indented source.
        for (int i = 1; i < loc.col && i - 1 < (int)source_line.size(); ++i)
            os << (source_line[i - 1] == '\t' ? '\t' : ' ');
        os << "^\n";
    }
    return os.str();
}

static std::string first_message(const std::vector<Diagnostic> &d) {
    return d.empty() ? std::string("error") : d.front().render();
}

DiagnosticError::DiagnosticError(std::vector<Diagnostic> diags)
    : std::runtime_error(first_message(diags)), diags_(std::move(diags)) {}

std::string DiagnosticError::render() const {
    std::string s;
    for (const auto &d : diags_) s += d.render();
    return s;
}

void DiagnosticSink::error(SourceLoc loc, std::string message) {
    Diagnostic d;
    d.file = file_ ? file_->path : std::string();
    d.loc = loc;
    d.message = std::move(message);
    if (file_) d.source_line = file_->line_text(loc.line);
    diags_.push_back(std::move(d));
}

void DiagnosticSink::throw_if_any() const {
    if (!diags_.empty()) throw DiagnosticError(diags_);
}

void DiagnosticSink::fatal(SourceLoc loc, std::string message) {
    error(loc, std::move(message));
    throw DiagnosticError(diags_);
}

}  // namespace normgen
