#include "dsl/lexer.h"

#include <cmath>

#include <cctype>
#include <cstdlib>

namespace normgen {

const char *tok_spelling(Tok t) {
    switch (t) {
    case Tok::Ident: return "identifier";
    case Tok::Number: return "number";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::LBrace: return "'{'";
    case Tok::RBrace: return "'}'";
    case Tok::Comma: return "','";
    case Tok::Colon: return "':'";
    case Tok::Equal: return "'='";
    case Tok::Plus: return "'+'";
    case Tok::Minus: return "'-'";
    case Tok::Star: return "'*'";
    case Tok::Slash: return "'/'";
    case Tok::Bar: return "'|'";
    case Tok::Arrow: return "'->'";
    case Tok::Question: return "'?'";
    case Tok::End: return "end of file";
    }
    return "?";
}

std::vector<Token> lex(const SourceFile &file, DiagnosticSink &sink) {
    const std::string &s = file.text;
    std::vector<Token> out;
    size_t i = 0;
    int line = 1, col = 1;
    auto advance = [&](size_t n) {
        for (size_t k = 0; k < n && i < s.size(); ++k, ++i) {
            if (s[i] == '\n') { ++line; col = 1; } else { ++col; }
        }
    };
    while (i < s.size()) {
        char c = s[i];
        if (c == '#') {
            while (i < s.size() && s[i] != '\n') advance(1);
            continue;
        }
        if (std::isspace((unsigned char)c)) { advance(1); continue; }
        Token t;
        t.loc = {line, col};
        if (std::isalpha((unsigned char)c) || c == '_') {
            size_t j = i;
            while (j < s.size() && (std::isalnum((unsigned char)s[j]) || s[j] == '_')) ++j;
            t.kind = Tok::Ident;
            t.text = s.substr(i, j - i);
            advance(j - i);
            out.push_back(t);
            continue;
        }
        if (std::isdigit((unsigned char)c) || (c == '.' && i + 1 < s.size() && std::isdigit((unsigned char)s[i + 1]))) {
            // number ::= digits ['.' digits] [('e'|'E') ['+'|'-'] digits]
            size_t j = i;
            while (j < s.size() && std::isdigit((unsigned char)s[j])) ++j;
            if (j < s.size() && s[j] == '.') {
                ++j;
                while (j < s.size() && std::isdigit((unsigned char)s[j])) ++j;
            }
            bool bad = false;
            if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
                ++j;
                if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
                if (j >= s.size() || !std::isdigit((unsigned char)s[j])) bad = true;
                while (j < s.size() && std::isdigit((unsigned char)s[j])) ++j;
            }
            // A number glued to letters or a second '.' ("1.2.3", "3x") is malformed.
            while (j < s.size() && (std::isalnum((unsigned char)s[j]) || s[j] == '_' || s[j] == '.')) { ++j; bad = true; }
            t.text = s.substr(i, j - i);
            if (bad) sink.fatal(t.loc, "malformed number '" + t.text + "'");
            t.kind = Tok::Number;
            t.number = std::strtod(t.text.c_str(), nullptr);
            // A literal past the double range would be an infinity, which no text spells (found by
            // fuzzing: `1e5555` printed as "inf", which does not read back).
            if (!std::isfinite(t.number)) sink.fatal(t.loc, "number '" + t.text + "' is too large (the largest is about 1.8e308)");
            advance(j - i);
            out.push_back(t);
            continue;
        }
        switch (c) {
        case '(': t.kind = Tok::LParen; break;
        case ')': t.kind = Tok::RParen; break;
        case '[': t.kind = Tok::LBracket; break;
        case ']': t.kind = Tok::RBracket; break;
        case '{': t.kind = Tok::LBrace; break;
        case '}': t.kind = Tok::RBrace; break;
        case ',': t.kind = Tok::Comma; break;
        case ':': t.kind = Tok::Colon; break;
        case '=': t.kind = Tok::Equal; break;
        case '+': t.kind = Tok::Plus; break;
        case '*': t.kind = Tok::Star; break;
        case '/': t.kind = Tok::Slash; break;
        case '|': t.kind = Tok::Bar; break;
        case '?': t.kind = Tok::Question; break;
        case '-':
            if (i + 1 < s.size() && s[i + 1] == '>') { t.kind = Tok::Arrow; advance(1); }
            else t.kind = Tok::Minus;
            break;
        default: {
            std::string shown = std::isprint((unsigned char)c) ? std::string(1, c) : "\\x" + [&] {
                const char *hex = "0123456789abcdef";
                return std::string{hex[((unsigned char)c) >> 4], hex[((unsigned char)c) & 15]};
            }();
            sink.fatal(t.loc, "unexpected character '" + shown + "'");
        }
        }
        advance(1);
        out.push_back(t);
    }
    Token end;
    end.kind = Tok::End;
    end.loc = {line, col};
    out.push_back(end);
    return out;
}

}  // namespace normgen
