/* The MLIR text lexer (see lex.h): one token at a time from a position, skipping blanks,
 * `//` comments and `loc(...)` location annotations. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "hlo/lex.h"

static int is_letter(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int is_id_char(int c) { return is_letter(c) || is_digit(c) || c == '_' || c == '$' || c == '.'; }
/* Characters of %value and ^block names after the sigil (MLIR's suffix-id). */
static int is_suffix_char(int c) { return is_letter(c) || is_digit(c) || c == '_' || c == '$' || c == '.' || c == '-'; }

void lm_lex_skip_blank(lm_lexpos *pos, const char *end) {
  const char *p = pos->p;
  while (p < end) {
    char c = *p;
    if (c == '\n') {
      p++;
      pos->line++;
      pos->line_start = p;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      p++;
    } else if (c == '/' && p + 1 < end && p[1] == '/') {
      while (p < end && *p != '\n') p++;
    } else {
      break;
    }
  }
  pos->p = p;
}

/* Skips a "..." string starting at p (p points at the opening quote); returns the position after
 * the closing quote, or end if unterminated. Tracks newlines inside the string. */
static const char *skip_string(lm_lexpos *pos, const char *p, const char *end) {
  p++;
  while (p < end && *p != '"') {
    if (*p == '\\' && p + 1 < end) {
      p += 2;
      continue;
    }
    if (*p == '\n') {
      pos->line++;
      pos->line_start = p + 1;
    }
    p++;
  }
  return p < end ? p + 1 : end;
}

/* At `loc(`: skips to after the balanced `)`. Strings may hold parentheses. */
static void skip_loc(lm_lexpos *pos, const char *end) {
  const char *p = pos->p + 3; /* at '(' */
  int depth = 0;
  while (p < end) {
    char c = *p;
    if (c == '"') {
      p = skip_string(pos, p, end);
      continue;
    }
    if (c == '\n') {
      pos->line++;
      pos->line_start = p + 1;
    }
    p++;
    if (c == '(') depth++;
    else if (c == ')' && --depth == 0) break;
  }
  pos->p = p;
}

static void lex_one(lm_lexpos *pos, const char *end, lm_tok *t) {
  for (;;) {
    lm_lex_skip_blank(pos, end);
    const char *p = pos->p;
    /* loc(...) anywhere is a location annotation: not part of the program. */
    if (end - p >= 4 && memcmp(p, "loc(", 4) == 0 && (p == pos->line_start || !is_id_char((unsigned char)p[-1]))) {
      skip_loc(pos, end);
      continue;
    }
    break;
  }
  const char *p = pos->p;
  memset(t, 0, sizeof *t);
  t->idx = -1;
  t->line = pos->line;
  t->col = (uint32_t)(p - pos->line_start) + 1;
  t->start = p;
  t->s = p;
  if (p >= end) {
    t->k = LM_T_EOF;
    return;
  }
  unsigned char c = (unsigned char)*p;
  const char *q = p + 1;
  switch (c) {
    case '(': t->k = LM_T_LPAREN; break;
    case ')': t->k = LM_T_RPAREN; break;
    case '[': t->k = LM_T_LBRACK; break;
    case ']': t->k = LM_T_RBRACK; break;
    case '}': t->k = LM_T_RBRACE; break;
    case '<': t->k = LM_T_LT; break;
    case '>': t->k = LM_T_GT; break;
    case ',': t->k = LM_T_COMMA; break;
    case ':': t->k = LM_T_COLON; break;
    case '=': t->k = LM_T_EQ; break;
    case '?': t->k = LM_T_QUESTION; break;
    case '*': t->k = LM_T_STAR; break;
    case '+': t->k = LM_T_PLUS; break;
    case '{':
      if (end - p >= 3 && p[1] == '-' && p[2] == '#') {
        t->k = LM_T_META_BEGIN;
        q = p + 3;
      } else {
        t->k = LM_T_LBRACE;
      }
      break;
    case '-':
      if (q < end && *q == '>') {
        t->k = LM_T_ARROW;
        q++;
      } else {
        t->k = LM_T_MINUS;
      }
      break;
    case '"':
      q = skip_string(pos, p, end);
      t->k = q > p + 1 && q[-1] == '"' && q - 1 > p ? LM_T_STR : LM_T_BAD;
      if (t->k == LM_T_STR) {
        t->s = p + 1;
        t->n = (size_t)(q - 1 - (p + 1));
        pos->p = q;
        return;
      }
      q = end;
      break;
    case '%': case '^': {
      while (q < end && is_suffix_char((unsigned char)*q)) q++;
      if (q == p + 1) { t->k = LM_T_BAD; break; }
      t->k = c == '%' ? LM_T_PCT : LM_T_CARET;
      t->s = p + 1;
      t->n = (size_t)(q - (p + 1));
      if (c == '%' && q + 1 < end && *q == '#' && is_digit((unsigned char)q[1])) {
        int64_t v = 0;
        q++;
        while (q < end && is_digit((unsigned char)*q)) {
          if (v < ((int64_t)1 << 40)) v = v * 10 + (*q - '0');
          q++;
        }
        t->idx = v;
      }
      pos->p = q;
      return;
    }
    case '@': {
      if (q < end && *q == '"') {
        const char *e = skip_string(pos, q, end);
        if (e <= q + 1 || e[-1] != '"') { t->k = LM_T_BAD; q = end; break; }
        t->k = LM_T_AT;
        t->s = q + 1;
        t->n = (size_t)(e - 1 - (q + 1));
        pos->p = e;
        return;
      }
      while (q < end && (is_suffix_char((unsigned char)*q))) q++;
      if (q == p + 1) { t->k = LM_T_BAD; break; }
      t->k = LM_T_AT;
      t->s = p + 1;
      t->n = (size_t)(q - (p + 1));
      pos->p = q;
      return;
    }
    case '#': case '!': {
      if (c == '#' && q + 1 < end && q[0] == '-' && q[1] == '}') {
        t->k = LM_T_META_END;
        q += 2;
        break;
      }
      while (q < end && is_id_char((unsigned char)*q)) q++;
      if (q == p + 1) { t->k = LM_T_BAD; break; }
      t->k = c == '#' ? LM_T_HASH : LM_T_BANG;
      t->s = p + 1;
      t->n = (size_t)(q - (p + 1));
      pos->p = q;
      return;
    }
    default:
      if (is_letter(c) || c == '_') {
        while (q < end && is_id_char((unsigned char)*q)) q++;
        t->k = LM_T_ID;
      } else if (is_digit(c)) {
        if (c == '0' && q + 1 < end && *q == 'x' && is_hex((unsigned char)q[1])) {
          q++;
          while (q < end && is_hex((unsigned char)*q)) q++;
          t->k = LM_T_INT;
        } else {
          while (q < end && is_digit((unsigned char)*q)) q++;
          t->k = LM_T_INT;
          if (q < end && *q == '.') {
            q++;
            while (q < end && is_digit((unsigned char)*q)) q++;
            t->k = LM_T_FLOAT;
          }
          if (q < end && (*q == 'e' || *q == 'E')) {
            const char *e = q + 1;
            if (e < end && (*e == '+' || *e == '-')) e++;
            if (e < end && is_digit((unsigned char)*e)) {
              while (e < end && is_digit((unsigned char)*e)) e++;
              q = e;
              t->k = LM_T_FLOAT;
            }
          }
        }
      } else {
        t->k = LM_T_BAD;
      }
  }
  t->n = (size_t)(q - p);
  pos->p = q;
}

void lm_lex(lm_lexpos *pos, const char *end, lm_tok *t) {
  lex_one(pos, end, t);
  t->stop = pos->p;
}

const char *lm_tok_describe(const lm_tok *t, char *buf, size_t cap) {
  static const char *const punct[] = {
      [LM_T_LPAREN] = "'('", [LM_T_RPAREN] = "')'", [LM_T_LBRACK] = "'['", [LM_T_RBRACK] = "']'",
      [LM_T_LBRACE] = "'{'", [LM_T_RBRACE] = "'}'", [LM_T_LT] = "'<'", [LM_T_GT] = "'>'",
      [LM_T_COMMA] = "','", [LM_T_COLON] = "':'", [LM_T_EQ] = "'='", [LM_T_ARROW] = "'->'",
      [LM_T_QUESTION] = "'?'", [LM_T_STAR] = "'*'", [LM_T_PLUS] = "'+'", [LM_T_MINUS] = "'-'",
      [LM_T_META_BEGIN] = "'{-#'", [LM_T_META_END] = "'#-}'",
  };
  if (t->k == LM_T_EOF) {
    snprintf(buf, cap, "end of input");
    return buf;
  }
  if (t->k >= LM_T_LPAREN && t->k <= LM_T_META_END && punct[t->k]) {
    snprintf(buf, cap, "%s", punct[t->k]);
    return buf;
  }
  size_t n = (size_t)(t->stop - t->start);
  const char *what = t->k == LM_T_INT || t->k == LM_T_FLOAT ? "number " : t->k == LM_T_STR ? "string " : "";
  bool cut = n > 40;
  if (cut) n = 40;
  /* Copy printable characters only: the input may hold anything. */
  char tmp[200];
  size_t k = 0;
  for (size_t i = 0; i < n && k + 5 < sizeof tmp; i++) {
    unsigned char ch = (unsigned char)t->start[i];
    if (ch >= 32 && ch < 127) tmp[k++] = (char)ch;
    else k += (size_t)snprintf(tmp + k, sizeof tmp - k, "\\x%02x", ch);
  }
  tmp[k] = 0;
  snprintf(buf, cap, "%s'%s%s'", what, tmp, cut ? "..." : "");
  return buf;
}
