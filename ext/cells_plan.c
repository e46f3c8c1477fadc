/*
** cells_plan.c — writing and parsing the plan of a `cells` query (see cells_plan.h).
** Pure C: no SQLite.
*/
#include "cells_plan.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const op_words[] = {"", "=", "<", "<=", ">", ">=", "IN", "IS NULL", "IS NOT NULL"};

const char *cells_op_word(int op) {
  return op >= CELLS_OP_EQ && op <= CELLS_OP_NOTNULL ? op_words[op] : "";
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

size_t cells_plan_format(const cells_plan_item *items, int n, cells_colname_fn name, void *ctx, char *out,
                         size_t cap) {
  wbuf w = {out, cap, 0};
  if (n <= 0) puts_(&w, "scan");
  for (int i = 0; i < n; i++) {
    const cells_plan_item *it = &items[i];
    if (i) puts_(&w, ", ");
    switch (it->kind) {
      case CELLS_ITEM_TERM: {
        puts_(&w, "#");
        putnum(&w, it->col);
        puts_(&w, " \"");
        for (const char *q = name(ctx, it->col); *q; q++) {
          put(&w, q, 1);
          if (*q == '"') put(&w, q, 1);   /* a quote doubled, as SQL writes it */
        }
        puts_(&w, "\" ");
        puts_(&w, cells_op_word(it->op));
        puts_(&w, " ?");
        putnum(&w, (long long)it->arg + 1);
        if (!it->exact) puts_(&w, " prefilter");
        break;
      }
      case CELLS_ITEM_LIMIT: puts_(&w, "LIMIT ?"); putnum(&w, (long long)it->arg + 1); break;
      case CELLS_ITEM_OFFSET: puts_(&w, "OFFSET ?"); putnum(&w, (long long)it->arg + 1); break;
      default: puts_(&w, "ORDER BY cell_id"); break;
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

int cells_plan_parse(const char *z, int nargs, int ncols, cells_colname_fn name, void *ctx, cells_plan_item *items,
                     int cap, int *n_items, char *err, size_t errcap) {
  unsigned char used[CELLS_MAX_ARGS];
  int seen[CELLS_ITEM_ORDER + 1] = {0};
  *n_items = 0;
  if (errcap) err[0] = 0;
  if (!z) return fail(err, errcap, 0, NULL, "no plan");
  if (nargs < 0 || nargs > CELLS_MAX_ARGS)
    return fail(err, errcap, 0, NULL, "%d arguments, more than the %d a plan may have", nargs, CELLS_MAX_ARGS);
  memset(used, 0, sizeof used);
  if (!strcmp(z, "scan")) z += 4;
  else if (!*z) return fail(err, errcap, 0, NULL, "empty plan");
  int i = 0;
  while (*z) {
    const char *start = z;
    cells_plan_item it = {0, -1, 0, 1, -1};
    if (i >= cap) return fail(err, errcap, i + 1, start, "more items than the plan's %d arguments allow", nargs);
    if (!strncmp(z, "LIMIT ?", 7)) { it.kind = CELLS_ITEM_LIMIT; z += 7; }
    else if (!strncmp(z, "OFFSET ?", 8)) { it.kind = CELLS_ITEM_OFFSET; z += 8; }
    else if (!strncmp(z, "ORDER BY cell_id", 16)) { it.kind = CELLS_ITEM_ORDER; z += 16; }
    else if (*z == '#') {
      z++;
      long col = number(&z);
      if (col < 0 || col >= ncols) return fail(err, errcap, i + 1, start, "no column number in 0..%d", ncols - 1);
      if (*z++ != ' ' || *z++ != '"') return fail(err, errcap, i + 1, start, "no quoted column name after the number");
      const char *nm = name(ctx, (int)col);
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
      for (int o = CELLS_OP_NOTNULL; o >= CELLS_OP_EQ; o--) {   /* longest words first */
        size_t l = strlen(op_words[o]);
        if (!strncmp(z, op_words[o], l) && z[l] == ' ') { it.op = o; z += l; break; }
      }
      if (!it.op) return fail(err, errcap, i + 1, start, "unknown operator");
      if (strncmp(z, " ?", 2)) return fail(err, errcap, i + 1, start, "no argument after the operator");
      z += 2;
      it.kind = CELLS_ITEM_TERM;
      it.col = (int)col;
    } else {
      return fail(err, errcap, i + 1, start, "not a term, LIMIT, OFFSET or ORDER BY");
    }
    if (it.kind != CELLS_ITEM_TERM && seen[it.kind]++)
      return fail(err, errcap, i + 1, start, "a second %s", it.kind == CELLS_ITEM_LIMIT ? "LIMIT"
                  : it.kind == CELLS_ITEM_OFFSET ? "OFFSET" : "ORDER BY");
    if (it.kind != CELLS_ITEM_ORDER) {
      long a = number(&z);
      if (a < 1 || a > nargs) return fail(err, errcap, i + 1, start, "argument ?%ld out of 1..%d", a, nargs);
      if (used[a - 1]++) return fail(err, errcap, i + 1, start, "argument ?%ld used twice", a);
      it.arg = (int)a - 1;
      if (it.kind == CELLS_ITEM_TERM && !strncmp(z, " prefilter", 10)) { it.exact = 0; z += 10; }
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
