/*
** cells_plan.h — the plan of a `cells` query (its idxStr): one encoder, one parser.
**
** Pure C: no SQLite.  xBestIndex (ext/vtab_cells.c) describes its plan as a list of items
** and cells_plan_format() writes it; xFilter gives the string back to cells_plan_parse(),
** which checks every part of it.  The text is printable and names the plan in words, so
** EXPLAIN QUERY PLAN shows it:
**
**   plan   := "scan" | item ( ", " item )*
**   item   := "#" COL " " QNAME " " OP " ?" ARG [ " prefilter" ]
**           | "LIMIT ?" ARG | "OFFSET ?" ARG | "ORDER BY cell_id"
**   OP     := "=" | "<" | "<=" | ">" | ">=" | "IN" | "IS NULL" | "IS NOT NULL"
**   COL    := the column number in the table's schema (decimal, 0 .. ncols-1)
**   QNAME  := the column's name in double quotes ("" for a quote); must be that column's
**   ARG    := 1-based index into xFilter's argv; every one of 1..nargs used exactly once
**
** "prefilter" marks a superset filter (SQLite re-checks each row: omit = 0).  LIMIT,
** OFFSET and ORDER BY appear at most once each.  A plan has at most CELLS_MAX_ARGS
** arguments: xBestIndex pushes down at most CELLS_MAX_TERMS terms (and leaves the rest
** to SQLite), plus LIMIT and OFFSET.
*/
#ifndef CELLS_PLAN_H
#define CELLS_PLAN_H
#include <stddef.h>

/* The columns of the table's schema: these three, then one per stored obs column. */
enum { CELLS_COL_CELL_ID = 0, CELLS_COL_NAME = 1, CELLS_COL_TILE = 2, CELLS_COL_OBS0 = 3 };

#define CELLS_MAX_TERMS 250
#define CELLS_MAX_ARGS (CELLS_MAX_TERMS + 2)

/* Operators of a term (the numbering is part of no format: it never leaves the process). */
enum { CELLS_OP_EQ = 1, CELLS_OP_LT, CELLS_OP_LE, CELLS_OP_GT, CELLS_OP_GE, CELLS_OP_IN, CELLS_OP_ISNULL,
       CELLS_OP_NOTNULL };

/* Kinds of plan items. */
enum { CELLS_ITEM_TERM = 1, CELLS_ITEM_LIMIT, CELLS_ITEM_OFFSET, CELLS_ITEM_ORDER };

typedef struct cells_plan_item {
  int kind;     /* CELLS_ITEM_* */
  int col;      /* TERM: schema column */
  int op;       /* TERM: CELLS_OP_* */
  int exact;    /* TERM: 1, or 0 for a prefilter */
  int arg;      /* TERM, LIMIT, OFFSET: 0-based argv index; ORDER: -1 */
} cells_plan_item;

/* The name of schema column col (never NULL for 0 <= col < ncols). */
typedef const char *(*cells_colname_fn)(void *ctx, int col);

/* The word of an operator ("=", "IS NOT NULL"), or "" for an unknown one. */
const char *cells_op_word(int op);

/* Writes the plan of items[0..n) ("scan" when n is 0) into out, NUL-terminated when cap > 0
** (truncated to cap-1 bytes if it does not fit), and returns its full length without the
** NUL: call it with cap 0 to size the buffer. */
size_t cells_plan_format(const cells_plan_item *items, int n, cells_colname_fn name, void *ctx, char *out,
                         size_t cap);

/* Parses plan z written for a table of ncols columns and a call with nargs arguments into
** items[0..cap) (*n_items set).  0 on success; -1 on a plan that breaks the grammar above,
** with the reason in err (errcap bytes, NUL-terminated), e.g. "item 2 ('#4 ...'): argument
** ?7 out of 1..3".  Never reads past z's NUL. */
int cells_plan_parse(const char *z, int nargs, int ncols, cells_colname_fn name, void *ctx, cells_plan_item *items,
                     int cap, int *n_items, char *err, size_t errcap);
#endif
