/*
** dc_plan.h — the plan codec of every virtual table (its idxStr): one grammar, one encoder,
** one parser.
**
** Pure C: no SQLite.  xBestIndex describes its plan as a list of items and dc_plan_format()
** writes it (through dc_plan_set, ext/deltacells.c, which also sets idxNum to the number of
** arguments); xFilter gives the string back to dc_plan_parse(), which checks every part of it
** against the table's description (dc_plan_table).  The text is printable and names the plan
** in words, so EXPLAIN QUERY PLAN shows it:
**
**   plan   := "scan" | item ( ", " item )*
**   item   := "#" COL " " QNAME " " OP " ?" ARG [ " prefilter" ]      a WHERE term
**           | WORD [ " ?" ARG ]                                       one of the table's words
**   OP     := "=" | "<" | "<=" | ">" | ">=" | "IN" | "IS NULL" | "IS NOT NULL"
**   COL    := the column number in the table's schema (decimal, 0 .. ncols-1)
**   QNAME  := the column's name in double quotes ("" for a quote); must be that column's
**   WORD   := a word of the table (e.g. "LIMIT", "ORDER BY cell_id"), at most once each;
**             " ?" ARG follows exactly the words that take an argument
**   ARG    := 1-based index into xFilter's argv; every one of 1..nargs used exactly once
**
** "IN" takes its whole list through sqlite3_vtab_in (one xFilter call).  "prefilter" marks a
** superset filter: SQLite re-checks each row (omit = 0); a term without it is decided exactly
** by the table (omit = 1).  A table-valued function's arguments are exact "=" terms on its
** hidden columns (dc_batch: #6 "cells" = ?1).  The words of each table:
**   cells            LIMIT ?N, OFFSET ?N, ORDER BY cell_id
**   expression       ORDER BY cell_id
**   expression_long  ORDER BY cell_id, gene_id
**   tiles            ORDER BY tile, ORDER BY tile DESC
**   genes            ORDER BY gene_id, ORDER BY gene_id DESC
**   dc_aggregate*    log1p (mean_log1p_cpm is used), names (gene names are used)
**   dc_batch         none
** A plan has at most DC_PLAN_MAX_ARGS arguments: every xBestIndex pushes down at most
** DC_PLAN_MAX_TERMS terms (and leaves the rest to SQLite), plus LIMIT and OFFSET.
*/
#ifndef DC_PLAN_H
#define DC_PLAN_H
#include <stddef.h>

#define DC_PLAN_MAX_TERMS 250
#define DC_PLAN_MAX_ARGS (DC_PLAN_MAX_TERMS + 2)
/* a table has at most this many words, so a plan has at most DC_PLAN_MAX_ITEMS items */
#define DC_PLAN_MAX_WORDS 8
#define DC_PLAN_MAX_ITEMS (DC_PLAN_MAX_ARGS + DC_PLAN_MAX_WORDS)

/* Operators of a term (the numbering is part of no format: it never leaves the process). */
enum { DC_OP_EQ = 1, DC_OP_LT, DC_OP_LE, DC_OP_GT, DC_OP_GE, DC_OP_IN, DC_OP_ISNULL, DC_OP_NOTNULL };

/* Kinds of plan items: a term, or 1 + the index of one of the table's words. */
enum { DC_ITEM_TERM = 0 };

typedef struct dc_plan_word {
  const char *word;        /* e.g. "ORDER BY cell_id" */
  int takes_arg;           /* 1: written WORD " ?" ARG */
} dc_plan_word;

/* What a table's plans may name: its columns (names through name(ctx, col), never NULL for
** 0 <= col < ncols) and its words. */
typedef struct dc_plan_table {
  int ncols;
  const char *(*name)(void *ctx, int col);
  void *ctx;
  const dc_plan_word *words;
  int nwords;
} dc_plan_table;

typedef struct dc_plan_item {
  int kind;     /* DC_ITEM_TERM, or 1 + word index */
  int col;      /* TERM: schema column */
  int op;       /* TERM: DC_OP_* */
  int exact;    /* TERM: 1, or 0 for a prefilter */
  int arg;      /* TERM and words with an argument: 0-based argv index; else -1 */
} dc_plan_item;

/* The word of an operator ("=", "IS NOT NULL"), or "" for an unknown one. */
const char *dc_op_word(int op);

/* Writes the plan of items[0..n) ("scan" when n is 0) into out, NUL-terminated when cap > 0
** (truncated to cap-1 bytes if it does not fit), and returns its full length without the
** NUL: call it with cap 0 to size the buffer. */
size_t dc_plan_format(const dc_plan_table *t, const dc_plan_item *items, int n, char *out, size_t cap);

/* Parses plan z of table t for a call with nargs arguments into items[0..cap) (*n_items
** set).  0 on success; -1 on a plan that breaks the grammar above, with the reason in err
** (errcap bytes, NUL-terminated), e.g. "item 2 ('#4 ...'): argument ?7 out of 1..3".  Never
** reads past z's NUL. */
int dc_plan_parse(const dc_plan_table *t, const char *z, int nargs, dc_plan_item *items, int cap, int *n_items,
                  char *err, size_t errcap);

/* xFilter's side: the plan idxStr of a call with argc arguments, which xBestIndex gave as
** idxNum = argc (at most DC_PLAN_MAX_ARGS), into items[0..DC_PLAN_MAX_ITEMS).  0 on success;
** -1 when the count is not the planned one or idxStr is missing (why left ""), or when
** dc_plan_parse refuses the string (its reason in why). */
int dc_plan_take(const dc_plan_table *t, int idxNum, const char *idxStr, int argc, dc_plan_item *items,
                 int *n_items, char *why, size_t whycap);
#endif
