/*
** merge_meta.c — the dc_meta entries that `append` and `merge` (cv_merge_into, merge.c) unite
** before the columns are: var categories, ordered categoricals, the files' column types
** (obs_dtypes, var_dtypes, obs_cat_dtypes, var_cat_dtypes), X's dtype and the names of columns stored under
** another name (docs/format.md, dc_meta).  Each reads main's and src's entries and writes
** main's, or removes the key when nothing is left.
*/
#include "merge_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cv_dtype.h"

/* dc_meta `key` removed from main. */
static int meta_forget(sqlite3 *db, const char *key, cv_err *e) {
  sqlite3_stmt *d = cv_prep(db, e, "DELETE FROM main.dc_meta WHERE key = %Q", key);
  int rc = !d ? -1 : sqlite3_step(d) == SQLITE_DONE ? 0 : cv_fail(e, "dc_meta.%s: %s", key, sqlite3_errmsg(db));
  sqlite3_finalize(d);
  return rc;
}

/* dc_meta `key` from a query of one row (the number of entries, their JSON), finalized here:
** written when there are entries, else the key removed. */
static int meta_from(sqlite3 *db, dsw *w, const char *key, sqlite3_stmt *st, cv_err *e) {
  if (!st) return -1;
  int rc = 0;
  if (sqlite3_step(st) != SQLITE_ROW) rc = cv_fail(e, "dc_meta.%s: %s", key, sqlite3_errmsg(db));
  else if (sqlite3_column_int64(st, 0) > 0) {
    char *j = strdup((const char *)sqlite3_column_text(st, 1));
    rc = !j ? cv_fail(e, "out of memory") : dsw_meta_text(w, key, j, e);
    free(j);
  } else {
    rc = meta_forget(db, key, e);
  }
  sqlite3_finalize(st);
  return rc;
}

/* dc_meta var_categories (the categories of var columns that were categorical, for export):
** united as convert unites them, D's categories first, then S's others in S's order.  A column
** categorical in one dataset and plain text in the other stays text (its values need not be
** among the categories).  Read before merge_genes rewrites main's genes_columns. */
static int merge_var_categories(sqlite3 *db, dsw *w, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e,
      "WITH dk(k, arr) AS (SELECT key, value FROM json_each(coalesce((SELECT value FROM main.dc_meta WHERE key = 'var_categories'), '{}'))),"
      " sk(k, arr) AS (SELECT key, value FROM json_each(coalesce((SELECT value FROM src.dc_meta WHERE key = 'var_categories'), '{}'))),"
      " kept(k) AS (SELECT k FROM (SELECT k FROM dk UNION SELECT k FROM sk) u"
      "   WHERE (k IN (SELECT k FROM dk) OR k NOT IN (SELECT name FROM main.genes_columns))"
      "     AND (k IN (SELECT k FROM sk) OR k NOT IN (SELECT name FROM src.genes_columns)))"
      " SELECT (SELECT count(*) FROM dk) + (SELECT count(*) FROM sk), json_group_object(k, json((SELECT json_group_array(v) FROM ("
      "   SELECT x.value AS v, 0 AS a, x.id AS i FROM dk, json_each(dk.arr) x WHERE dk.k = kept.k"
      "   UNION ALL SELECT x.value, 1, x.id FROM sk, json_each(sk.arr) x WHERE sk.k = kept.k"
      "     AND x.value NOT IN (SELECT y.value FROM dk, json_each(dk.arr) y WHERE dk.k = kept.k)"
      "   ORDER BY a, i)))) FROM kept");
  return meta_from(db, w, "var_categories", st, e);
}

/* dc_meta `key` (obs_names: columns of `table` cells_columns, var_names: genes_columns), the
** names in the input files of columns stored under another name: main's entries, then src's
** for the columns main does not have yet (called before the columns are united). */
static int merge_renamed(sqlite3 *db, dsw *w, const char *key, const char *table, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e,
      "SELECT count(*), json_group_object(k, v) FROM ("
      " SELECT key AS k, value AS v FROM json_each(coalesce((SELECT value FROM main.dc_meta WHERE key = %Q), '{}'))"
      " UNION ALL SELECT key, value FROM json_each(coalesce((SELECT value FROM src.dc_meta WHERE key = %Q), '{}'))"
      "  WHERE key NOT IN (SELECT name FROM main.\"%w\"))", key, key, table);
  return meta_from(db, w, key, st, e);
}

/* dc_meta obs_ordered, the ordered categorical columns: main's that src lacks or has ordered
** with the same categories in the same order, and src's that main does not have yet (called
** before the columns are united; a column whose categories the union extends is not ordered). */
static int merge_ordered(sqlite3 *db, dsw *w, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e,
      "WITH d(k) AS (SELECT value FROM json_each(coalesce((SELECT value FROM main.dc_meta WHERE key = 'obs_ordered'), '[]'))),"
      " s(k) AS (SELECT value FROM json_each(coalesce((SELECT value FROM src.dc_meta WHERE key = 'obs_ordered'), '[]'))),"
      " dc(k, a, b) AS (SELECT k, (SELECT col FROM main.cells_columns WHERE name = k), (SELECT col FROM src.cells_columns WHERE name = k) FROM d)"
      " SELECT count(*), json_group_array(k) FROM ("
      "  SELECT k FROM dc WHERE b IS NULL OR (k IN (SELECT k FROM s)"
      "   AND (SELECT count(*) FROM main.cells_dict WHERE col = a) = (SELECT count(*) FROM src.cells_dict WHERE col = b)"
      "   AND NOT EXISTS (SELECT 1 FROM main.cells_dict x JOIN src.cells_dict y ON x.code = y.code"
      "                   WHERE x.col = a AND y.col = b AND x.value IS NOT y.value))"
      "  UNION ALL SELECT k FROM s WHERE k NOT IN (SELECT name FROM main.cells_columns))");
  return meta_from(db, w, "obs_ordered", st, e);
}

/* The head of a WITH clause for a dc_meta object keyed by column (its key, %Q, given twice):
** its entries (k, v) in main as d, in src as s. */
#define ENTRIES_D_S                                                                                                     \
  "WITH d(k, v) AS (SELECT key, value FROM json_each(coalesce((SELECT value FROM main.dc_meta WHERE key = %Q), '{}'))),"  \
  " s(k, v) AS (SELECT key, value FROM json_each(coalesce((SELECT value FROM src.dc_meta WHERE key = %Q), '{}')))"

/* dc_meta `key` (obs_dtypes: columns of `table` cells_columns, var_dtypes: genes_columns), the
** columns' type in the files: main's entries that src has alike or where src lacks the column,
** and src's for the columns main does not have yet (called before the columns are united; a
** column the two have with different types is exported as int64 / float64). */
static int merge_dtypes(sqlite3 *db, dsw *w, const char *key, const char *table, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e,
      ENTRIES_D_S
      " SELECT count(*), json_group_object(k, v) FROM ("
      "  SELECT k, v FROM d WHERE k NOT IN (SELECT name FROM src.\"%w\")"
      "   OR EXISTS (SELECT 1 FROM s WHERE s.k = d.k AND s.v = d.v)"
      "  UNION ALL SELECT k, v FROM s WHERE k NOT IN (SELECT name FROM main.\"%w\"))", key, key, table, table);
  return meta_from(db, w, key, st, e);
}

/* dc_meta `key` (obs_cat_dtypes: columns of `table` cells_columns, var_cat_dtypes:
** genes_columns), the type of a categorical's categories where they were numbers or booleans:
** where both datasets have one for a column, the type that holds both's (cv_cat_dtype_unite:
** int16 and int32 give int32), else none (strings: int and float categories, uint64 and a
** signed type); main's where src lacks the column, src's where main does (a column one has
** with string categories stays strings).  Called before the columns are united. */
static void sql_cat_unite(sqlite3_context *cx, int argc, sqlite3_value **argv) {
  (void)argc;
  const char *u = cv_cat_dtype_unite((const char *)sqlite3_value_text(argv[0]), (const char *)sqlite3_value_text(argv[1]));
  if (u) sqlite3_result_text(cx, u, -1, SQLITE_TRANSIENT);   /* the table's name, or a or b: copied */
  else sqlite3_result_null(cx);
}

static int merge_cat_dtypes(sqlite3 *db, dsw *w, const char *key, const char *table, cv_err *e) {
  if (sqlite3_create_function(db, "dc_cat_dtype_unite", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_cat_unite, NULL, NULL) != SQLITE_OK)
    return cv_fail(e, "dc_meta.%s: %s", key, sqlite3_errmsg(db));
  sqlite3_stmt *st = cv_prep(db, e,
      ENTRIES_D_S ","
      " u(k, a, b) AS (SELECT k, (SELECT v FROM d WHERE d.k = x.k), (SELECT v FROM s WHERE s.k = x.k) FROM (SELECT k FROM d UNION SELECT k FROM s) x),"
      " t(k, v) AS (SELECT k, CASE WHEN a IS NOT NULL AND b IS NOT NULL THEN dc_cat_dtype_unite(a, b)"
      "   WHEN a IS NOT NULL THEN CASE WHEN k IN (SELECT name FROM src.\"%w\") THEN NULL ELSE a END"
      "   ELSE CASE WHEN k IN (SELECT name FROM main.\"%w\") THEN NULL ELSE b END END FROM u)"
      " SELECT count(*), json_group_object(k, v) FROM t WHERE v IS NOT NULL", key, key, table, table);
  return meta_from(db, w, key, st, e);
}

/* dc_meta x_dtype, X's dtype in the files: the one that holds both datasets' values (as convert
** unites its inputs': int32 and float32 give float64), or none when either does not record it
** (export then picks int32 or int64 from the counts).  Keeping main's had exported an appended
** float32 count of 3e9 as a negative int32. */
static int merge_x_dtype(sqlite3 *db, dsw *w, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e, "SELECT (SELECT value FROM main.dc_meta WHERE key = 'x_dtype'), "
                                    "(SELECT value FROM src.dc_meta WHERE key = 'x_dtype')");
  if (!st) return -1;
  if (sqlite3_step(st) != SQLITE_ROW) {
    cv_fail(e, "dc_meta.x_dtype: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return -1;
  }
  const char *a = (const char *)sqlite3_column_text(st, 0), *b = (const char *)sqlite3_column_text(st, 1);
  const char *u = cv_dtype_unite(a, b);
  char keep[16] = "";
  if (u) snprintf(keep, sizeof keep, "%s", u);   /* u points into the row */
  sqlite3_finalize(st);
  return keep[0] ? dsw_meta_text(w, "x_dtype", keep, e) : meta_forget(db, "x_dtype", e);
}

int cv_merge_meta(sqlite3 *db, dsw *w, cv_err *e) {
  return merge_var_categories(db, w, e) || merge_ordered(db, w, e) ||
         merge_dtypes(db, w, "obs_dtypes", "cells_columns", e) || merge_dtypes(db, w, "var_dtypes", "genes_columns", e) ||
         merge_cat_dtypes(db, w, "obs_cat_dtypes", "cells_columns", e) ||
         merge_cat_dtypes(db, w, "var_cat_dtypes", "genes_columns", e) || merge_x_dtype(db, w, e) ||
         merge_renamed(db, w, "obs_names", "cells_columns", e) || merge_renamed(db, w, "var_names", "genes_columns", e)
             ? -1 : 0;
}
