/*
** verify.c — `verify` (docs/converter.md "verify"): the faults report, the schema, the tiles
** and their seals, the sources, queries through the extension, the summary.  The column
** checks are verify_cols.c's.
*/
#include "inspect.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cv_dtype.h"
#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "dc_seal.h"
#include "tile_check.h"
#include "tile_rows.h"

#include "verify.h"

void cv_vfault(vrep *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (r->n < VERIFY_SHOW) {
    r->msg[r->n] = m;
    if (!r->json) fprintf(stderr, "verify: %s: %s\n", r->path, m ? m : "(out of memory)");
  } else {
    sqlite3_free(m);
  }
  r->n++;
}

int cv_vstep(sqlite3 *db, vrep *rep, sqlite3_stmt *s, const char *what) {
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return 1;
  if (rc != SQLITE_DONE) VFAULT("reading %s: %s", what, sqlite3_errmsg(db));
  return 0;
}

static char *gene_name(sqlite3 *db, int64_t version, int64_t id) {
  if (version < DC_FORMAT_GENES_MIN) {
    sqlite3_stmt *s = NULL;
    char *r = NULL;
    if (sqlite3_prepare_v2(db, "SELECT name FROM genes WHERE gene_id = ?", -1, &s, NULL) == SQLITE_OK) {
      sqlite3_bind_int64(s, 1, id);
      if (sqlite3_step(s) == SQLITE_ROW) r = sqlite3_mprintf("%s", (const char *)sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    return r;
  }
  return sqlite3_mprintf("gene_id %lld", (long long)id);
}

/* What export and to_anndata read from dc_meta about the columns: obs_names / var_names objects
** of text naming obs (genes) columns, obs_ordered an array naming categorical obs columns,
** var_categories an object of arrays of text naming genes columns (no category twice in one: its
** codes could not tell them apart), obs_dtypes (var_dtypes) an
** object naming int (real) obs (genes) columns with an integer (float) type narrower than 64
** bits (var: or bool for an int column), obs_cat_dtypes an object naming categorical obs
** columns whose labels are numbers ('int8' .. 'uint64', 'float32', 'float64') or
** 'True'/'False' ('bool'): cv_cat_dtype_list's names (a dataset of before the exact type was
** recorded has 'int64' or 'float64' for those); var_cat_dtypes the same of the var columns
** var_categories names. */
static void verify_meta_columns(sqlite3 *db, vrep *rep) {
  /* the dtypes a column of each kind keeps (cv_dtype_kept), and a categorical's categories
  ** (cv_cat_dtype_known), as SQL lists */
  char *ints = cv_dtype_kept_list(0, "'", ", "), *reals = cv_dtype_kept_list(1, "'", ", ");
  char *cats = cv_cat_dtype_list("'", ", ");
  char *q = !ints || !reals || !cats ? NULL : sqlite3_mprintf(
      "WITH m(k, v) AS (SELECT key, value FROM dc_meta WHERE key IN ('obs_names', 'var_names', 'obs_ordered', 'var_categories', 'obs_dtypes', 'var_dtypes', 'obs_cat_dtypes', 'var_cat_dtypes'))"
      " SELECT m.k, CASE WHEN NOT json_valid(m.v) THEN 'is not JSON'"
      "  WHEN json_type(m.v) <> CASE m.k WHEN 'obs_ordered' THEN 'array' ELSE 'object' END"
      "   THEN 'is not a JSON ' || CASE m.k WHEN 'obs_ordered' THEN 'array' ELSE 'object' END"
      "  WHEN m.k = 'obs_ordered' THEN (SELECT 'names ' || quote(j.value) || ', not a categorical obs column'"
      "   FROM json_each(m.v) j WHERE j.type <> 'text' OR j.value NOT IN (SELECT name FROM cells_columns WHERE kind = 'category') LIMIT 1)"
      "  WHEN m.k = 'obs_cat_dtypes' THEN (SELECT 'names ' || quote(j.key) || ' with ' || quote(j.value)"
      "   || ', not a categorical obs column with categories of that type' FROM json_each(m.v) j"
      "   WHERE j.key NOT IN (SELECT name FROM cells_columns WHERE kind = 'category') OR j.value NOT IN (%s)"
      "   LIMIT 1)"
      "  WHEN m.k = 'var_cat_dtypes' THEN (SELECT 'names ' || quote(j.key) || ' with ' || quote(j.value)"
      "   || ', not a categorical var column (var_categories) with categories of that type' FROM json_each(m.v) j"
      "   WHERE j.key NOT IN (SELECT c.key FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = 'var_categories'"
      "     AND json_valid(value) AND json_type(value) = 'object'), '{}')) c WHERE c.key IN (SELECT name FROM genes_columns))"
      "    OR j.value NOT IN (%s)"
      "   LIMIT 1)"
      "  WHEN m.k IN ('obs_dtypes', 'var_dtypes') THEN (SELECT 'names ' || quote(j.key) || ' with ' || quote(j.value)"
      "   || ', not ' || CASE m.k WHEN 'obs_dtypes' THEN 'an obs' ELSE 'a var' END || ' column of that kind'"
      "   FROM json_each(m.v) j WHERE j.key NOT IN (SELECT name FROM cells_columns WHERE m.k = 'obs_dtypes' AND kind = CASE"
      "    WHEN j.value IN (%s) THEN 'int'"
      "    WHEN j.value IN (%s) THEN 'real' END"
      "    UNION ALL SELECT name FROM genes_columns WHERE m.k = 'var_dtypes' AND kind = CASE"
      "    WHEN j.value IN ('bool', %s) THEN 'int'"
      "    WHEN j.value IN (%s) THEN 'real' END) LIMIT 1)"
      "  WHEN m.k = 'var_categories' THEN coalesce((SELECT 'names ' || quote(j.key) || ', not a var column' FROM json_each(m.v) j"
      "   WHERE j.key NOT IN (SELECT name FROM genes_columns) OR j.type <> 'array' LIMIT 1),"
      "   (SELECT 'lists ' || quote(a.value) || ' twice among the categories of ' || quote(j.key) FROM json_each(m.v) j,"
      "    json_each(j.value) a GROUP BY j.key, a.value HAVING count(*) > 1 LIMIT 1))"
      "  WHEN m.k = 'obs_names' THEN (SELECT 'names ' || quote(j.key) || ', not an obs column' FROM json_each(m.v) j"
      "   WHERE j.key NOT IN (SELECT name FROM cells_columns) OR j.type <> 'text' LIMIT 1)"
      "  ELSE (SELECT 'names ' || quote(j.key) || ', not a var column' FROM json_each(m.v) j"
      "   WHERE j.key NOT IN (SELECT name FROM genes_columns) OR j.type <> 'text' LIMIT 1) END FROM m", cats, cats, ints, reals, ints, reals);
  sqlite3_free(ints);
  sqlite3_free(reals);
  sqlite3_free(cats);
  sqlite3_stmt *s = NULL;
  int r = q ? sqlite3_prepare_v2(db, q, -1, &s, NULL) : SQLITE_NOMEM;
  const char *why = q ? NULL : "out of memory";
  sqlite3_free(q);
  if (r != SQLITE_OK) { VFAULT("dc_meta: %s", why ? why : sqlite3_errmsg(db)); return; }
  while (cv_vstep(db, rep, s, "dc_meta"))
    if (sqlite3_column_type(s, 1) != SQLITE_NULL)
      VFAULT("dc_meta.%s %s", (const char *)sqlite3_column_text(s, 0), (const char *)sqlite3_column_text(s, 1));
  sqlite3_finalize(s);
}

/* dc_meta.gene_order and the genes table's orig_index column, written together (a dataset of
** before them has neither): one without the other, or an order this version does not know,
** would make export and to_anndata lose the input's gene order.  Returns whether the column
** holds the order (verify_queries then checks that it is a permutation). */
static int verify_gene_order(sqlite3 *db, vrep *rep) {
  char *go = cv_meta_text(db, "gene_order"), why[CV_GENE_ORDER_WHY];
  int col = cv_q_int(db, "SELECT count(*) FROM genes_columns WHERE name = 'orig_index' AND kind = 'int'", 0) > 0;
  int ok = 0;
  if (cv_gene_order_problem(go, col, why, sizeof why)) VFAULT("%s", why);
  else ok = go != NULL;
  free(go);
  return ok;
}

/* Version 2: every input's tiles (dc_meta.sources first_tile, n_tiles) hold
** exactly its cells, so no tile spans two inputs. */
static void verify_sources(sqlite3 *db, vrep *rep, int64_t n_tiles) {
  sqlite3_stmt *s = NULL, *t = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT json_extract(j.value, '$.file'), json_extract(j.value, '$.first_cell'),"
                         " json_extract(j.value, '$.n_cells'), json_extract(j.value, '$.first_tile'),"
                         " json_extract(j.value, '$.n_tiles') FROM dc_meta m, json_each(m.value) j"
                         " WHERE m.key = 'sources' ORDER BY j.key", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "SELECT min(first_cell), max(first_cell + n_cells), count(*) FROM " DC_TILES_DATA
                             " WHERE tile >= ?1 AND tile < ?2", -1, &t, NULL) != SQLITE_OK) {
    VFAULT("dc_meta.sources: %s", sqlite3_errmsg(db));
    sqlite3_finalize(s);
    return;
  }
  int64_t next_tile = 0, n = 0;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *file = (const char *)sqlite3_column_text(s, 0);
    n++;
    for (int k = 1; k <= 4; k++)
      if (sqlite3_column_type(s, k) != SQLITE_INTEGER) {
        VFAULT("dc_meta.sources[%lld] (%s): first_cell, n_cells, first_tile or n_tiles is missing", (long long)n - 1,
               file ? file : "?");
        goto done;
      }
    int64_t fc = sqlite3_column_int64(s, 1), nc = sqlite3_column_int64(s, 2);
    int64_t ft = sqlite3_column_int64(s, 3), nt = sqlite3_column_int64(s, 4);
    if (ft != next_tile || nt < 0 || (nt == 0) != (nc == 0)) {
      VFAULT("dc_meta.sources[%lld] (%s): tiles %lld..+%lld, expected to start at tile %lld", (long long)n - 1,
             file ? file : "?", (long long)ft, (long long)nt, (long long)next_tile);
      goto done;
    }
    next_tile = ft + nt;
    if (nt > 0) {
      sqlite3_bind_int64(t, 1, ft);
      sqlite3_bind_int64(t, 2, ft + nt);
      if (sqlite3_step(t) == SQLITE_ROW &&
          (sqlite3_column_int64(t, 2) != nt || sqlite3_column_int64(t, 0) != fc || sqlite3_column_int64(t, 1) != fc + nc))
        VFAULT("dc_meta.sources[%lld] (%s): its tiles %lld..%lld do not hold exactly its cells %lld..%lld",
               (long long)n - 1, file ? file : "?", (long long)ft, (long long)(ft + nt - 1), (long long)fc,
               (long long)(fc + nc - 1));
      sqlite3_reset(t);
    }
  }
  if (rc != SQLITE_DONE) VFAULT("dc_meta.sources: %s", sqlite3_errmsg(db));
  else if (n == 0) VFAULT("dc_meta.sources lists no input");
  else if (next_tile != n_tiles) VFAULT("dc_meta.sources covers %lld tiles, the dataset has %lld", (long long)next_tile, (long long)n_tiles);
done:
  sqlite3_finalize(s);
  sqlite3_finalize(t);
}
/* The tables every query relies on, by format version. */
static void verify_schema(sqlite3 *db, vrep *rep, int64_t version, int *have_tiles) {
  static const char *const plain[] = {"dc_meta", DC_TILES_DATA, "cells_columns", "cells_dict", "cells_blocks", NULL};
  static const char *const v2[] = {"genes_columns", "genes_blocks", NULL};
  static const char *const virt[] = {"cells", "tiles", "expression", "expression_long", "dc_batch", NULL};
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "SELECT type, sql FROM sqlite_schema WHERE name = ?1", -1, &s, NULL) != SQLITE_OK) {
    VFAULT("sqlite_schema: %s", sqlite3_errmsg(db));
    return;
  }
  for (int pass = 0; pass < 4; pass++) {
    const char *const *list = pass == 0 ? plain : pass == 1 ? (version >= DC_FORMAT_GENES_MIN ? v2 : NULL) : pass == 2 ? virt : NULL;
    if (pass == 3) {
      static const char *const genes[] = {"genes", NULL};
      list = genes;
    }
    for (int i = 0; list && list[i]; i++) {
      sqlite3_bind_text(s, 1, list[i], -1, SQLITE_STATIC);
      int found = sqlite3_step(s) == SQLITE_ROW;
      const char *sql = found ? (const char *)sqlite3_column_text(s, 1) : NULL;
      int is_virtual = sql && strstr(sql, "VIRTUAL") != NULL;
      int want_virtual = pass == 2 || (pass == 3 && version >= DC_FORMAT_GENES_MIN);
      if (!found) VFAULT("table %s is missing (dropped?): the dataset's queries need it", list[i]);
      else if (is_virtual != want_virtual)
        VFAULT("table %s is %s, expected %s", list[i], is_virtual ? "a virtual table" : "a plain table",
               want_virtual ? "a virtual table" : "a plain table");
      if (!found && !strcmp(list[i], DC_TILES_DATA)) *have_tiles = 0;
      sqlite3_reset(s);
    }
  }
  sqlite3_finalize(s);
}

/* The covering index of the tile index (DC_TILES_INDEX, dc_format.h), where it exists: the reader
** loads the rows and the checksums from it, so every row must equal the table's. */
static void verify_tile_index(sqlite3 *db, vrep *rep, int sealed) {
  if (cv_q_int(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = '" DC_TILES_INDEX "'", 0) <= 0)
    return;
  const char *cols = sealed ? "tile, first_cell, n_cells, nnz, chunks, checksum" : "tile, first_cell, n_cells, nnz, chunks";
  /* the rows of either that the other lacks (a damaged row is one of each) */
  char *q = sqlite3_mprintf("SELECT max((SELECT count(*) FROM (SELECT %s FROM " DC_TILES_DATA " INDEXED BY \"" DC_TILES_INDEX "\" "
                            "EXCEPT SELECT %s FROM " DC_TILES_DATA " NOT INDEXED)), (SELECT count(*) FROM (SELECT %s FROM "
                            DC_TILES_DATA " NOT INDEXED EXCEPT SELECT %s FROM " DC_TILES_DATA " INDEXED BY \"" DC_TILES_INDEX
                            "\")))", cols, cols, cols, cols);
  sqlite3_stmt *st = NULL;
  if (!q || sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK) {
    VFAULT("index " DC_TILES_INDEX ": cannot be read (%s): the tile index's load needs it; REINDEX or drop it",
           q ? sqlite3_errmsg(db) : "out of memory");
  } else if (sqlite3_step(st) != SQLITE_ROW) {
    VFAULT("index " DC_TILES_INDEX ": %s", sqlite3_errmsg(db));
  } else if (sqlite3_column_int64(st, 0) != 0) {
    VFAULT("index " DC_TILES_INDEX " disagrees with " DC_TILES_DATA " in %lld row%s (the tile index and the checksums "
           "are read from it): REINDEX " DC_TILES_INDEX, (long long)sqlite3_column_int64(st, 0),
           sqlite3_column_int64(st, 0) == 1 ? "" : "s");
  }
  sqlite3_finalize(st);
  sqlite3_free(q);
}

/* The extension, compiled into the converter with -DSQLITE_CORE. */
/* SQLite's own check of the file: every b-tree page, the free list, each index against its table.
** Damage in a page that no check here reads (an index that only a lookup by name uses, a free
** page) fails the next write or lookup there, though every query verify runs reads clean. */
static void verify_btrees(sqlite3 *db, vrep *rep) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "PRAGMA main.integrity_check(10)", -1, &s, NULL) != SQLITE_OK) {
    VFAULT("SQLite's integrity_check: %s", sqlite3_errmsg(db));
    return;
  }
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *m = (const char *)sqlite3_column_text(s, 0);
    if (!m || !strcmp(m, "ok")) continue;
    char line[400];
    snprintf(line, sizeof line, "%s", m);
    for (char *c = line; *c; c++) if (*c == '\n') *c = ' ';
    VFAULT("SQLite's integrity_check: %s", line);
  }
  if (rc != SQLITE_DONE) VFAULT("SQLite's integrity_check: %s", sqlite3_errmsg(db));
  sqlite3_finalize(s);
}

int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

/* Runs the queries a user runs, through the extension's own tables. */
static void verify_queries(sqlite3 *db, vrep *rep, int64_t n_tiles, int gene_order) {
  char *msg = NULL;
  if (sqlite3_deltacells_init(db, &msg, NULL) != SQLITE_OK) {
    VFAULT("loading the extension: %s", msg ? msg : "failed");
    sqlite3_free(msg);
    return;
  }
  sqlite3_free(msg);
  /* dc_batch over the first and the last cell of every tile */
  sqlite3_str *ids = sqlite3_str_new(db);
  int64_t n_ids = 0;
  sqlite3_stmt *t = NULL;
  sqlite3_str_appendchar(ids, 1, '[');
  if (sqlite3_prepare_v2(db, "SELECT first_cell, n_cells FROM " DC_TILES_DATA " WHERE n_cells > 0 ORDER BY tile", -1, &t, NULL) == SQLITE_OK) {
    while (cv_vstep(db, rep, t, DC_TILES_DATA)) {
      int64_t f = sqlite3_column_int64(t, 0), n = sqlite3_column_int64(t, 1);
      sqlite3_str_appendf(ids, "%s%lld", n_ids ? "," : "", (long long)f);
      n_ids++;
      if (n > 1) { sqlite3_str_appendf(ids, ",%lld", (long long)(f + n - 1)); n_ids++; }
    }
  }
  sqlite3_finalize(t);
  sqlite3_str_appendchar(ids, 1, ']');
  char *json = sqlite3_str_finish(ids);
  static const char *const queries[] = {"SELECT * FROM cells", "SELECT * FROM genes", "SELECT * FROM tiles",
                                        "SELECT n_cells FROM dc_batch(?1)", NULL};
  for (int i = 0; queries[i]; i++) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, queries[i], -1, &s, NULL);
    int64_t rows = 0, batch = -1;
    if (rc == SQLITE_OK) {
      if (i == 3) sqlite3_bind_text(s, 1, json ? json : "[]", -1, SQLITE_STATIC);
      while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        rows++;
        if (i == 3) batch = sqlite3_column_int64(s, 0);
      }
      if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) VFAULT("the query `%s` fails: %s", queries[i], sqlite3_errmsg(db));
    else if (i == 3 && batch != n_ids)
      VFAULT("the query `%s` over %lld cells returned %lld", queries[i], (long long)n_ids, (long long)batch);
    else if (i == 2 && rows != n_tiles)
      VFAULT("the query `%s` returned %lld rows, dc_meta.n_tiles is %lld", queries[i], (long long)rows, (long long)n_tiles);
    sqlite3_finalize(s);
  }
  sqlite3_free(json);
  if (gene_order) {   /* orig_index: a permutation of 0 .. n_genes - 1 */
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*), count(orig_index), count(DISTINCT orig_index), min(orig_index), "
                           "max(orig_index) FROM genes", -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
      int64_t n = sqlite3_column_int64(s, 0);
      if (n > 0 && (sqlite3_column_int64(s, 1) != n || sqlite3_column_int64(s, 2) != n || sqlite3_column_int64(s, 3) != 0 ||
                    sqlite3_column_int64(s, 4) != n - 1))
        VFAULT("genes.orig_index is not a permutation of 0..%lld (the input's gene order)", (long long)n - 1);
    } else {
      VFAULT("the query of genes.orig_index fails: %s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(s);
  }
}

/* dc_meta.x_dtype, X's dtype in export and to_anndata: absent (a dataset of before it), or a
** name of the dtype table (cv_dtype.c), which then must hold every count (xcheck_count). */
typedef struct xcheck {
  const cv_dtype *d;     /* the recorded dtype, NULL if absent or unknown */
  int64_t n_bad;         /* counts it does not hold */
  uint32_t big;          /* the largest of them, */
  int64_t tile, cell;    /* in this tile and dataset cell */
  int32_t gene;          /* of this gene_id (the first such entry) */
} xcheck;

static void xcheck_open(sqlite3 *db, vrep *rep, xcheck *x) {
  memset(x, 0, sizeof *x);
  char *name = cv_meta_text(db, "x_dtype");
  if (name && !(x->d = cv_dtype_find(name))) {
    char *all = cv_dtype_list("", ", ");
    VFAULT("dc_meta.x_dtype is '%s', which is not a dtype this version knows (%s): export and to_anndata would "
           "take X for int32 or int64", name, all ? all : "?");
    sqlite3_free(all);
  }
  free(name);
}

/* A count v of gene g in dataset cell `cell` of tile t, against the recorded dtype. */
static inline void xcheck_count(xcheck *x, uint32_t v, int64_t t, int64_t cell, int32_t g) {
  if (!x->d || cv_dtype_holds(x->d, v)) return;
  if (!x->n_bad++ || v > x->big) { x->big = v; x->tile = t; x->cell = cell; x->gene = g; }
}

/* One fault for every count the recorded dtype does not hold: the largest. */
static void xcheck_close(vrep *rep, const xcheck *x) {
  if (!x->n_bad) return;
  char why[160] = "";
  if (x->d->is_float)
    snprintf(why, sizeof why, " exactly (it holds every count up to %llu, above that only some, none above %g)",
             1ULL << (x->d->mant + 1), x->d->max);
  VFAULT("dc_meta.x_dtype is '%s', but a count of %u (tile %lld, dataset cell %lld, gene_id %d) does not fit it%s: "
         "the largest of %lld count%s it does not hold, which export and to_anndata refuse", x->d->name, x->big,
         (long long)x->tile, (long long)x->cell, x->gene, why, (long long)x->n_bad, x->n_bad == 1 ? "" : "s");
}

int cv_verify(const char *path, int quiet, int json, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  if (cv_open_ro(path, &db, &version, e)) return -1;
  vrep rr, *rep = &rr;
  memset(rep, 0, sizeof *rep);
  rep->path = path;
  rep->json = json;
  int have_tiles = 1;
  verify_btrees(db, rep);
  verify_schema(db, rep, version, &have_tiles);
  if (have_tiles) verify_tile_index(db, rep, version >= DC_FORMAT_SEALED);
  /* the seals' key */
  if (version >= DC_FORMAT_SEALED) {
    char *id = cv_meta_text(db, "dataset_id");
    if (!id || dc_seal_parse_id(id, strlen(id), &rep->dataset_id) != 0)
      VFAULT("dc_meta.dataset_id is missing or not 16 hex digits (format version %lld): the checksums cannot be checked",
             (long long)version);
    else rep->sealed = 1;
    free(id);
  } else {
    char *id = cv_meta_text(db, "dataset_id");
    if (id)   /* only version 3 and later draw one: reading unsealed would pass a swapped tile */
      VFAULT("dc_meta.format_version is %lld but the dataset has a dataset_id, which only versions %d and later have: "
             "the version was changed", (long long)version, DC_FORMAT_SEALED);
    free(id);
  }
  /* dc_meta's sizes */
  static const char *const keys[4] = {"n_cells", "n_genes", "nnz", "n_tiles"};
  int64_t mv[4];
  for (int k = 0; k < 4; k++) {
    char q[96];
    snprintf(q, sizeof q, "SELECT CASE typeof(value) WHEN 'integer' THEN value END FROM dc_meta WHERE key = '%s'", keys[k]);
    mv[k] = cv_q_int(db, q, -1);
    if (mv[k] < 0 || (k == 1 && mv[k] > INT32_MAX)) VFAULT("dc_meta.%s is missing, not an integer or impossible", keys[k]);
  }
  if (mv[0] >= 0 && mv[1] >= 0 && mv[1] <= INT32_MAX && mv[3] >= 0 && !dc_meta_sizes_ok(mv[0], mv[1], mv[3]))
    VFAULT("dc_meta has impossible sizes (n_cells %lld, n_genes %lld, n_tiles %lld)", (long long)mv[0], (long long)mv[1],
           (long long)mv[3]);   /* the extension's rule (tile_check.c) */
  /* the codec settings append and merge encode new tiles with (optional: older datasets lack them) */
  static const struct { const char *k; int64_t lo, hi; } set[3] = {
      {"tile_cells", 1, CV_MAX_TILE_CELLS}, {"chunks", 1, DC_MAX_CHUNKS}, {"chunk_cells", 0, CV_MAX_TILE_CELLS}};
  for (int k = 0; k < 3; k++) {
    char q[128];
    snprintf(q, sizeof q, "SELECT CASE typeof(value) WHEN 'integer' THEN value ELSE -1 END FROM dc_meta WHERE key = '%s'", set[k].k);
    int64_t v = cv_q_int(db, q, set[k].lo);
    if (v < set[k].lo || v > set[k].hi)
      VFAULT("dc_meta.%s is not an integer in %lld..%lld (convert's range)", set[k].k, (long long)set[k].lo, (long long)set[k].hi);
  }
  /* an impossible n_genes was said above: the tiles are then checked against their own gene
  ** counts, and nothing is allocated from it (2^40 genes had made verify run out of memory) */
  if (mv[1] > INT32_MAX) mv[1] = -1;
  int64_t n_cells = mv[0], n_genes = mv[1], nnz_meta = mv[2], n_tiles_meta = mv[3];
  xcheck xc;
  xcheck_open(db, rep, &xc);
  dc_decoder *dec = dc_decoder_new();
  /* the chunks of each tile are decoded on every core (the blob is plain bytes by then) */
  dc_pool *pool = dc_pool_new(0);
  dc_job *jobs = malloc(DC_MAX_CHUNKS * sizeof *jobs);
  dc_obs_decoder *odec = dc_obs_decoder_new();
  uint64_t *tot = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *tot);
  uint64_t *ncl = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *ncl);
  dc_tile_hdr *h = malloc(sizeof *h);
  int64_t *ip = NULL;
  int32_t *ix = NULL, *vx = NULL;
  size_t cap_c = 0, cap_n = 0;
  dc_tilerows rows;
  memset(&rows, 0, sizeof rows);
  int64_t expect_first = 0, nnz_sum = 0, n_tiles = 0, n_blocks = 0, dup_names = 0;
  int64_t faults_before_tiles = rep->n, tile_genes = -1, max_tile_genes = -1;
  int genes_bad = 0;
  if (!dec || !odec || !tot || !ncl || !h || !jobs) { cv_fail(e, "out of memory"); goto done; }
  /* the rows as the extension loads them, with its row rule (ext/tile_rows.c, tile_check.c;
  ** reader.c reads them the same way), plus each blob and checksum */
  if (have_tiles && dc_tilerows_open(db, "main", DC_ROWS_DATA | (rep->sealed ? DC_ROWS_SEAL : 0), &rows) != SQLITE_OK) {
    VFAULT(DC_TILES_DATA ": %s", sqlite3_errmsg(db));
    have_tiles = 0;
  }
  int rc = SQLITE_DONE;
  dc_tilerow row;
  while (have_tiles && (rc = dc_tilerows_next(&rows, &row)) == SQLITE_ROW) {
    int64_t t = row.tile, fc = row.first_cell, nc = row.n_cells, nz = row.nnz, ch = row.chunks;
    const uint8_t *blob = row.data;
    size_t len = row.len;
    n_tiles++;
    expect_first = row.expect_first;
    /* the extension's rules broken: here only the words that name which part of the row
    ** breaks them */
    if (!row.ok) {
      if (!row.typed) VFAULT("tile %lld: tile, first_cell, n_cells, nnz or chunks is not stored as an integer", (long long)t);
      if (t != row.index) VFAULT("tile %lld: tiles are not numbered 0, 1, 2, ... (expected %lld)", (long long)t, (long long)row.index);
      if (fc != expect_first)
        VFAULT("tile %lld: first_cell %lld, expected %lld (tiles must cover every cell once, in order)", (long long)t,
               (long long)fc, (long long)expect_first);
      if (!row.sizes_ok) {
        VFAULT("tile %lld: impossible n_cells %lld, nnz %lld or chunks %lld", (long long)t, (long long)nc, (long long)nz, (long long)ch);
        expect_first = rows.next_cell;
        continue;
      }
    }
    expect_first = rows.next_cell;
    nnz_sum += nz;
    dc_error de;
    memset(&de, 0, sizeof de);
    if (dc_tile_parse(blob, len, h, &de) != DC_OK) { VFAULT("tile %lld: %s", (long long)t, de.msg); continue; }
    if (rep->sealed) {
      int64_t seal = 0;
      if (dc_seal_tile(rep->dataset_id, t, fc, nc, nz, ch, len, blob, (size_t)h->hdr_len, &seal) ||
          !row.has_seal || row.seal != seal) {
        VFAULT("tile %lld: checksum mismatch: its blob and " DC_TILES_DATA " row (cells %lld..%lld, %lld nonzeros) were not "
               "written together for tile %lld of this dataset (moved, swapped, copied or edited)", (long long)t,
               (long long)fc, (long long)(fc + nc - 1), (long long)nz, (long long)t);
        continue;
      }
    }
    /* the gene count is checked below (said once for the dataset, not per tile) */
    if (!dc_tilehead_agrees(h, (uint32_t)nc, (uint64_t)nz, (uint32_t)ch, INT64_MAX)) {
      VFAULT("tile %lld: header (%u cells, %llu nonzeros, %u chunks, %u genes) disagrees with " DC_TILES_DATA " "
             "(%lld, %lld, %lld)", (long long)t, h->n_cells, (unsigned long long)h->nnz,
             h->n_chunks, h->n_genes, (long long)nc, (long long)nz, (long long)ch);
      continue;
    }
    {
      uint64_t prefix = 0;
      int64_t bad_chunk = dc_tilehead_chunks(h, len, &prefix);   /* as the extension reads it */
      if (bad_chunk >= 0) { VFAULT("tile %lld chunk %lld: corrupt chunk table", (long long)t, (long long)bad_chunk); continue; }
      if (bad_chunk == -2) { VFAULT("tile %lld: corrupt chunk table (cells or nonzeros do not add up)", (long long)t); continue; }
    }
    /* a tile holds genes 0 .. its n_genes-1: all of them, or, written before an append
    ** added genes, fewer (the extension's rule: at most dc_meta.n_genes) */
    if (n_genes >= 0 && (int64_t)h->n_genes > n_genes) {
      if (tile_genes < 0)
        VFAULT("dc_meta.n_genes says %lld, tile %lld is of %u genes", (long long)n_genes, (long long)t, h->n_genes);
      tile_genes = h->n_genes;
      genes_bad = 1;
    }
    if (genes_bad) continue;
    if ((int64_t)h->n_genes > max_tile_genes && h->n_cells > 0) max_tile_genes = h->n_genes;
    if (cv_grow((void **)&ip, &cap_c, (size_t)nc + 1, sizeof *ip, e)) goto done;
    size_t c2 = cap_n;
    if (cv_grow((void **)&ix, &c2, (size_t)nz + 1, sizeof *ix, e)) goto done;
    c2 = cap_n;
    if (cv_grow((void **)&vx, &c2, (size_t)nz + 1, sizeof *vx, e)) goto done;
    cap_n = c2;
    dc_out out = {ip, ix, vx, 0};
    int dec_rc = DC_OK;
    if (h->n_chunks == 0 || !pool) {
      dec_rc = dc_tile_decode(dec, blob, len, &out, &de);
    } else {
      for (uint32_t c = 0; c < h->n_chunks; c++) {
        memset(&jobs[c], 0, sizeof jobs[c]);
        jobs[c].buf = blob; jobs[c].len = len; jobs[c].hdr = h; jobs[c].chunk = c; jobs[c].out = out; jobs[c].rc = -1;
      }
      if ((dec_rc = dc_pool_decode(pool, jobs, h->n_chunks)) != DC_OK)
        for (uint32_t c = 0; c < h->n_chunks; c++)
          if (jobs[c].rc != DC_OK) { de = jobs[c].err; break; }
    }
    if (dec_rc != DC_OK) { VFAULT("tile %lld: %s", (long long)t, de.msg); continue; }
    int bad = 0;
    if (ip[0] != 0 || !dc_indptr_rebase(ip, (uint32_t)nc, (uint64_t)nz)) bad = 1;   /* tile_check.c's rule */
    for (int64_t i = 0; i < nc && !bad; i++) {
      for (int64_t k = ip[i]; k < ip[i + 1]; k++) {
        if (ix[k] < 0 || ix[k] >= (n_genes >= 0 ? n_genes : (int64_t)h->n_genes) || (k > ip[i] && ix[k] <= ix[k - 1]) ||
            vx[k] == 0) {
          VFAULT("tile %lld: cell %lld (dataset cell %lld): bad gene index %d or count %u", (long long)t, (long long)i,
                 (long long)(fc + i), ix[k], (uint32_t)vx[k]);
          bad = 2;
          break;
        }
        xcheck_count(&xc, (uint32_t)vx[k], t, fc + i, ix[k]);
        if (n_genes < 0) continue;   /* no dataset gene count to total by */
        tot[ix[k]] += (uint32_t)vx[k];
        ncl[ix[k]]++;
      }
    }
    if (bad == 1) VFAULT("tile %lld: decoded cell offsets are inconsistent", (long long)t);
  }
  if (have_tiles && rc != SQLITE_DONE) VFAULT("reading " DC_TILES_DATA ": %s", sqlite3_errmsg(db));
  if (have_tiles && n_genes >= 0 && !genes_bad && max_tile_genes >= 0 && max_tile_genes != n_genes) {
    VFAULT("dc_meta.n_genes says %lld, the tiles are of %lld genes (at most)", (long long)n_genes, (long long)max_tile_genes);
    genes_bad = 1;
  }
  int tiles_decoded = rep->n == faults_before_tiles;
  xcheck_close(rep, &xc);
  if (genes_bad) n_genes = -1;   /* said once: nothing to compare the genes with */
  dc_tilerows_close(&rows);
  if (have_tiles) {
    if (n_cells >= 0 && expect_first != n_cells)
      VFAULT("tiles hold %lld cells, dc_meta.n_cells says %lld", (long long)expect_first, (long long)n_cells);
    if (nnz_meta >= 0 && nnz_sum != nnz_meta)
      VFAULT("tiles hold %lld nonzeros, dc_meta.nnz says %lld", (long long)nnz_sum, (long long)nnz_meta);
    if (n_tiles_meta >= 0 && n_tiles != n_tiles_meta)
      VFAULT(DC_TILES_DATA " holds %lld tiles, dc_meta.n_tiles says %lld", (long long)n_tiles, (long long)n_tiles_meta);
  }
  /* genes: totals must match what the tiles hold, and be in decreasing order */
  if (n_genes >= 0) {
    int64_t *gtc = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *gtc);
    int64_t *gcc = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *gcc);
    if (!gtc || !gcc) { free(gtc); free(gcc); cv_fail(e, "out of memory"); goto done; }
    int64_t ng = version >= DC_FORMAT_GENES_MIN ? cv_verify_genes_v2(db, rep, n_genes, odec, gtc, gcc, &dup_names)
                                                : cv_verify_genes_v1(db, rep, n_genes, gtc, gcc);
    if (ng >= 0 && have_tiles && tiles_decoded) {   /* (a tile not decoded leaves nothing to compare) */
      int64_t off = 0, first_off = -1, unordered = 0, first_un = -1;
      for (int64_t id = 0; id < ng && id < n_genes; id++) {
        if ((uint64_t)gtc[id] != tot[id] || (uint64_t)gcc[id] != ncl[id]) { if (!off++) first_off = id; }
        if (id > 0 && gtc[id] > gtc[id - 1]) { if (!unordered++) first_un = id; }
      }
      if (off) {
        char *nm = gene_name(db, version, first_off);
        VFAULT("genes: %lld genes' total_counts / n_cells disagree with the tiles; the first, gene %lld '%s', says %lld / "
               "%lld, the tiles hold %llu / %llu", (long long)off, (long long)first_off, nm ? nm : "?",
               (long long)gtc[first_off], (long long)gcc[first_off], (unsigned long long)tot[first_off],
               (unsigned long long)ncl[first_off]);
        sqlite3_free(nm);
      }
      char *order = cv_meta_text(db, "gene_numbering");   /* 'stable' after append/merge: ids kept, not re-sorted */
      int stable = order && !strcmp(order, "stable");
      free(order);
      if (unordered && !stable)
        VFAULT("genes: %lld genes have more counts than the gene before them (the first: gene %lld); genes are "
               "numbered by decreasing total counts", (long long)unordered, (long long)first_un);
    }
    if (ng >= 0 && ng != n_genes) VFAULT("genes: %lld rows, dc_meta.n_genes says %lld", (long long)ng, (long long)n_genes);
    free(gtc);
    free(gcc);
  }
  if (version >= DC_FORMAT_GENES_MIN && have_tiles) verify_sources(db, rep, n_tiles);
  int gene_order = 0;
  if (version >= DC_FORMAT_GENES_MIN) {
    verify_meta_columns(db, rep);
    gene_order = verify_gene_order(db, rep);
  }
  n_blocks = cv_verify_obs(db, rep, n_cells, odec);
  /* what the checks above cannot see, the extension's own tables will */
  if (rep->n == 0) verify_queries(db, rep, n_tiles, gene_order);

  if (json) {
    printf("{\"path\":");
    cv_json_print(stdout, path);
    printf(",\"ok\":%s,\"faults\":%lld,\"messages\":[", rep->n ? "false" : "true", (long long)rep->n);
    for (int64_t i = 0; i < rep->n && i < VERIFY_SHOW; i++) {
      if (i) putchar(',');
      cv_json_print(stdout, rep->msg[i] ? rep->msg[i] : "(out of memory)");
    }
    printf("],\"not_shown\":%lld,\"format_version\":%lld,\"sealed\":%s,\"tiles\":%lld,\"cells\":%lld,\"nnz\":%lld,"
           "\"genes\":%lld,\"obs_blocks\":%lld,\"duplicate_gene_names\":%lld}\n",
           (long long)(rep->n > VERIFY_SHOW ? rep->n - VERIFY_SHOW : 0), (long long)version, rep->sealed ? "true" : "false",
           (long long)n_tiles, (long long)n_cells, (long long)nnz_sum, (long long)n_genes, (long long)n_blocks,
           (long long)dup_names);
  } else if (rep->n > VERIFY_SHOW) {
    fprintf(stderr, "verify: %s: ... and %lld more faults (only the first %d are shown)\n", path,
            (long long)(rep->n - VERIFY_SHOW), VERIFY_SHOW);
  }
  if (rep->n) {
    cv_fail(e, "%s: %lld fault%s found", path, (long long)rep->n, rep->n == 1 ? "" : "s");
  } else if (!quiet && !json) {
    printf("%s: ok: %lld tiles (%lld cells, %lld nonzeros) decoded with checksums%s, %lld genes, %lld obs blocks; "
           "every table the queries read checked\n", path, (long long)n_tiles, (long long)n_cells, (long long)nnz_sum,
           rep->sealed ? " and seals" : "", (long long)n_genes, (long long)n_blocks);
    if (dup_names)
      printf("%s: note: %lld gene names occur more than once (kept as distinct genes; a gene panel cannot name them)\n",
             path, (long long)dup_names);
  }
done:
  dc_tilerows_close(&rows);
  for (int i = 0; i < VERIFY_SHOW; i++) sqlite3_free(rep->msg[i]);
  free(ip); free(ix); free(vx); free(tot); free(ncl); free(h);
  dc_decoder_free(dec);
  dc_pool_free(pool);
  free(jobs);
  dc_obs_decoder_free(odec);
  sqlite3_close(db);
  return rep->n || e->msg[0] ? -1 : 0;
}
#undef VFAULT
