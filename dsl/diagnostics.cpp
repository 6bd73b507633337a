#include "dsl/diagnostics.h"

#include <algorithm>
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
        // A long line is clipped to a window around the caret, marked with "...".
        constexpr size_t kWidth = 120, kBefore = 60;
        const size_t caret = (size_t)std::max(loc.col - 1, 0);
        size_t begin = 0, end = source_line.size();
        if (source_line.size() > kWidth) {
            begin = caret > kBefore ? std::min(caret - kBefore, source_line.size() - kWidth) : 0;
            end = begin + kWidth;
        }
        const std::string head = begin > 0 ? "..." : "", tail = end < source_line.size() ? "..." : "";
        os << "  " << head << source_line.substr(begin, end - begin) << tail << "\n  " << std::string(head.size(), ' ');
        // Keep tabs so the caret lines up under tab-indented source.
        for (size_t i = begin; i < caret && i < source_line.size(); ++i) os << (source_line[i] == '\t' ? '\t' : ' ');
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
    constexpr size_t kShown = 20;  // a file with thousands of mistakes gets the first ones and a count
    std::string s;
    for (size_t i = 0; i < diags_.size() && i < kShown; ++i) s += diags_[i].render();
    if (diags_.size() > kShown) s += "... and " + std::to_string(diags_.size() - kShown) + " more errors\n";
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
