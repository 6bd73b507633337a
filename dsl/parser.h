// Recursive-descent parser for .norm files. Grammar (newlines are not significant, '#' comments):
//
//   file       ::= normDecl
//   normDecl   ::= 'norm' IDENT '(' tensorDecl (',' tensorDecl)* ')' '->' outputs '{' stmt* '}'
//   tensorDecl ::= IDENT ':' shape
//   shape      ::= '[' [shapeAxis (',' shapeAxis)*] ']'
//   shapeAxis  ::= IDENT [':' '(' IDENT ',' IDENT (',' IDENT)* ')']
//   outputs    ::= outputDecl (',' outputDecl)*
//   outputDecl ::= IDENT ['?'] [':' shape] ['updates' IDENT]
//   stmt       ::= 'param' IDENT ':' shape
//                | 'const' IDENT '=' ['-'] NUMBER
//                | 'axis' IDENT '=' NUMBER
//                | 'accumulate' IDENT
//                | 'variance' IDENT
//                | 'storage' IDENT (',' IDENT)* ':' IDENT ('|' IDENT)*
//                | IDENT '=' expr
//   expr       ::= term (('+' | '-') term)*
//   term       ::= unary (('*' | '/') unary)*
//   unary      ::= '-' unary | primary
//   primary    ::= NUMBER | IDENT | IDENT '(' [args] ')' | '(' expr ')'
//   args       ::= arg (',' arg)*
//   arg        ::= expr | 'over' ':' IDENT (',' IDENT)*      -- `over` must be the last argument
#pragma once

#include "dsl/ast.h"

namespace normgen {

// Parses one declaration; throws DiagnosticError with a located message on the first syntax error.
ast::NormDecl parse_norm(const SourceFile &file);

}  // namespace normgen
