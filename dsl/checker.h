// Semantic checks: ast::NormDecl -> NormSpec. Every user mistake becomes a located diagnostic.
#pragma once

#include "dsl/ast.h"
#include "dsl/norm_spec.h"

namespace normgen {

// Checks `decl` (parsed from `file`, which may be null for declarations built in C++) and returns the
// validated IR. Throws DiagnosticError listing every error found.
NormSpec check_norm(const ast::NormDecl &decl, std::shared_ptr<const SourceFile> file);

// Convenience: read, parse and check a .norm file from disk / from text.
NormSpec load_norm_file(const std::string &path);
NormSpec load_norm_text(const std::string &path, const std::string &text);

}  // namespace normgen
