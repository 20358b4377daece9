/* Tokens of MLIR text (internal to the parser). The lexer is a pure function of a position:
 * lm_lex() reads one token at `at` and says where the next one starts, so the parser can peek
 * and backtrack by saving a position. `loc(...)` annotations and comments are skipped here, so
 * the parser never sees locations. Shapes (`2x3xf32`) are not tokenized here: the type parser
 * reads dimensions from the raw text. */
#ifndef LM_HLO_LEX_H
#define LM_HLO_LEX_H

#include <stddef.h>
#include <stdint.h>

typedef enum lm_tok_kind {
  LM_T_EOF = 0,
  LM_T_BAD,       /* a character that starts no token; s/n cover it */
  LM_T_PCT,       /* %name, s/n without '%'; idx = N for %name#N, else -1 */
  LM_T_CARET,     /* ^bb0, without '^' */
  LM_T_AT,        /* @name or @"quoted", without '@' and quotes (escapes not decoded) */
  LM_T_HASH,      /* #name (dialect attribute or alias), without '#' */
  LM_T_BANG,      /* !name (dialect type or alias), without '!' */
  LM_T_ID,        /* bare identifier: letters, digits, _ $ . (e.g. stablehlo.add, tensor, f32) */
  LM_T_INT,       /* decimal or 0x hex digits, no sign */
  LM_T_FLOAT,     /* decimal with '.' or exponent, no sign */
  LM_T_STR,       /* "..." without quotes; escapes not decoded */
  LM_T_LPAREN, LM_T_RPAREN, LM_T_LBRACK, LM_T_RBRACK, LM_T_LBRACE, LM_T_RBRACE,
  LM_T_LT, LM_T_GT, LM_T_COMMA, LM_T_COLON, LM_T_EQ, LM_T_ARROW, LM_T_QUESTION, LM_T_STAR,
  LM_T_PLUS, LM_T_MINUS, LM_T_META_BEGIN /* {-# */, LM_T_META_END /* #-} */,
} lm_tok_kind;

typedef struct lm_tok {
  lm_tok_kind k;
  const char *s;     /* token text (see kinds) */
  size_t n;
  const char *start; /* first character of the token in the source */
  const char *stop;  /* one past its last character */
  int64_t idx;       /* LM_T_PCT: result index after '#', or -1 */
  uint32_t line, col;
} lm_tok;

/* Position in the source: the pointer and the line bookkeeping that goes with it. */
typedef struct lm_lexpos {
  const char *p;
  const char *line_start;
  uint32_t line;
} lm_lexpos;

/* Lexes one token starting at *pos (skipping blanks, comments and loc(...)); advances *pos past
 * it. end is the end of the source. Never reads at or past end. */
void lm_lex(lm_lexpos *pos, const char *end, lm_tok *out);

/* Skips blanks, newlines and // comments at *pos (not loc). */
void lm_lex_skip_blank(lm_lexpos *pos, const char *end);

/* Describes a token for "found ..." in messages: writes into buf and returns it. */
const char *lm_tok_describe(const lm_tok *t, char *buf, size_t cap);

#endif
