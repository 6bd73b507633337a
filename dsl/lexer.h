// Hand-written lexer for .norm files. Newlines are not significant; '#' starts a comment.
#pragma once

#include "dsl/diagnostics.h"

#include <string>
#include <vector>

namespace normgen {

enum class Tok {
    Ident, Number, LParen, RParen, LBracket, RBracket, LBrace, RBrace,
    Comma, Colon, Equal, Plus, Minus, Star, Slash, Bar, Arrow, Question, End
};

const char *tok_spelling(Tok t);

struct Token {
    Tok kind = Tok::End;
    std::string text;  // identifier name or number spelling
    double number = 0;
    SourceLoc loc;
};

// Tokenizes the whole file; a lexical error is reported through `sink` and thrown.
std::vector<Token> lex(const SourceFile &file, DiagnosticSink &sink);

}  // namespace normgen
