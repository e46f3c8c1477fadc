/*
** vtab_genes.c — the `genes` virtual table (module deltacells_genes): the
** dataset's genes, stored by column in compressed blocks (format version 2).
**
**   CREATE VIRTUAL TABLE genes USING deltacells_genes;
**
** Schema (columns in this order):
**   gene_id       INTEGER  0-based, dense; also the rowid
**   name          TEXT     stored column 0
**   total_counts  INTEGER  stored column 1
**   n_cells       INTEGER  stored column 2
**   <var>         one column per further genes_columns row, in col order,
**                 under its own name: int and bool INTEGER, real REAL,
**                 text TEXT.  NULL where the stored value is NULL.
**
** Shadow tables (docs/format.md section 1), in the table's own schema (main
** or an ATTACHed dataset): <name>_columns (col, name, kind, null_count,
** bytes) and <name>_blocks (id = col * 2^32 + block, col, block,
** first_gene, n_genes, data = one obs block, format.md section 3).  A
** column's block b holds genes b * genes_block .. (dc_meta.genes_block).
** xCreate and xConnect attach to them and fail naming the table if one is
** missing; xShadowName lists "columns" and "blocks" so
** SQLITE_DBCONFIG_DEFENSIVE makes them read-only to SQL; xDestroy (DROP
** TABLE) drops them.  Read-only (no xUpdate), SQLITE_VTAB_INNOCUOUS.
**
** Reading: a column is decoded whole, the first time a statement asks for it
** (a few MB even for 100,000 genes), and kept with the table object for as
** long as the schema's data version (SQLITE_FCNTL_DATA_VERSION, checked at
** every xFilter) is unchanged; a cursor holds a reference to what it reads,
** so a reload never frees it under the cursor.  A name index (hash of the
** names, duplicates chained in gene_id order) is built on the first name
** lookup.  Everything runs on the statement's thread.
**
** Plans (xBestIndex): the shared plan codec (dc_plan.h), e.g.
**   #0 "gene_id" >= ?1 prefilter, #1 "name" = ?2 prefilter, ORDER BY gene_id DESC
** Terms: gene_id (or rowid) =, <, <=, >, >=; name = (BINARY collation only).  The words
** "ORDER BY gene_id" and "ORDER BY gene_id DESC" mean the ORDER BY is consumed.
** Every constraint is a prefilter (omit = 0): xFilter returns a superset of
** the matching rows under any affinity and SQLite checks each row, so every
** query returns what a native table with the same declared types returns.
** "gene_id" constraints narrow the scan to a range of ids (a TEXT value is
** first given numeric affinity, as the INTEGER column does; one that stays
** text, or a BLOB, narrows nothing).  "name=" (BINARY collation only) looks
** a TEXT value up in the name index; a value that is not TEXT, or TEXT that
** reads as a number (numeric affinity on the other side could make it equal
** to other spellings), narrows nothing.  IN lists are left to SQLite (one xFilter per value).
**
** Bad stored data gives SQLITE_CORRUPT_VTAB naming the column and block;
** a dataset of a format version this build does not read, SQLITE_ERROR
** naming both versions.
*/
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dc_ext.h"
#include "dc_plan.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "dc_reader.h"
#include "dc_seal.h"
#include "name_index.h"

/* ------------------------------------------------------------ types */

typedef struct gcol {
  char *name;
  int kind;                /* DC_OBS_TEXT, INT, BOOL or REAL */
  int loaded;
  int64_t *i64;            /* int, bool */
  uint8_t *valid;          /* int, bool, text: 1 = not NULL */
  double *f64;             /* real: NaN = NULL */
  char *text;              /* text: value i is text[off[i] .. off[i+1]) */
  uint64_t *off;
} gcol;

/* What one data version of the table holds (reference counted). */
typedef struct gdata {
  int ref;
  int64_t n;               /* genes (dc_meta.n_genes) */
  int64_t block;           /* genes per block (dc_meta.genes_block) */
  int sealed;              /* format version >= 3: blocks carry seals (dc_seal.h) */
  uint64_t dataset_id;
  int n_cols;
  gcol *cols;
  dc_nameidx names;        /* name index over column 0 (built on first use) */
} gdata;

typedef struct genes_vtab {
  sqlite3_vtab base;
  sqlite3 *db;
  dc_conn *conn;
  char *schema, *name;     /* the table's schema and name */
  int n_cols;              /* stored columns as declared */
  char **col_name;
  int *col_kind;
  gdata *data;
  unsigned int data_version;
} genes_vtab;

typedef struct genes_cursor {
  sqlite3_vtab_cursor base;
  gdata *d;
  int64_t lo, hi;          /* id range (inclusive) */
  int desc;
  int by_name;             /* walk the name chain instead of the range */
  int64_t *list;           /* by_name: the ids of that name in the range, ascending */
  int64_t n_list, pos;
  int64_t id;              /* current gene */
  int eof;
} genes_cursor;

#define COL_GENE_ID 0
#define COL_NAME 1


static const char *sql_type(int kind) {
  switch (kind) {
    case DC_OBS_INT: case DC_OBS_BOOL: return "INTEGER";
    case DC_OBS_REAL: return "REAL";
    default: return "TEXT";
  }
}

static void gcol_clear(gcol *c) {
  sqlite3_free(c->i64); sqlite3_free(c->valid); sqlite3_free(c->f64);
  sqlite3_free(c->text); sqlite3_free(c->off);
  c->i64 = NULL; c->valid = NULL; c->f64 = NULL; c->text = NULL; c->off = NULL;
  c->loaded = 0;
}

static void gdata_unref(gdata *d) {
  if (!d || --d->ref > 0) return;
  for (int i = 0; i < d->n_cols; i++) gcol_clear(&d->cols[i]);
  sqlite3_free(d->cols);
  dc_nameidx_free(&d->names);
  sqlite3_free(d);
}

/* ------------------------------------------------------------ dc_meta */

static int meta_int(genes_vtab *v, const char *key, int64_t *out, int *found) {
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT value FROM \"%w\".dc_meta WHERE key = ?1", v->schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK)
    return dc_err(&v->base.zErrMsg, rc, NULL, "genes: not a deltacells dataset (schema %s): %s", v->schema, sqlite3_errmsg(v->db));
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  *found = 0;
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
    *out = sqlite3_column_int64(st, 0);
    *found = 1;
    rc = SQLITE_OK;
  } else if (rc == SQLITE_ROW) {
    rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: dc_meta.%s is not an integer", key);
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
  } else {
    rc = dc_err(&v->base.zErrMsg, rc, NULL, "genes: reading dc_meta: %s", sqlite3_errmsg(v->db));
  }
  sqlite3_finalize(st);
  return rc;
}

/* The format version must be one with this table (DC_FORMAT_GENES_MIN ..). */
static int check_version(genes_vtab *v) {
  int64_t ver = 0;
  int found;
  int rc = meta_int(v, "format_version", &ver, &found);
  if (rc != SQLITE_OK) return rc;
  if (!found) return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "genes: not a deltacells dataset (dc_meta has no format_version)");
  if (ver < DC_FORMAT_GENES_MIN || ver > DC_FORMAT_VERSION)
    return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL,
                   "genes: the dataset has format_version %lld; this deltacells_genes table reads versions %d..%d%s",
                   (long long)ver, DC_FORMAT_GENES_MIN, DC_FORMAT_VERSION,
                   ver > DC_FORMAT_VERSION ? " (a newer deltacells wrote it: upgrade deltacells)" : "");
  return SQLITE_OK;
}

/* ------------------------------------------------------------ connect */

static void vtab_free(genes_vtab *v) {
  if (!v) return;
  gdata_unref(v->data);
  for (int i = 0; i < v->n_cols; i++) sqlite3_free(v->col_name[i]);
  sqlite3_free(v->col_name);
  sqlite3_free(v->col_kind);
  sqlite3_free(v->schema);
  sqlite3_free(v->name);
  sqlite3_free(v->base.zErrMsg);
  sqlite3_free(v);
}

static const char *const FIXED[3] = {"name", "total_counts", "n_cells"};

static int genes_init(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **ppVtab,
                      char **pzErr) {
  if (argc > 3) {
    *pzErr = sqlite3_mprintf("deltacells_genes: takes no arguments");
    return SQLITE_ERROR;
  }
  genes_vtab *v = sqlite3_malloc64(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->db = db;
  v->conn = (dc_conn *)aux;
  v->schema = sqlite3_mprintf("%s", argv[1]);
  v->name = sqlite3_mprintf("%s", argv[2]);
  sqlite3_stmt *st = NULL;
  sqlite3_str *decl = NULL;
  char *cols = NULL;
  int rc = SQLITE_OK, cap = 0;
  if (!v->schema || !v->name) { rc = SQLITE_NOMEM; goto fail; }
  if ((rc = check_version(v)) != SQLITE_OK) goto fail_msg;
  char *sql = sqlite3_mprintf("SELECT col, name, kind FROM \"%w\".\"%w_columns\" ORDER BY col", v->schema, v->name);
  if (!sql) { rc = SQLITE_NOMEM; goto fail; }
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    dc_err(&v->base.zErrMsg, rc, NULL, "genes: cannot read %s.%s_columns: %s", v->schema, v->name, sqlite3_errmsg(db));
    goto fail_msg;
  }
  decl = sqlite3_str_new(db);
  sqlite3_str_appendall(decl, "CREATE TABLE x(gene_id INTEGER");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t col = sqlite3_column_int64(st, 0);
    const char *nm = (const char *)sqlite3_column_text(st, 1);
    const char *kd = (const char *)sqlite3_column_text(st, 2);
    int kind = kd ? dc_obs_kind_from_name(kd) : 0;
    if (col != v->n_cols || !nm || !kind || kind == DC_OBS_CATEGORY ||
        (col < 3 && (strcmp(nm, FIXED[col]) != 0 || kind != (col == 0 ? DC_OBS_TEXT : DC_OBS_INT)))) {
      rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL,
                   "genes: %s_columns row %lld ('%s', kind '%s') is not what the format allows (cols 0, 1, 2, ... "
                   "starting with name text, total_counts int, n_cells int; kinds int, bool, real, text)",
                   v->name, (long long)col, nm ? nm : "NULL", kd ? kd : "NULL");
      goto fail_msg;
    }
    if (v->n_cols == cap) {
      cap = cap ? 2 * cap : 8;
      char **nn = sqlite3_realloc64(v->col_name, (uint64_t)cap * sizeof *nn);
      if (nn) v->col_name = nn;
      int *nk = sqlite3_realloc64(v->col_kind, (uint64_t)cap * sizeof *nk);
      if (nk) v->col_kind = nk;
      if (!nn || !nk) { rc = SQLITE_NOMEM; goto fail; }
    }
    v->col_kind[v->n_cols] = kind;
    v->col_name[v->n_cols] = sqlite3_mprintf("%s", nm);
    if (!v->col_name[v->n_cols]) { rc = SQLITE_NOMEM; goto fail; }
    v->n_cols++;
    if (col >= 3 && !sqlite3_stricmp(nm, "gene_id")) {
      rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: var column '%s' clashes with the built-in gene_id", nm);
      goto fail_msg;
    }
    sqlite3_str_appendf(decl, ", \"%w\" %s", nm, sql_type(kind));
  }
  if (rc != SQLITE_DONE) {
    dc_err(&v->base.zErrMsg, rc, NULL, "genes: reading %s_columns: %s", v->name, sqlite3_errmsg(db));
    goto fail_msg;
  }
  if (v->n_cols < 3) {
    rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: %s_columns lacks the columns name, total_counts, n_cells", v->name);
    goto fail_msg;
  }
  sqlite3_finalize(st);
  st = NULL;
  /* a block of a column genes_columns lacks (its row deleted) would be a column lost unseen */
  sql = sqlite3_mprintf("SELECT id >> 32 FROM \"%w\".\"%w_blocks\" WHERE id < 0 OR id >= ?1 LIMIT 1", v->schema, v->name);
  if (!sql) { rc = SQLITE_NOMEM; goto fail; }
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    dc_err(&v->base.zErrMsg, rc, NULL, "genes: cannot read %s.%s_blocks: %s", v->schema, v->name, sqlite3_errmsg(db));
    goto fail_msg;
  }
  sqlite3_bind_int64(st, 1, (int64_t)v->n_cols << 32);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: %s_blocks has blocks of column %lld, which %s_columns lacks",
                 v->name, (long long)sqlite3_column_int64(st, 0), v->name);
    goto fail_msg;
  }
  if (rc != SQLITE_DONE) {
    dc_err(&v->base.zErrMsg, rc, NULL, "genes: reading %s_blocks: %s", v->name, sqlite3_errmsg(db));
    goto fail_msg;
  }
  sqlite3_finalize(st);
  st = NULL;
  sqlite3_str_appendall(decl, ")");
  cols = sqlite3_str_finish(decl);
  decl = NULL;
  if (!cols) { rc = SQLITE_NOMEM; goto fail; }
  rc = sqlite3_declare_vtab(db, cols);
  if (rc != SQLITE_OK) {
    dc_err(&v->base.zErrMsg, rc, NULL, "genes: cannot declare the columns (%s): %s", sqlite3_errmsg(db), cols);
    goto fail_msg;
  }
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  sqlite3_free(cols);
  *ppVtab = &v->base;
  return SQLITE_OK;
fail_msg:
  *pzErr = v->base.zErrMsg;
  v->base.zErrMsg = NULL;
fail:
  sqlite3_finalize(st);
  if (decl) sqlite3_free(sqlite3_str_finish(decl));
  sqlite3_free(cols);
  vtab_free(v);
  return rc == SQLITE_OK ? SQLITE_ERROR : rc;
}

static int genes_disconnect(sqlite3_vtab *p) {
  vtab_free((genes_vtab *)p);
  return SQLITE_OK;
}

static int genes_destroy(sqlite3_vtab *p) {
  genes_vtab *v = (genes_vtab *)p;
  int refused = dc_drop_check(v->conn, v->schema, v->name);
  if (refused) return refused;
  char *sql = sqlite3_mprintf("DROP TABLE IF EXISTS \"%w\".\"%w_blocks\"; DROP TABLE IF EXISTS \"%w\".\"%w_columns\";",
                              v->schema, v->name, v->schema, v->name);
  int rc = sql ? sqlite3_exec(v->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
  sqlite3_free(sql);
  if (rc == SQLITE_OK) vtab_free(v);
  return rc;
}

static int genes_shadow_name(const char *suffix) {
  return !sqlite3_stricmp(suffix, "columns") || !sqlite3_stricmp(suffix, "blocks");
}

/* ------------------------------------------------------------ loading */

/* The current data (reloaded when the schema's data version changed). */
static int data_current(genes_vtab *v) {
  unsigned int dv = 0;
  int have = sqlite3_file_control(v->db, v->schema, SQLITE_FCNTL_DATA_VERSION, &dv) == SQLITE_OK;
  if (v->data && have && dv == v->data_version) return SQLITE_OK;
  gdata_unref(v->data);
  v->data = NULL;
  int rc = check_version(v);
  if (rc != SQLITE_OK) return rc;
  int64_t n = 0, block = 0;
  int f1, f2, sealed = 0;
  uint64_t dataset_id = 0;
  {
    char *msg = NULL;
    rc = dc_dataset_seal(v->db, v->schema, "genes", &sealed, &dataset_id, &msg);
    if (rc != SQLITE_OK) {
      rc = dc_err(&v->base.zErrMsg, rc, NULL, "%s", msg ? msg : "genes: cannot read dc_meta");
      sqlite3_free(msg);
      return rc;
    }
  }
  if ((rc = meta_int(v, "n_genes", &n, &f1)) != SQLITE_OK) return rc;
  if ((rc = meta_int(v, "genes_block", &block, &f2)) != SQLITE_OK) return rc;
  if (!f1 || !f2 || n < 0 || n > INT32_MAX || block < 1 || block > (int64_t)DC_OBS_MAX_N)
    return dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: dc_meta n_genes (%lld) or genes_block (%lld) is missing or impossible",
                   f1 ? (long long)n : -1LL, f2 ? (long long)block : -1LL);
  {
    char *msg = NULL;
    if ((rc = dc_genes_agree(v->db, v->schema, v->name, "genes", n, &msg)) != SQLITE_OK) {
      rc = dc_err(&v->base.zErrMsg, rc, NULL, "%s", msg ? msg : "genes: cannot read its blocks");
      sqlite3_free(msg);
      return rc;
    }
  }
  /* the stored columns must still be the declared ones */
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT col, name, kind FROM \"%w\".\"%w_columns\" ORDER BY col", v->schema, v->name);
  if (!sql) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) return dc_err(&v->base.zErrMsg, rc, NULL, "genes: cannot read %s_columns: %s", v->name, sqlite3_errmsg(v->db));
  int i = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *nm = (const char *)sqlite3_column_text(st, 1), *kd = (const char *)sqlite3_column_text(st, 2);
    if (i >= v->n_cols || sqlite3_column_int64(st, 0) != i || !nm || !kd || strcmp(nm, v->col_name[i]) ||
        dc_obs_kind_from_name(kd) != v->col_kind[i]) {
      i = -1;
      break;
    }
    i++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return dc_err(&v->base.zErrMsg, rc, NULL, "genes: reading %s_columns: %s", v->name, sqlite3_errmsg(v->db));
  if (i != v->n_cols)
    return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "genes: %s_columns changed since the table was opened; reopen the connection", v->name);
  gdata *d = sqlite3_malloc64(sizeof *d);
  if (!d) return SQLITE_NOMEM;
  memset(d, 0, sizeof *d);
  d->ref = 1;
  d->n = n;
  d->block = block;
  d->sealed = sealed;
  d->dataset_id = dataset_id;
  d->cols = sqlite3_malloc64((uint64_t)v->n_cols * sizeof *d->cols);
  if (!d->cols) { sqlite3_free(d); return SQLITE_NOMEM; }
  memset(d->cols, 0, (uint64_t)v->n_cols * sizeof *d->cols);
  d->n_cols = v->n_cols;
  for (int k = 0; k < v->n_cols; k++) {
    d->cols[k].name = v->col_name[k];
    d->cols[k].kind = v->col_kind[k];
  }
  v->data = d;
  v->data_version = dv;   /* without it (have == 0) every xFilter reloads */
  return SQLITE_OK;
}

/* Decodes stored column k of d (all its blocks). */
static int load_column(genes_vtab *v, gdata *d, int k) {
  gcol *c = &d->cols[k];
  if (c->loaded) return SQLITE_OK;
  int64_t n = d->n;
  int rc = SQLITE_OK;
  sqlite3_stmt *st = NULL;
  dc_obs_decoder *dec = NULL;
  uint64_t text_len = 0, text_cap = 0;
  uint64_t nn = (uint64_t)(n ? n : 1);
  if (c->kind == DC_OBS_REAL) {
    c->f64 = sqlite3_malloc64(nn * sizeof *c->f64);
    if (!c->f64) return SQLITE_NOMEM;
  } else {
    c->valid = sqlite3_malloc64(nn);
    if (!c->valid) return SQLITE_NOMEM;
    if (c->kind == DC_OBS_TEXT) {
      c->off = sqlite3_malloc64((nn + 1) * sizeof *c->off);
      if (!c->off) { gcol_clear(c); return SQLITE_NOMEM; }
      c->off[0] = 0;
    } else {
      c->i64 = sqlite3_malloc64(nn * sizeof *c->i64);
      if (!c->i64) { gcol_clear(c); return SQLITE_NOMEM; }
    }
  }
  char *sql = sqlite3_mprintf("SELECT block, first_gene, n_genes, data, col%s FROM \"%w\".\"%w_blocks\""
                              " WHERE id >= ?1 AND id < ?2 ORDER BY id", d->sealed ? ", checksum" : "", v->schema, v->name);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) { rc = dc_err(&v->base.zErrMsg, rc, NULL, "genes: cannot read %s_blocks: %s", v->name, sqlite3_errmsg(v->db)); goto done; }
  sqlite3_bind_int64(st, 1, (int64_t)k << 32);
  sqlite3_bind_int64(st, 2, ((int64_t)k + 1) << 32);
  dec = dc_obs_decoder_new();
  if (!dec) { rc = SQLITE_NOMEM; goto done; }
  int64_t next = 0, b = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t blk = sqlite3_column_int64(st, 0), first = sqlite3_column_int64(st, 1), cnt = sqlite3_column_int64(st, 2);
    int64_t want = n - next < d->block ? n - next : d->block;
    if (blk != b || first != next || cnt != want || sqlite3_column_int64(st, 4) != k || cnt <= 0) {
      rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL,
                   "genes: column '%s' block %lld: first_gene %lld, n_genes %lld; expected block %lld with genes "
                   "%lld .. %lld", c->name, (long long)blk, (long long)first, (long long)cnt, (long long)b,
                   (long long)next, (long long)(next + want - 1));
      goto done;
    }
    const uint8_t *blob = sqlite3_column_blob(st, 3);
    size_t len = (size_t)sqlite3_column_bytes(st, 3);
    if (d->sealed) {
      dc_blockplace pl = {"genes", k, c->name, c->kind, -1, blk, first, cnt, -1};
      int64_t seal = 0;
      if (dc_seal_block(d->dataset_id, &pl, NULL, NULL, NULL, len, blob, &seal)) { rc = SQLITE_NOMEM; goto done; }
      if (sqlite3_column_type(st, 5) != SQLITE_INTEGER || sqlite3_column_int64(st, 5) != seal) {
        rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: column '%s' block %lld: checksum mismatch: its data and its place "
                     "(genes %lld..%lld of column %d) were not written together (moved, swapped, copied or edited)",
                     c->name, (long long)blk, (long long)first, (long long)(first + cnt - 1), k);
        goto done;
      }
    }
    dc_obs_expect ex = {c->kind, (uint32_t)cnt, 0};
    dc_obs_block ob;
    dc_error de;
    memset(&de, 0, sizeof de);
    int dr = dc_obs_decode(dec, blob, len, &ex, &ob, &de);
    if (dr != DC_OK) {
      rc = dc_err(&v->base.zErrMsg, dr == DC_ENOMEM ? SQLITE_NOMEM : dr == DC_EUNSUPPORTED ? SQLITE_ERROR : SQLITE_CORRUPT_VTAB, NULL,
                   "genes: column '%s' block %lld: %s", c->name, (long long)blk, de.msg[0] ? de.msg : dc_strerror(dr));
      goto done;
    }
    switch (c->kind) {
      case DC_OBS_REAL: memcpy(c->f64 + next, ob.f64, (size_t)cnt * sizeof *c->f64); break;
      case DC_OBS_INT: case DC_OBS_BOOL:
        memcpy(c->i64 + next, ob.i64, (size_t)cnt * sizeof *c->i64);
        memcpy(c->valid + next, ob.valid, (size_t)cnt);
        break;
      case DC_OBS_TEXT: {
        uint64_t add = ob.text_off[cnt] - ob.text_off[0];
        if (text_len + add > text_cap) {
          uint64_t cap = text_cap ? text_cap : 4096;
          while (cap < text_len + add) cap *= 2;
          char *t = sqlite3_realloc64(c->text, cap);
          if (!t) { rc = SQLITE_NOMEM; goto done; }
          c->text = t;
          text_cap = cap;
        }
        if (add) memcpy(c->text + text_len, ob.text + ob.text_off[0], (size_t)add);
        for (int64_t i = 0; i < cnt; i++) c->off[next + i + 1] = text_len + (ob.text_off[i + 1] - ob.text_off[0]);
        memcpy(c->valid + next, ob.valid, (size_t)cnt);
        text_len += add;
        break;
      }
    }
    next += cnt;
    b++;
  }
  if (rc != SQLITE_DONE) {
    if (rc == SQLITE_ROW) rc = SQLITE_ERROR;
    if (!v->base.zErrMsg) rc = dc_err(&v->base.zErrMsg, rc, NULL, "genes: reading %s_blocks: %s", v->name, sqlite3_errmsg(v->db));
    goto done;
  }
  if (next != n) {
    rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "genes: column '%s' has blocks for %lld genes, dc_meta.n_genes is %lld",
                 c->name, (long long)next, (long long)n);
    goto done;
  }
  if (c->kind == DC_OBS_TEXT && !c->text) {
    c->text = sqlite3_malloc64(1);
    if (!c->text) { rc = SQLITE_NOMEM; goto done; }
  }
  c->loaded = 1;
  rc = SQLITE_OK;
done:
  sqlite3_finalize(st);
  dc_obs_decoder_free(dec);
  if (rc != SQLITE_OK) gcol_clear(c);
  return rc;
}

/* The name index of d (column 0 must be loaded): name_index.c. */
static int build_index(gdata *d) {
  if (d->names.slot) return SQLITE_OK;
  const gcol *c = &d->cols[0];
  return dc_nameidx_build(&d->names, c->text, c->off, c->valid, d->n) ? SQLITE_NOMEM : SQLITE_OK;
}

/* ------------------------------------------------------------ plans */

enum { T_EQ, T_GT, T_GE, T_LT, T_LE, T_NAME };
static const char *plan_col_name(void *ctx, int col) { (void)ctx; return col == COL_GENE_ID ? "gene_id" : "name"; }
static const dc_plan_word plan_words[] = {{"ORDER BY gene_id", 0}, {"ORDER BY gene_id DESC", 0}};
enum { ITEM_ORDER = 1, ITEM_ORDER_DESC = 2 };
/* only gene_id and name appear in plans */
static const dc_plan_table plan_table = {2, plan_col_name, NULL, plan_words, 2};

static int genes_best_index(sqlite3_vtab *p, sqlite3_index_info *info) {
  (void)p;
  dc_plan_item items[DC_PLAN_MAX_TERMS + 1];
  int n = 0, has_eq = 0, has_name = 0, has_range = 0;
  for (int i = 0; i < info->nConstraint && n < DC_PLAN_MAX_TERMS; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (!c->usable) continue;
    int op = 0, col = COL_GENE_ID;
    if (c->iColumn == COL_GENE_ID || c->iColumn == -1) {
      switch (c->op) {
        case SQLITE_INDEX_CONSTRAINT_EQ: op = DC_OP_EQ; has_eq = 1; break;
        case SQLITE_INDEX_CONSTRAINT_GT: op = DC_OP_GT; has_range = 1; break;
        case SQLITE_INDEX_CONSTRAINT_GE: op = DC_OP_GE; has_range = 1; break;
        case SQLITE_INDEX_CONSTRAINT_LT: op = DC_OP_LT; has_range = 1; break;
        case SQLITE_INDEX_CONSTRAINT_LE: op = DC_OP_LE; has_range = 1; break;
        default: break;
      }
    } else if (c->iColumn == COL_NAME && c->op == SQLITE_INDEX_CONSTRAINT_EQ && !has_name) {
      const char *coll = sqlite3_vtab_collation(info, i);
      if (!coll || !sqlite3_stricmp(coll, "BINARY")) { op = DC_OP_EQ; col = COL_NAME; has_name = 1; }
    }
    if (!op) continue;
    info->aConstraintUsage[i].argvIndex = ++n;
    info->aConstraintUsage[i].omit = 0;     /* a superset: SQLite checks every row */
    items[n - 1] = (dc_plan_item){DC_ITEM_TERM, col, op, 0, n - 1};
  }
  int n_items = n;
  if (info->nOrderBy == 1 && (info->aOrderBy[0].iColumn == COL_GENE_ID || info->aOrderBy[0].iColumn == -1)) {
    items[n_items++] = (dc_plan_item){info->aOrderBy[0].desc ? ITEM_ORDER_DESC : ITEM_ORDER, -1, 0, 1, -1};
    info->orderByConsumed = 1;
  }
  if (dc_plan_set(info, &plan_table, items, n_items, n) != SQLITE_OK) return SQLITE_NOMEM;
  if (has_eq) {
    info->estimatedRows = 1;
    info->estimatedCost = 2;
    info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  } else if (has_name) {
    info->estimatedRows = 1;
    info->estimatedCost = 3;
  } else if (has_range) {
    info->estimatedRows = 5000;
    info->estimatedCost = 5000;
  } else {
    info->estimatedRows = 30000;
    info->estimatedCost = 30000;
  }
  return SQLITE_OK;
}

/* Narrows [*lo, *hi] to a superset of the ids meeting `gene_id OP x`.
** Returns 0 when no id can (a NULL operand). */
static int narrow(int tok, sqlite3_value *x, int64_t *lo, int64_t *hi) {
  sqlite3_value *dup = sqlite3_value_dup(x);
  if (!dup) return 1;                        /* out of memory: narrow nothing */
  int t = sqlite3_value_numeric_type(dup);   /* the INTEGER column's affinity */
  int ok = 1;
  if (t == SQLITE_NULL) ok = 0;
  else if (t == SQLITE_INTEGER) {
    int64_t i = sqlite3_value_int64(dup);
    switch (tok) {
      case T_EQ: if (i > *lo) *lo = i; if (i < *hi) *hi = i; break;
      case T_GT: if (i == INT64_MAX) ok = 0; else if (i + 1 > *lo) *lo = i + 1; break;
      case T_GE: if (i > *lo) *lo = i; break;
      case T_LT: if (i == INT64_MIN) ok = 0; else if (i - 1 < *hi) *hi = i - 1; break;
      case T_LE: if (i < *hi) *hi = i; break;
    }
  } else if (t == SQLITE_FLOAT) {
    double f = sqlite3_value_double(dup);
    /* ids are in [0, 2^31): clamp before converting */
    double fl = floor(f), ce = ceil(f);
    if (fl < -1) fl = -1;
    if (fl > 4294967296.0) fl = 4294967296.0;
    if (ce < -1) ce = -1;
    if (ce > 4294967296.0) ce = 4294967296.0;
    switch (tok) {
      case T_EQ: if ((int64_t)fl > *lo) *lo = (int64_t)fl; if ((int64_t)ce < *hi) *hi = (int64_t)ce; break;
      case T_GT: case T_GE: if ((int64_t)fl > *lo) *lo = (int64_t)fl; break;
      case T_LT: case T_LE: if ((int64_t)ce < *hi) *hi = (int64_t)ce; break;
    }
  }
  /* TEXT that is no number, BLOB: INTEGER compares below them; narrow nothing */
  sqlite3_value_free(dup);
  return ok;
}

/* ------------------------------------------------------------ cursor */

static int genes_open(sqlite3_vtab *p, sqlite3_vtab_cursor **ppCur) {
  (void)p;
  genes_cursor *c = sqlite3_malloc64(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->eof = 1;
  *ppCur = &c->base;
  return SQLITE_OK;
}

static void cursor_reset(genes_cursor *c) {
  gdata_unref(c->d);
  c->d = NULL;
  sqlite3_free(c->list);
  c->list = NULL;
  c->n_list = c->pos = 0;
  c->eof = 1;
}

static int genes_close(sqlite3_vtab_cursor *cur) {
  genes_cursor *c = (genes_cursor *)cur;
  cursor_reset(c);
  sqlite3_free(c);
  return SQLITE_OK;
}

static void position(genes_cursor *c) {
  if (c->by_name) {
    if (c->pos >= c->n_list) { c->eof = 1; return; }
    c->id = c->list[c->desc ? c->n_list - 1 - c->pos : c->pos];
  } else {
    if (c->lo > c->hi) { c->eof = 1; return; }
    c->id = c->desc ? c->hi : c->lo;
  }
}

static int genes_next(sqlite3_vtab_cursor *cur) {
  genes_cursor *c = (genes_cursor *)cur;
  if (c->eof) return SQLITE_OK;
  if (c->by_name) c->pos++;
  else if (c->desc) c->hi--;
  else c->lo++;
  position(c);
  return SQLITE_OK;
}

static int genes_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc, sqlite3_value **argv) {
  genes_cursor *c = (genes_cursor *)cur;
  genes_vtab *v = (genes_vtab *)cur->pVtab;
  cursor_reset(c);
  c->desc = 0;
  c->by_name = 0;
  int toks[DC_PLAN_MAX_ARGS];
  dc_plan_item items[DC_PLAN_MAX_ITEMS];
  int n_items;
  char why[200] = "";
  if (dc_plan_take(&plan_table, idxNum, idxStr, argc, items, &n_items, why, sizeof why))
    goto bad_plan;
  for (int i = 0; i < n_items; i++) {
    const dc_plan_item *it = &items[i];
    if (it->kind == ITEM_ORDER || it->kind == ITEM_ORDER_DESC) { c->desc = it->kind == ITEM_ORDER_DESC; continue; }
    int tok = -1;
    if (it->col == COL_NAME) tok = it->op == DC_OP_EQ ? T_NAME : -1;
    else switch (it->op) {
      case DC_OP_EQ: tok = T_EQ; break;
      case DC_OP_GT: tok = T_GT; break;
      case DC_OP_GE: tok = T_GE; break;
      case DC_OP_LT: tok = T_LT; break;
      case DC_OP_LE: tok = T_LE; break;
    }
    if (tok < 0) { snprintf(why, sizeof why, "item %d is not a term this table takes", i + 1); goto bad_plan; }
    toks[it->arg] = tok;
  }
  int rc = data_current(v);
  if (rc != SQLITE_OK) return rc;
  c->d = v->data;
  c->d->ref++;
  gdata *d = c->d;
  c->lo = 0;
  c->hi = d->n - 1;
  int empty = 0;
  sqlite3_value *name = NULL;
  for (int i = 0; i < argc; i++) {
    if (toks[i] == T_NAME) {
      int t = sqlite3_value_type(argv[i]);
      if (t == SQLITE_NULL) empty = 1;
      else if (t == SQLITE_TEXT) {
        /* text that reads as a number may equal other spellings of it */
        sqlite3_value *dup = sqlite3_value_dup(argv[i]);
        if (!dup) return SQLITE_NOMEM;
        int nt2 = sqlite3_value_numeric_type(dup);
        sqlite3_value_free(dup);
        if (nt2 == SQLITE_TEXT) name = argv[i];
      }
    } else if (!narrow(toks[i], argv[i], &c->lo, &c->hi)) empty = 1;
  }
  if (c->lo < 0) c->lo = 0;
  if (c->hi > d->n - 1) c->hi = d->n - 1;
  if (empty || c->lo > c->hi) { c->eof = 1; return SQLITE_OK; }
  if (name) {
    if ((rc = load_column(v, d, 0)) != SQLITE_OK) return rc;
    if ((rc = build_index(d)) != SQLITE_OK) return rc;
    const char *s = (const char *)sqlite3_value_text(name);
    uint64_t len = (uint64_t)sqlite3_value_bytes(name);
    if (!s) return SQLITE_NOMEM;
    int64_t cnt = 0, cap = 4;
    c->list = sqlite3_malloc64((uint64_t)cap * sizeof *c->list);
    if (!c->list) return SQLITE_NOMEM;
    for (int64_t id = dc_nameidx_first(&d->names, s, len); id >= 0; id = d->names.next[id]) {
      if (id < c->lo || id > c->hi) continue;
      if (cnt == cap) {
        cap *= 2;
        int64_t *nl = sqlite3_realloc64(c->list, (uint64_t)cap * sizeof *nl);
        if (!nl) return SQLITE_NOMEM;
        c->list = nl;
      }
      c->list[cnt++] = id;
    }
    c->n_list = cnt;
    c->by_name = 1;
  }
  c->eof = 0;
  position(c);
  return SQLITE_OK;
bad_plan:
  return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "genes: unknown plan '%s'%s%s", idxStr ? idxStr : "", why[0] ? ": " : "", why);
}

static int genes_eof(sqlite3_vtab_cursor *cur) { return ((genes_cursor *)cur)->eof; }

static int genes_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i) {
  genes_cursor *c = (genes_cursor *)cur;
  genes_vtab *v = (genes_vtab *)cur->pVtab;
  if (i == COL_GENE_ID) { sqlite3_result_int64(ctx, c->id); return SQLITE_OK; }
  int k = i - 1;
  if (k < 0 || k >= c->d->n_cols) return SQLITE_OK;
  gcol *g = &c->d->cols[k];
  if (!g->loaded) {
    int rc = load_column(v, c->d, k);
    if (rc != SQLITE_OK) {
      sqlite3_result_error(ctx, v->base.zErrMsg ? v->base.zErrMsg : "genes: cannot read a column", -1);
      sqlite3_result_error_code(ctx, rc);
      return rc;
    }
  }
  int64_t id = c->id;
  switch (g->kind) {
    case DC_OBS_REAL:
      if (!isnan(g->f64[id])) sqlite3_result_double(ctx, g->f64[id]);
      break;
    case DC_OBS_TEXT:
      if (g->valid[id])
        sqlite3_result_text64(ctx, g->text + g->off[id], g->off[id + 1] - g->off[id], SQLITE_TRANSIENT, SQLITE_UTF8);
      break;
    default:
      if (g->valid[id]) sqlite3_result_int64(ctx, g->i64[id]);
      break;
  }
  return SQLITE_OK;
}

static int genes_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((genes_cursor *)cur)->id;
  return SQLITE_OK;
}

static sqlite3_module genes_module = {
  3,                  /* iVersion: xShadowName */
  genes_init, genes_init, genes_best_index, genes_disconnect, genes_destroy,
  genes_open, genes_close, genes_filter, genes_next, genes_eof, genes_column, genes_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL,   /* xUpdate .. xRename */
  NULL, NULL, NULL,                           /* xSavepoint, xRelease, xRollbackTo */
  genes_shadow_name
};

int dc_register_genes(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_genes", &genes_module, conn, dc_conn_unref);
}
