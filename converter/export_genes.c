/*
** export_genes.c — the genes of a dataset as `export` and `genes` read them back (see
** export_int.h): the dataset opened read-only with the extension, its dc_meta, its genes table
** in memory and in the input's original order; the `genes` command; and what convert records
** for them (cv_meta_export).
*/
#include "export.h"

#include <ctype.h>
#include <errno.h>
#include <hdf5.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cv_dtype.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_seal.h"

#include "export_int.h"

/* The extension, compiled into the converter with -DSQLITE_CORE. */
int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

/* ------------------------------------------------------------ at conversion */
int cv_meta_export(dsw *w, h5file *files, int nf, cv_err *e) {
  const char *dt = NULL;
  for (int f = 0; f < nf; f++) {
    hid_t t = files[f].data >= 0 ? H5Dget_type(files[f].data) : -1;
    const cv_dtype *c = cv_dtype_of(t);
    const char *d = c ? c->name : NULL;
    if (t >= 0) H5Tclose(t);
    dt = f == 0 ? d : cv_dtype_unite(dt, d);
    if (!dt) break;
  }
  if (dsw_meta_text(w, "gene_order", "union", e)) return -1;
  return dt ? dsw_meta_text(w, "x_dtype", dt, e) : 0;
}

/* ------------------------------------------------------------ reading the dataset */
int ex_open(const char *path, sqlite3 **db, int64_t *version, cv_err *e) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return cv_fail(e, "%s: cannot open: %s", path, strerror(errno));
  unsigned char hdr[16];
  size_t n = fread(hdr, 1, 16, fp);
  fclose(fp);
  if (n < 16 || memcmp(hdr, "SQLite format 3", 16) != 0)
    return cv_fail(e, "%s: not a deltacells dataset (not an SQLite database)", path);
  if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    int r = cv_fail(e, "%s: %s", path, sqlite3_errmsg(*db));
    sqlite3_close(*db);
    *db = NULL;
    return r;
  }
  sqlite3_stmt *s = NULL;
  int ok = sqlite3_prepare_v2(*db, "SELECT value FROM dc_meta WHERE key='format_version'", -1, &s, NULL) == SQLITE_OK &&
           sqlite3_step(s) == SQLITE_ROW;
  int64_t v = ok ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_finalize(s);
  if (!ok || v < DC_FORMAT_MIN || v > DC_FORMAT_VERSION) {
    int r = ok ? cv_fail(e, "%s: the dataset has format_version %lld; this build reads versions %d..%d", path,
                         (long long)v, DC_FORMAT_MIN, DC_FORMAT_VERSION)
               : dsw_fail_no_meta(*db, path, e);
    sqlite3_close(*db);
    *db = NULL;
    return r;
  }
  char *msg = NULL;
  if (sqlite3_deltacells_init(*db, &msg, NULL) != SQLITE_OK) {
    int r = cv_fail(e, "%s: loading the extension: %s", path, msg ? msg : "failed");
    sqlite3_free(msg);
    sqlite3_close(*db);
    *db = NULL;
    return r;
  }
  sqlite3_free(msg);
  sqlite3_exec(*db, "PRAGMA cache_size=-1024", NULL, NULL, NULL); /* 1 MiB: tiles are read through blobs, once */
  *version = v;
  return 0;
}

char *ex_meta(sqlite3 *db, const char *key) {
  sqlite3_stmt *s = NULL;
  char *v = NULL;
  if (sqlite3_prepare_v2(db, "SELECT CAST(value AS TEXT) FROM dc_meta WHERE key=?", -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = strdup((const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  return v;
}

int64_t ex_meta_int(sqlite3 *db, const char *key, int64_t dflt) {
  char *v = ex_meta(db, key);
  int64_t x = v ? strtoll(v, NULL, 10) : dflt;
  free(v);
  return x;
}


void ex_gtable_free(gtable *g) {
  for (int c = 0; c < g->n_cols; c++) {
    gcolumn *k = &g->cols[c];
    if (k->t) for (int64_t i = 0; i < g->n; i++) free(k->t[i]);
    free(k->name); free(k->i); free(k->f); free(k->t); free(k->null);
  }
  free(g->cols);
  free(g->orig);
  memset(g, 0, sizeof *g);
}

int ex_gtable_load(sqlite3 *db, const char *path, gtable *g, cv_err *e) {
  memset(g, 0, sizeof *g);
  g->c_name = g->c_total = g->c_ncells = g->c_orig = -1;
  sqlite3_stmt *s = NULL;
  int rc = -1;
  g->n = 0;
  {
    sqlite3_stmt *c = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM genes", -1, &c, NULL) != SQLITE_OK || sqlite3_step(c) != SQLITE_ROW) {
      cv_fail(e, "%s: the genes table: %s", path, sqlite3_errmsg(db));
      sqlite3_finalize(c);
      return -1;
    }
    g->n = sqlite3_column_int64(c, 0);
    sqlite3_finalize(c);
  }
  if (sqlite3_prepare_v2(db, "SELECT * FROM genes ORDER BY gene_id", -1, &s, NULL) != SQLITE_OK)
    return cv_fail(e, "%s: the genes table: %s", path, sqlite3_errmsg(db));
  g->n_cols = sqlite3_column_count(s);
  g->cols = calloc((size_t)g->n_cols, sizeof *g->cols);
  if (!g->cols) { cv_fail(e, "out of memory"); goto done; }
  size_t n = (size_t)g->n + 1;
  for (int c = 0; c < g->n_cols; c++) {
    gcolumn *k = &g->cols[c];
    k->name = strdup(sqlite3_column_name(s, c));
    /* the kind the table declares (SQLite converts a value of another type to it) */
    const char *dt = sqlite3_column_decltype(s, c);
    k->kind = dt && !strcasecmp(dt, "INTEGER") ? GK_INT : dt && !strcasecmp(dt, "REAL") ? GK_REAL : GK_TEXT;
    if (k->kind == GK_INT) k->i = calloc(n, sizeof *k->i);
    else if (k->kind == GK_REAL) k->f = calloc(n, sizeof *k->f);
    else k->t = calloc(n, sizeof *k->t);
    k->null = calloc(n, 1);
    if (!k->name || !(k->i || k->f || k->t) || !k->null) { cv_fail(e, "out of memory"); goto done; }
    if (!strcmp(k->name, "name")) g->c_name = c;
    else if (!strcmp(k->name, "total_counts")) g->c_total = c;
    else if (!strcmp(k->name, "n_cells")) g->c_ncells = c;
    else if (!strcmp(k->name, "orig_index")) g->c_orig = c;
  }
  int64_t row = 0;
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    if (row >= g->n) { cv_fail(e, "%s: the genes table changed while it was read", path); goto done; }
    for (int c = 0; c < g->n_cols; c++) {
      gcolumn *k = &g->cols[c];
      if (sqlite3_column_type(s, c) == SQLITE_NULL) {
        k->null[row] = 1;
        k->n_null++;
      } else if (k->kind == GK_INT) {
        k->i[row] = sqlite3_column_int64(s, c);
      } else if (k->kind == GK_REAL) {
        k->f[row] = sqlite3_column_double(s, c);
      } else {
        const char *t = (const char *)sqlite3_column_text(s, c);
        k->t[row] = strdup(t ? t : "");
        if (!k->t[row]) { cv_fail(e, "out of memory"); goto done; }
      }
    }
    row++;
  }
  if (r != SQLITE_DONE) { cv_fail(e, "%s: the genes table: %s", path, sqlite3_errmsg(db)); goto done; }
  if (row != g->n) { cv_fail(e, "%s: the genes table changed while it was read", path); goto done; }
  if (g->c_name < 0) { cv_fail(e, "%s: the genes table has no name column", path); goto done; }
  if (g->cols[g->c_name].kind != GK_TEXT || (g->c_total >= 0 && g->cols[g->c_total].kind != GK_INT) ||
      (g->c_ncells >= 0 && g->cols[g->c_ncells].kind != GK_INT) || (g->c_orig >= 0 && g->cols[g->c_orig].kind != GK_INT)) {
    cv_fail(e, "%s: the genes table's name, total_counts, n_cells or orig_index column has an unexpected type", path);
    goto done;
  }
  g->orig = malloc(n * sizeof *g->orig);
  if (!g->orig) { cv_fail(e, "out of memory"); goto done; }
  char *go = ex_meta(db, "gene_order");
  /* one without the other is damage, and the stored order in its place would be a silent swap */
  g->has_orig = !cv_gene_order_problem(go, g->c_orig >= 0, g->orig_problem, sizeof g->orig_problem) && go;
  free(go);
  for (int64_t i = 0; i < g->n; i++) g->orig[i] = g->has_orig ? g->cols[g->c_orig].i[i] : i;
  if (g->has_orig) { /* a permutation of 0..n-1, or it cannot order anything */
    uint8_t *seen = calloc(n, 1);
    if (!seen) { cv_fail(e, "out of memory"); goto done; }
    for (int64_t i = 0; i < g->n; i++) {
      int64_t o = g->orig[i];
      if (g->cols[g->c_orig].null[i] || o < 0 || o >= g->n || seen[o]) {
        free(seen);
        cv_fail(e, "%s: genes.orig_index is not a permutation of 0..%lld (gene_id %lld)", path, (long long)g->n - 1,
                (long long)i);
        goto done;
      }
      seen[o] = 1;
    }
    free(seen);
  }
  rc = 0;
done:
  sqlite3_finalize(s);
  if (rc) ex_gtable_free(g);
  return rc;
}

static const gtable *ord_ctx;
static int cmp_orig(const void *a, const void *b) {
  int64_t x = ord_ctx->orig[*(const int64_t *)a], y = ord_ctx->orig[*(const int64_t *)b];
  return x < y ? -1 : x > y;
}

/* gene ids in the input's original order (gene_id order when not recorded) */
int64_t *ex_genes_in_original_order(const gtable *g) {
  int64_t *ids = malloc(((size_t)g->n + 1) * sizeof *ids);
  if (!ids) return NULL;
  for (int64_t i = 0; i < g->n; i++) ids[i] = i;
  ord_ctx = g;
  qsort(ids, (size_t)g->n, sizeof *ids, cmp_orig);
  return ids;
}

/* ------------------------------------------------------------ genes command */
int cv_genes(const char *path, int json, int original, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  gtable g;
  if (ex_open(path, &db, &version, e)) return -1;
  if (ex_gtable_load(db, path, &g, e)) { sqlite3_close(db); return -1; }
  if (g.orig_problem[0]) {   /* every listing shows orig_index */
    cv_fail(e, "%s: %s, so the input's gene order is unknown (deltacells verify checks the dataset)", path, g.orig_problem);
    ex_gtable_free(&g);
    sqlite3_close(db);
    return -1;
  }
  int64_t *ids = original ? ex_genes_in_original_order(&g) : NULL;
  if (original && !ids) { ex_gtable_free(&g); sqlite3_close(db); return cv_fail(e, "out of memory"); }
  const gcolumn *nm = &g.cols[g.c_name];
  const gcolumn *tot = g.c_total >= 0 ? &g.cols[g.c_total] : NULL, *nc = g.c_ncells >= 0 ? &g.cols[g.c_ncells] : NULL;
  if (json) {
    printf("{\"path\":");
    cv_json_print(stdout, path);
    printf(",\"n_genes\":%lld,\"original_order\":\"%s\",\"order\":\"%s\",\"genes\":[", (long long)g.n,
           g.has_orig ? "recorded" : "not recorded (stored order)", original ? "original" : "stored");
    for (int64_t r = 0; r < g.n; r++) {
      int64_t i = ids ? ids[r] : r;
      printf("%s{\"gene_id\":%lld,\"orig_index\":%lld,\"name\":", r ? "," : "", (long long)i, (long long)g.orig[i]);
      cv_json_print(stdout, nm->t[i]);
      printf(",\"total_counts\":%lld,\"n_cells\":%lld}", tot ? (long long)tot->i[i] : -1LL, nc ? (long long)nc->i[i] : -1LL);
    }
    printf("]}\n");
  } else {
    if (!g.has_orig)
      printf("# %s records no original gene order (written before it was stored): orig_index = gene_id\n", path);
    printf("gene_id\torig_index\tname\ttotal_counts\tn_cells\n");
    for (int64_t r = 0; r < g.n; r++) {
      int64_t i = ids ? ids[r] : r;
      printf("%lld\t%lld\t", (long long)i, (long long)g.orig[i]);
      for (const char *c = nm->t[i] ? nm->t[i] : ""; *c; c++) {   /* one field: \t \n \r \\ escaped */
        if (*c == '\t') fputs("\\t", stdout);
        else if (*c == '\n') fputs("\\n", stdout);
        else if (*c == '\r') fputs("\\r", stdout);
        else if (*c == '\\') fputs("\\\\", stdout);
        else putchar(*c);
      }
      printf("\t%lld\t%lld\n", tot ? (long long)tot->i[i] : -1LL, nc ? (long long)nc->i[i] : -1LL);
    }
  }
  int rc = fflush(stdout) == 0 ? 0 : cv_fail(e, "writing the list: %s", strerror(errno));
  free(ids);
  ex_gtable_free(&g);
  sqlite3_close(db);
  return rc;
}
