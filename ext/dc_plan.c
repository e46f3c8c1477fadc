/*
** dc_plan.c — writing and parsing the plan of a virtual table's query (see dc_plan.h), for
** every table.  Pure C: no SQLite.
*/
#include "dc_plan.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const op_words[] = {"", "=", "<", "<=", ">", ">=", "IN", "IS NULL", "IS NOT NULL"};

const char *dc_op_word(int op) {
  return op >= DC_OP_EQ && op <= DC_OP_NOTNULL ? op_words[op] : "";
}

/* a bounded writer: counts every byte, stores those that fit */
typedef struct wbuf { char *out; size_t cap, len; } wbuf;

static void put(wbuf *w, const char *s, size_t n) {
  if (w->len < w->cap) {
    size_t room = w->cap - w->len;
    memcpy(w->out + w->len, s, n < room ? n : room);
  }
  w->len += n;
}
static void puts_(wbuf *w, const char *s) { put(w, s, strlen(s)); }
static void putnum(wbuf *w, long long x) {
  char b[24];
  int k = snprintf(b, sizeof b, "%lld", x);
  put(w, b, (size_t)k);
}

size_t dc_plan_format(const dc_plan_table *t, const dc_plan_item *items, int n, char *out, size_t cap) {
  wbuf w = {out, cap, 0};
  if (n <= 0) puts_(&w, "scan");
  for (int i = 0; i < n; i++) {
    const dc_plan_item *it = &items[i];
    if (i) puts_(&w, ", ");
    if (it->kind == DC_ITEM_TERM) {
      puts_(&w, "#");
      putnum(&w, it->col);
      puts_(&w, " \"");
      for (const char *q = t->name(t->ctx, it->col); *q; q++) {
        put(&w, q, 1);
        if (*q == '"') put(&w, q, 1);   /* a quote doubled, as SQL writes it */
      }
      puts_(&w, "\" ");
      puts_(&w, dc_op_word(it->op));
      puts_(&w, " ?");
      putnum(&w, (long long)it->arg + 1);
      if (!it->exact) puts_(&w, " prefilter");
    } else if (it->kind >= 1 && it->kind <= t->nwords) {
      const dc_plan_word *wd = &t->words[it->kind - 1];
      puts_(&w, wd->word);
      if (wd->takes_arg) { puts_(&w, " ?"); putnum(&w, (long long)it->arg + 1); }
    } else {
      puts_(&w, "?");        /* no such word: the parser rejects the plan */
    }
  }
  if (cap) out[w.len < cap ? w.len : cap - 1] = 0;
  return w.len;
}

static int fail(char *err, size_t errcap, int item, const char *at, const char *fmt, ...) {
  if (!errcap) return -1;
  int k = 0;
  if (item > 0) {
    int m = 0;   /* the item's text, up to its end or 40 bytes */
    while (at && at[m] && m < 40 && strncmp(at + m, ", ", 2) != 0) m++;
    k = snprintf(err, errcap, "item %d ('%.*s%s'): ", item, m, at ? at : "", at && at[m] && m == 40 ? "..." : "");
    if (k < 0) k = 0;
    if ((size_t)k >= errcap) return -1;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + k, errcap - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

/* a decimal number of at most 9 digits at *pz (no sign); -1 if none */
static long number(const char **pz) {
  const char *z = *pz;
  long x = 0;
  int d = 0;
  while (*z >= '0' && *z <= '9') {
    if (++d > 9) return -1;
    x = x * 10 + (*z++ - '0');
  }
  if (!d) return -1;
  *pz = z;
  return x;
}

/* the table's word at z, ending where an item may end (or before " ?" when it takes an
** argument): its index, or -1 */
static int word_at(const dc_plan_table *t, const char *z) {
  int best = -1;
  size_t best_len = 0;
  for (int k = 0; k < t->nwords; k++) {
    size_t l = strlen(t->words[k].word);
    if (l <= best_len || strncmp(z, t->words[k].word, l) != 0) continue;
    if (t->words[k].takes_arg ? strncmp(z + l, " ?", 2) == 0 : (z[l] == 0 || strncmp(z + l, ", ", 2) == 0)) {
      best = k;
      best_len = l;
    }
  }
  return best;
}

/* the table's words for a message: "LIMIT, OFFSET, ORDER BY cell_id" (truncated to n) */
static void word_list(const dc_plan_table *t, char *out, size_t n) {
  wbuf w = {out, n, 0};
  for (int k = 0; k < t->nwords; k++) {
    if (k) puts_(&w, ", ");
    puts_(&w, t->words[k].word);
  }
  if (!t->nwords) puts_(&w, "none");
  if (n) out[w.len < n ? w.len : n - 1] = 0;
}

int dc_plan_parse(const dc_plan_table *t, const char *z, int nargs, dc_plan_item *items, int cap, int *n_items,
                  char *err, size_t errcap) {
  unsigned char used[DC_PLAN_MAX_ARGS];
  unsigned char seen[DC_PLAN_MAX_WORDS];
  *n_items = 0;
  if (errcap) err[0] = 0;
  if (!z) return fail(err, errcap, 0, NULL, "no plan");
  if (nargs < 0 || nargs > DC_PLAN_MAX_ARGS)
    return fail(err, errcap, 0, NULL, "%d arguments, more than the %d a plan may have", nargs, DC_PLAN_MAX_ARGS);
  if (t->nwords < 0 || t->nwords > DC_PLAN_MAX_WORDS)
    return fail(err, errcap, 0, NULL, "a table of %d words, more than %d", t->nwords, DC_PLAN_MAX_WORDS);
  memset(used, 0, sizeof used);
  memset(seen, 0, sizeof seen);
  if (!strcmp(z, "scan")) z += 4;
  else if (!*z) return fail(err, errcap, 0, NULL, "empty plan");
  int i = 0;
  while (*z) {
    const char *start = z;
    dc_plan_item it = {DC_ITEM_TERM, -1, 0, 1, -1};
    int takes_arg = 1;
    if (i >= cap) return fail(err, errcap, i + 1, start, "more items than %d", cap);
    if (*z == '#') {
      z++;
      long col = number(&z);
      if (col < 0 || col >= t->ncols) return fail(err, errcap, i + 1, start, "no column number in 0..%d", t->ncols - 1);
      if (*z++ != ' ' || *z++ != '"') return fail(err, errcap, i + 1, start, "no quoted column name after the number");
      const char *nm = t->name(t->ctx, (int)col);
      const char *want = nm;
      for (;;) {   /* the quoted name must be the column's */
        if (*z == 0) return fail(err, errcap, i + 1, start, "unterminated column name");
        if (*z == '"') {
          if (z[1] != '"') { z++; break; }
          if (*nm != '"') return fail(err, errcap, i + 1, start, "column %ld is \"%s\"", col, want);
          nm++;
          z += 2;
          continue;
        }
        if (*nm++ != *z++) return fail(err, errcap, i + 1, start, "column %ld is \"%s\"", col, want);
      }
      if (*nm) return fail(err, errcap, i + 1, start, "column %ld is \"%s\"", col, want);
      if (*z++ != ' ') return fail(err, errcap, i + 1, start, "no operator");
      for (int o = DC_OP_NOTNULL; o >= DC_OP_EQ; o--) {   /* longest words first */
        size_t l = strlen(op_words[o]);
        if (!strncmp(z, op_words[o], l) && z[l] == ' ') { it.op = o; z += l; break; }
      }
      if (!it.op) return fail(err, errcap, i + 1, start, "unknown operator");
      if (strncmp(z, " ?", 2)) return fail(err, errcap, i + 1, start, "no argument after the operator");
      z += 2;
      it.col = (int)col;
    } else {
      int k = word_at(t, z);
      if (k < 0) {
        char words[200];
        word_list(t, words, sizeof words);
        return fail(err, errcap, i + 1, start, "not a term or a word of this table (%s)", words);
      }
      if (seen[k]++) return fail(err, errcap, i + 1, start, "a second %s", t->words[k].word);
      it.kind = k + 1;
      z += strlen(t->words[k].word);
      takes_arg = t->words[k].takes_arg;
      if (takes_arg) z += 2;   /* " ?" */
    }
    if (takes_arg) {
      long a = number(&z);
      if (a < 1 || a > nargs) return fail(err, errcap, i + 1, start, "argument ?%ld out of 1..%d", a, nargs);
      if (used[a - 1]++) return fail(err, errcap, i + 1, start, "argument ?%ld used twice", a);
      it.arg = (int)a - 1;
      if (it.kind == DC_ITEM_TERM && !strncmp(z, " prefilter", 10)) { it.exact = 0; z += 10; }
    }
    if (*z) {
      if (strncmp(z, ", ", 2)) return fail(err, errcap, i + 1, start, "junk after the item");
      z += 2;
      if (!*z) return fail(err, errcap, 0, NULL, "a trailing ', '");
    }
    items[i++] = it;
  }
  for (int a = 0; a < nargs; a++)
    if (!used[a]) return fail(err, errcap, 0, NULL, "argument ?%d is not used", a + 1);
  *n_items = i;
  return 0;
}

int dc_plan_take(const dc_plan_table *t, int idxNum, const char *idxStr, int argc, dc_plan_item *items,
                 int *n_items, char *why, size_t whycap) {
  if (whycap) why[0] = 0;
  if (idxNum != argc || !idxStr || argc > DC_PLAN_MAX_ARGS) return -1;
  return dc_plan_parse(t, idxStr, argc, items, DC_PLAN_MAX_ITEMS, n_items, why, whycap) ? -1 : 0;
}
