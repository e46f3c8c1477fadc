/*
** export.c — `deltacells export`: a dataset (or the cells an SQL expression
** selects, the genes a file lists, the obs columns named) written as an h5ad
** file in anndata's on-disk format (encoding 0.1.0/0.2.0, as anndata 0.8
** writes it); and `deltacells genes`.
**
** X is written as a CSR group (data, indices, indptr; encoding-type
** csr_matrix) with the genes in the input's original order (genes.orig_index,
** docs/format.md) and in the input's dtype (dc_meta.x_dtype).  It streams:
** one tile at a time is read (sqlite3_blob), its seal checked, decoded with
** the codec library (only the chunks holding selected cells), its genes mapped
** to output columns and each cell's entries put in column order in place, then
** appended to the extendible data/indices datasets.  Memory: one decoded tile
** (8 bytes per nonzero), its blob, the output's indptr (8 bytes per cell) and
** the selected cell ids (8 bytes per cell), the genes table, and obs buffers
** of 16,384 rows.  obs is read through the extension's `cells` table in one
** query (so --where is any SQL expression over it) and written in blocks.
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

#include "dc_codec.h"
#include "dc_format.h"
#include "dc_seal.h"

#define EX_OBS_ROWS 16384u
#define EX_CHUNK ((hsize_t)1 << 16) /* elements per HDF5 chunk of X's data/indices */
#define EX_CONV ((uint64_t)1 << 16)  /* X values converted per write */

/* The extension, compiled into the converter with -DSQLITE_CORE. */
int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

/* ------------------------------------------------------------ at conversion */
static const char *dtype_of(hid_t t) {
  if (t < 0) return NULL;
  H5T_class_t c = H5Tget_class(t);
  size_t sz = H5Tget_size(t);
  if (c == H5T_FLOAT) return sz == 4 ? "float32" : sz == 8 ? "float64" : sz == 2 ? "float16" : NULL;
  if (c != H5T_INTEGER) return NULL;
  int s = H5Tget_sign(t) == H5T_SGN_2;
  switch (sz) {
    case 1: return s ? "int8" : "uint8";
    case 2: return s ? "int16" : "uint16";
    case 4: return s ? "int32" : "uint32";
    case 8: return s ? "int64" : "uint64";
    default: return NULL;
  }
}

/* The dtype that holds every input's values: equal dtypes stay; integers of one
** signedness take the widest; mixed signedness int64; any float: float32 if every
** input is float32 (or float16), else float64. */
static const char *dtype_unite(const char *a, const char *b) {
  if (!a || !b) return NULL;
  if (!strcmp(a, b)) return a;
  int fa = a[0] == 'f', fb = b[0] == 'f';
  if (fa || fb) {
    if (fa && fb && strcmp(a, "float64") && strcmp(b, "float64")) return "float32";
    return "float64";
  }
  int ua = a[0] == 'u', ub = b[0] == 'u';
  int wa = atoi(a + (ua ? 4 : 3)), wb = atoi(b + (ub ? 4 : 3));
  if (ua == ub) return wa >= wb ? a : b;
  return "int64";
}

int cv_meta_export(dsw *w, h5file *files, int nf, cv_err *e) {
  const char *dt = NULL;
  for (int f = 0; f < nf; f++) {
    hid_t t = files[f].data >= 0 ? H5Dget_type(files[f].data) : -1;
    const char *d = dtype_of(t);
    if (t >= 0) H5Tclose(t);
    dt = f == 0 ? d : dtype_unite(dt, d);
    if (!dt) break;
  }
  if (dsw_meta_text(w, "gene_order", "union", e)) return -1;
  return dt ? dsw_meta_text(w, "x_dtype", dt, e) : 0;
}

/* ------------------------------------------------------------ reading the dataset */
static int ex_open(const char *path, sqlite3 **db, int64_t *version, cv_err *e) {
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
               : cv_fail(e, "%s: not a deltacells dataset (no dc_meta format_version)", path);
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

static char *ex_meta(sqlite3 *db, const char *key) {
  sqlite3_stmt *s = NULL;
  char *v = NULL;
  if (sqlite3_prepare_v2(db, "SELECT CAST(value AS TEXT) FROM dc_meta WHERE key=?", -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = strdup((const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  return v;
}

static int64_t ex_meta_int(sqlite3 *db, const char *key, int64_t dflt) {
  char *v = ex_meta(db, key);
  int64_t x = v ? strtoll(v, NULL, 10) : dflt;
  free(v);
  return x;
}

/* The genes table in memory, by gene_id: every column as SQLite returns it. */
enum { GK_INT = 1, GK_REAL, GK_TEXT };
typedef struct gcolumn {
  char *name;
  int kind;          /* GK_*: the widest kind of its values */
  int64_t *i;
  double *f;
  char **t;
  uint8_t *null;
  int64_t n_null;
} gcolumn;

typedef struct gtable {
  int64_t n;
  int n_cols;
  gcolumn *cols;
  int c_name, c_total, c_ncells, c_orig;  /* column numbers, or -1 */
  int64_t *orig;     /* gene_id -> original position (orig_index, or gene_id) */
  int has_orig;
} gtable;

static void gtable_free(gtable *g) {
  for (int c = 0; c < g->n_cols; c++) {
    gcolumn *k = &g->cols[c];
    if (k->t) for (int64_t i = 0; i < g->n; i++) free(k->t[i]);
    free(k->name); free(k->i); free(k->f); free(k->t); free(k->null);
  }
  free(g->cols);
  free(g->orig);
  memset(g, 0, sizeof *g);
}

static int gtable_load(sqlite3 *db, const char *path, gtable *g, cv_err *e) {
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
  g->has_orig = go && g->c_orig >= 0;
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
  if (rc) gtable_free(g);
  return rc;
}

static const gtable *ord_ctx;
static int cmp_orig(const void *a, const void *b) {
  int64_t x = ord_ctx->orig[*(const int64_t *)a], y = ord_ctx->orig[*(const int64_t *)b];
  return x < y ? -1 : x > y;
}

/* gene ids in the input's original order (gene_id order when not recorded) */
static int64_t *genes_in_original_order(const gtable *g) {
  int64_t *ids = malloc(((size_t)g->n + 1) * sizeof *ids);
  if (!ids) return NULL;
  for (int64_t i = 0; i < g->n; i++) ids[i] = i;
  ord_ctx = g;
  qsort(ids, (size_t)g->n, sizeof *ids, cmp_orig);
  return ids;
}

static void json_esc(FILE *o, const char *s) {
  fputc('"', o);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(o, "\\%c", *p);
    else if (*p < 0x20) fprintf(o, "\\u%04x", *p);
    else fputc(*p, o);
  }
  fputc('"', o);
}

/* ------------------------------------------------------------ genes command */
int cv_genes(const char *path, int json, int original, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  gtable g;
  if (ex_open(path, &db, &version, e)) return -1;
  if (gtable_load(db, path, &g, e)) { sqlite3_close(db); return -1; }
  int64_t *ids = original ? genes_in_original_order(&g) : NULL;
  if (original && !ids) { gtable_free(&g); sqlite3_close(db); return cv_fail(e, "out of memory"); }
  const gcolumn *nm = &g.cols[g.c_name];
  const gcolumn *tot = g.c_total >= 0 ? &g.cols[g.c_total] : NULL, *nc = g.c_ncells >= 0 ? &g.cols[g.c_ncells] : NULL;
  if (json) {
    printf("{\"path\":");
    json_esc(stdout, path);
    printf(",\"n_genes\":%lld,\"original_order\":\"%s\",\"order\":\"%s\",\"genes\":[", (long long)g.n,
           g.has_orig ? "recorded" : "not recorded (stored order)", original ? "original" : "stored");
    for (int64_t r = 0; r < g.n; r++) {
      int64_t i = ids ? ids[r] : r;
      printf("%s{\"gene_id\":%lld,\"orig_index\":%lld,\"name\":", r ? "," : "", (long long)i, (long long)g.orig[i]);
      json_esc(stdout, nm->t[i]);
      printf(",\"total_counts\":%lld,\"n_cells\":%lld}", tot ? (long long)tot->i[i] : -1LL, nc ? (long long)nc->i[i] : -1LL);
    }
    printf("]}\n");
  } else {
    if (!g.has_orig)
      printf("# %s records no original gene order (written before it was stored): orig_index = gene_id\n", path);
    printf("gene_id\torig_index\tname\ttotal_counts\tn_cells\n");
    for (int64_t r = 0; r < g.n; r++) {
      int64_t i = ids ? ids[r] : r;
      printf("%lld\t%lld\t%s\t%lld\t%lld\n", (long long)i, (long long)g.orig[i], nm->t[i] ? nm->t[i] : "",
             tot ? (long long)tot->i[i] : -1LL, nc ? (long long)nc->i[i] : -1LL);
    }
  }
  int rc = fflush(stdout) == 0 ? 0 : cv_fail(e, "writing the list: %s", strerror(errno));
  free(ids);
  gtable_free(&g);
  sqlite3_close(db);
  return rc;
}

/* ------------------------------------------------------------ HDF5 writing */
static hid_t vlstr(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

/* numpy's bool as h5py writes it: an int8 enum FALSE/TRUE */
static hid_t booltype(void) {
  hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return t;
}

static int attr_str(hid_t o, const char *name, const char *v) {
  hid_t t = vlstr(), sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || H5Awrite(a, t, &v) < 0 ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return r;
}

static int attr_strs(hid_t o, const char *name, const char *const *v, size_t n) {
  hsize_t d = n;
  hid_t t = n ? vlstr() : H5Tcopy(H5T_NATIVE_DOUBLE), sp = H5Screate_simple(1, &d, NULL);
  hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || (n && H5Awrite(a, t, v) < 0) ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return r;
}

static int attr_i64s(hid_t o, const char *name, const int64_t *v, size_t n) {
  hsize_t d = n;
  hid_t sp = H5Screate_simple(1, &d, NULL);
  hid_t a = H5Acreate2(o, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, v) < 0 ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  return r;
}

static int attr_bool(hid_t o, const char *name, int v) {
  hid_t t = booltype(), sp = H5Screate(H5S_SCALAR);
  int8_t b = (int8_t)(v != 0);
  hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || H5Awrite(a, t, &b) < 0 ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return r;
}

static int enc(hid_t o, const char *type, const char *version) {
  return attr_str(o, "encoding-type", type) || attr_str(o, "encoding-version", version) ? -1 : 0;
}

static hid_t group(hid_t loc, const char *name, const char *type, const char *version) {
  hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g >= 0 && type && enc(g, type, version)) {
    H5Gclose(g);
    return -1;
  }
  return g;
}

/* A 1-D dataset of n elements of file type ft (chunked and extendible when ext). */
static hid_t dset(hid_t loc, const char *name, hid_t ft, hsize_t n, int ext, const char *type, const char *version) {
  hsize_t mx = H5S_UNLIMITED, ch = EX_CHUNK;
  hid_t sp = H5Screate_simple(1, &n, ext ? &mx : NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
  if (ext) H5Pset_chunk(pl, 1, &ch);
  if (H5Tget_class(ft) != H5T_STRING) H5Pset_fill_time(pl, H5D_FILL_TIME_NEVER); /* all written: no zero-fill */
  hid_t d = H5Dcreate2(loc, name, ft, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  H5Pclose(pl);
  H5Sclose(sp);
  if (d >= 0 && type && enc(d, type, version)) {
    H5Dclose(d);
    return -1;
  }
  return d;
}

/* Writes n elements (memory type mt) at [off, off + n); extends first when ext. */
static int dset_put(hid_t d, hid_t mt, const void *buf, hsize_t off, hsize_t n, int ext) {
  if (n == 0) return 0;
  if (ext) {
    hsize_t size = off + n;
    if (H5Dset_extent(d, &size) < 0) return -1;
  }
  hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &n, NULL), xp = H5Pcreate(H5P_DATASET_XFER);
  /* a conversion buffer sized to the write: HDF5's default (1 MiB, zeroed) on every small
  ** write of strings was a third of a small export's time */
  size_t tb = (size_t)n * 16 < ((size_t)1 << 20) ? (size_t)n * 16 : ((size_t)1 << 20);
  H5Pset_buffer(xp, tb < 4096 ? 4096 : tb, NULL, NULL);
  int r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &off, NULL, &n, NULL) < 0 ||
          H5Dwrite(d, mt, ms, fs, xp, buf) < 0 ? -1 : 0;
  H5Pclose(xp);
  H5Sclose(ms);
  H5Sclose(fs);
  return r;
}

/* X's output dtypes: numpy's name, file type, memory type, bytes */
static const char *const dtypes[] = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                     "float32", "float64", NULL};
static int dtype_index(const char *name) {
  for (int i = 0; name && dtypes[i]; i++)
    if (!strcmp(dtypes[i], name)) return i;
  return -1;
}
static hid_t dtype_file(int i) {
  hid_t t[] = {H5T_STD_I8LE, H5T_STD_I16LE, H5T_STD_I32LE, H5T_STD_I64LE, H5T_STD_U8LE, H5T_STD_U16LE,
               H5T_STD_U32LE, H5T_STD_U64LE, H5T_IEEE_F32LE, H5T_IEEE_F64LE};
  return t[i];
}
static hid_t dtype_mem(int i) {
  hid_t t[] = {H5T_NATIVE_INT8, H5T_NATIVE_INT16, H5T_NATIVE_INT32, H5T_NATIVE_INT64, H5T_NATIVE_UINT8,
               H5T_NATIVE_UINT16, H5T_NATIVE_UINT32, H5T_NATIVE_UINT64, H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE};
  return t[i];
}

/* A column of strings of n rows, all at once (var). */
static int put_strings(hid_t loc, const char *name, const char *const *v, hsize_t n) {
  hid_t t = vlstr();
  hid_t d = dset(loc, name, t, n, 0, "string-array", "0.2.0");
  int r = d < 0 || dset_put(d, t, v, 0, n, 0) ? -1 : 0;
  if (d >= 0) H5Dclose(d);
  H5Tclose(t);
  return r;
}

/* ------------------------------------------------------------ export: genes */
typedef struct xgenes {
  int64_t n_out;
  int64_t *ids;      /* output column -> gene_id */
  int32_t *col;      /* gene_id -> output column, or -1 */
} xgenes;

/* --genes FILE: names in file order; a name listed twice takes its next
** occurrence in the dataset (duplicate names stay apart). */
static int genes_from_file(const gtable *g, const int64_t *orig_order, const char *file, xgenes *x, cv_err *e) {
  FILE *fp = fopen(file, "r");
  if (!fp) return cv_fail(e, "--genes %s: cannot open: %s", file, strerror(errno));
  const gcolumn *nm = &g->cols[g->c_name];
  cv_map first = {0};
  int32_t *next = malloc(((size_t)g->n + 1) * sizeof *next); /* gene -> next gene of the same name (orig order) */
  char *line = NULL;
  size_t cap = 0, n_out_cap = 0;
  int rc = -1;
  if (!next) { cv_fail(e, "out of memory"); goto done; }
  for (int64_t r = g->n - 1; r >= 0; r--) { /* chains in original order */
    int64_t id = orig_order[r];
    uint32_t *p = cv_map_ref(&first, nm->t[id] ? nm->t[id] : "");
    if (p) { next[id] = (int32_t)*p; *p = (uint32_t)id; }
    else {
      next[id] = -1;
      if (cv_map_put(&first, nm->t[id] ? nm->t[id] : "", (uint32_t)id, e)) goto done;
    }
  }
  ssize_t len;
  long lineno = 0;
  while ((len = getline(&line, &cap, fp)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (len == 0) continue;
    uint32_t *p = cv_map_ref(&first, line);
    if (!p) { /* a name with spaces around it in the file: try it trimmed */
      char *a = line, *b = line + len;
      while (a < b && isspace((unsigned char)*a)) a++;
      while (b > a && isspace((unsigned char)b[-1])) b--;
      char keep = *b;
      *b = 0;
      p = a != line || b != line + len ? cv_map_ref(&first, a) : NULL;
      *b = keep;
    }
    if (!p) {
      const char *near = NULL;
      for (int64_t i = 0; i < g->n && !near; i++)
        if (nm->t[i] && !strcasecmp(nm->t[i], line)) near = nm->t[i];
      cv_fail(e, "--genes %s: line %ld: gene '%s' is not in the dataset%s%s%s", file, lineno, line,
              near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
      goto done;
    }
    if (*p == UINT32_MAX) {
      cv_fail(e, "--genes %s: line %ld: gene '%s' is listed more often than the dataset has it", file, lineno, line);
      goto done;
    }
    int64_t id = *p;
    *p = next[id] >= 0 ? (uint32_t)next[id] : UINT32_MAX;
    if (cv_grow((void **)&x->ids, &n_out_cap, (size_t)x->n_out + 1, sizeof *x->ids, e)) goto done;
    x->ids[x->n_out++] = id;
  }
  if (ferror(fp)) { cv_fail(e, "--genes %s: read error", file); goto done; }
  rc = 0;
done:
  fclose(fp);
  free(line);
  free(next);
  cv_map_free(&first);
  return rc;
}

/* ------------------------------------------------------------ export: obs */
enum { OK_CAT = 1, OK_INT, OK_REAL, OK_BOOL, OK_TEXT };
typedef struct xcol {
  char *name;
  int kind;
  int64_t col;         /* cells_columns.col */
  int64_t nulls;       /* over the whole dataset: decides nullable encodings */
  char **cats;
  uint32_t n_cats;
  cv_map codes;        /* label -> code */
  hid_t d, m;          /* values (codes) and mask datasets */
  hid_t tg;            /* a text column with NULLs: its categorical group (categories written last) */
  size_t cats_cap;
  hid_t ft;            /* file type of d */
  /* a block of rows */
  int64_t *i64;
  double *f64;
  int32_t *c32;
  int8_t *b8, *mask;
  char **txt;
} xcol;

static void xcol_free(xcol *c) {
  for (uint32_t k = 0; k < c->n_cats; k++) free(c->cats[k]);
  free(c->cats);
  cv_map_free(&c->codes);
  if (c->tg >= 0) H5Gclose(c->tg);
  if (c->d >= 0) H5Dclose(c->d);
  if (c->m >= 0) H5Dclose(c->m);
  if (c->txt) for (uint32_t k = 0; k < EX_OBS_ROWS; k++) free(c->txt[k]);
  free(c->name); free(c->i64); free(c->f64); free(c->c32); free(c->b8); free(c->mask); free(c->txt);
}

static int kind_of(const char *k) {
  return !strcmp(k, "category") ? OK_CAT : !strcmp(k, "int") ? OK_INT : !strcmp(k, "real") ? OK_REAL
         : !strcmp(k, "bool") ? OK_BOOL : OK_TEXT;
}

static int obs_columns(sqlite3 *db, const char *path, const char *list, xcol **out, int *n_out, cv_err *e) {
  sqlite3_stmt *s = NULL;
  xcol *all = NULL;
  int n = 0, cap = 0, rc = -1;
  if (sqlite3_prepare_v2(db, "SELECT col, name, kind, null_count FROM cells_columns WHERE col > 0 ORDER BY col", -1, &s,
                         NULL) != SQLITE_OK)
    return cv_fail(e, "%s: cells_columns: %s", path, sqlite3_errmsg(db));
  while (sqlite3_step(s) == SQLITE_ROW) {
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      xcol *t = realloc(all, (size_t)cap * sizeof *t);
      if (!t) { cv_fail(e, "out of memory"); goto done; }
      all = t;
    }
    xcol *c = &all[n];
    memset(c, 0, sizeof *c);
    c->d = c->m = c->tg = -1;
    c->col = sqlite3_column_int64(s, 0);
    c->name = strdup((const char *)sqlite3_column_text(s, 1));
    c->kind = kind_of((const char *)sqlite3_column_text(s, 2));
    c->nulls = sqlite3_column_int64(s, 3);
    n++;
    if (!c->name) { cv_fail(e, "out of memory"); goto done; }
  }
  sqlite3_finalize(s);
  s = NULL;
  if (list) { /* --obs: the columns named, in that order */
    xcol *sel = calloc((size_t)n + 1, sizeof *sel);
    uint8_t *used = calloc((size_t)n + 1, 1);
    int k = 0;
    char *dup = strdup(list), *save = NULL;
    if (!sel || !used || !dup) { free(sel); free(used); free(dup); cv_fail(e, "out of memory"); goto done; }
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      while (isspace((unsigned char)*t)) t++;
      char *z = t + strlen(t);
      while (z > t && isspace((unsigned char)z[-1])) *--z = 0;
      if (!*t) continue;
      int j = -1;
      for (int i = 0; i < n && j < 0; i++) if (!strcmp(all[i].name, t)) j = i;
      for (int i = 0; i < n && j < 0; i++) if (!strcasecmp(all[i].name, t)) j = i; /* SQLite's names ignore case */
      if (j < 0) {
        sqlite3_str *m = sqlite3_str_new(NULL);
        for (int i = 0; i < n; i++) sqlite3_str_appendf(m, "%s%s", i ? ", " : "", all[i].name);
        char *ms = sqlite3_str_finish(m);
        cv_fail(e, "--obs: unknown obs column '%s' (%s has: %s)", t, path, n ? (ms ? ms : "?") : "no obs columns");
        sqlite3_free(ms);
        free(sel); free(used); free(dup);
        goto done;
      }
      if (used[j]) { cv_fail(e, "--obs: column '%s' is named twice", all[j].name); free(sel); free(used); free(dup); goto done; }
      used[j] = 1;
      sel[k++] = all[j];
    }
    for (int i = 0; i < n; i++) if (!used[i]) xcol_free(&all[i]);
    free(all);
    free(used);
    free(dup);
    all = sel;
    n = k;
  }
  /* dictionaries */
  if (sqlite3_prepare_v2(db, "SELECT code, value FROM cells_dict WHERE col=? ORDER BY code", -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: cells_dict: %s", path, sqlite3_errmsg(db));
    goto done;
  }
  for (int i = 0; i < n; i++) {
    xcol *c = &all[i];
    if (c->kind != OK_CAT) continue;
    size_t cc = 0;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, c->col);
    while (sqlite3_step(s) == SQLITE_ROW) {
      if (sqlite3_column_int64(s, 0) != (int64_t)c->n_cats) {
        cv_fail(e, "%s: cells_dict of column '%s' is not numbered 0, 1, ...", path, c->name);
        goto done;
      }
      const char *v = (const char *)sqlite3_column_text(s, 1);
      if (cv_grow((void **)&c->cats, &cc, c->n_cats + 1, sizeof *c->cats, e)) goto done;
      c->cats[c->n_cats] = strdup(v ? v : "");
      if (!c->cats[c->n_cats] || cv_map_put(&c->codes, c->cats[c->n_cats], c->n_cats, e)) {
        cv_fail(e, "out of memory (or column '%s' has a repeated category)", c->name);
        goto done;
      }
      c->n_cats++;
    }
  }
  rc = 0;
done:
  sqlite3_finalize(s);
  if (rc) {
    for (int i = 0; i < n; i++) xcol_free(&all[i]);
    free(all);
    return -1;
  }
  *out = all;
  *n_out = n;
  return 0;
}

static hid_t code_type(uint32_t n_cats) {
  return n_cats <= 127 ? H5T_STD_I8LE : n_cats <= 32767 ? H5T_STD_I16LE : H5T_STD_I32LE;
}

/* Creates the datasets of an obs column of n rows under g. */
static int obs_create(hid_t g, xcol *c, hsize_t n, hid_t bt) {
  int nullable = c->nulls > 0;
  hid_t sub = -1;
  int r = -1;
  switch (c->kind) {
    case OK_CAT: {
      sub = group(g, c->name, "categorical", "0.2.0");
      if (sub < 0 || attr_bool(sub, "ordered", 0)) goto done;
      c->ft = code_type(c->n_cats);
      c->d = dset(sub, "codes", c->ft, n, 0, "array", "0.2.0");
      if (c->d < 0 || put_strings(sub, "categories", (const char *const *)c->cats, c->n_cats)) goto done;
      break;
    }
    case OK_INT: case OK_BOOL: {
      c->ft = c->kind == OK_INT ? H5T_STD_I64LE : bt;
      if (nullable) {
        sub = group(g, c->name, c->kind == OK_INT ? "nullable-integer" : "nullable-boolean", "0.1.0");
        if (sub < 0) goto done;
        c->d = dset(sub, "values", c->ft, n, 0, "array", "0.2.0");
        c->m = dset(sub, "mask", bt, n, 0, "array", "0.2.0");
        if (c->d < 0 || c->m < 0) goto done;
      } else {
        c->d = dset(g, c->name, c->ft, n, 0, "array", "0.2.0");
        if (c->d < 0) goto done;
      }
      break;
    }
    case OK_REAL:
      c->ft = H5T_IEEE_F64LE;
      c->d = dset(g, c->name, c->ft, n, 0, "array", "0.2.0");
      if (c->d < 0) goto done;
      break;
    default: {
      if (nullable) { /* no nullable strings in anndata 0.8: a categorical with missing values */
        c->tg = group(g, c->name, "categorical", "0.2.0");
        if (c->tg < 0 || attr_bool(c->tg, "ordered", 0)) goto done;
        c->d = dset(c->tg, "codes", H5T_STD_I32LE, n, 0, "array", "0.2.0");
        if (c->d < 0) goto done;
        break;
      }
      hid_t t = vlstr();
      c->ft = -1;
      c->d = dset(g, c->name, t, n, 0, "string-array", "0.2.0");
      H5Tclose(t);
      if (c->d < 0) goto done;
    }
  }
  size_t B = EX_OBS_ROWS;
  switch (c->kind) {
    case OK_CAT: c->c32 = malloc(B * sizeof *c->c32); if (!c->c32) goto done; break;
    case OK_INT: c->i64 = malloc(B * sizeof *c->i64); c->mask = malloc(B); if (!c->i64 || !c->mask) goto done; break;
    case OK_BOOL: c->b8 = malloc(B); c->mask = malloc(B); if (!c->b8 || !c->mask) goto done; break;
    case OK_REAL: c->f64 = malloc(B * sizeof *c->f64); if (!c->f64) goto done; break;
    default:
      if (c->tg >= 0) { c->c32 = malloc(B * sizeof *c->c32); if (!c->c32) goto done; break; }
      c->txt = calloc(B, sizeof *c->txt);
      if (!c->txt) goto done;
  }
  r = 0;
done:
  if (sub >= 0) H5Gclose(sub);
  return r;
}

static int obs_flush(xcol *c, hsize_t off, hsize_t k, hid_t bt) {
  if (c->tg >= 0) return dset_put(c->d, H5T_NATIVE_INT32, c->c32, off, k, 0);
  switch (c->kind) {
    case OK_CAT: return dset_put(c->d, H5T_NATIVE_INT32, c->c32, off, k, 0);
    case OK_INT:
      return dset_put(c->d, H5T_NATIVE_INT64, c->i64, off, k, 0) || (c->m >= 0 && dset_put(c->m, bt, c->mask, off, k, 0));
    case OK_BOOL:
      return dset_put(c->d, bt, c->b8, off, k, 0) || (c->m >= 0 && dset_put(c->m, bt, c->mask, off, k, 0));
    case OK_REAL: return dset_put(c->d, H5T_NATIVE_DOUBLE, c->f64, off, k, 0);
    default: {
      hid_t t = vlstr();
      int r = dset_put(c->d, t, c->txt, off, k, 0);
      H5Tclose(t);
      return r;
    }
  }
}

static char *quote_id(const char *s) { return sqlite3_mprintf("\"%w\"", s); }

/* The obs frame of the selected cells, in cell_id order, through the cells table. */
static int write_obs(sqlite3 *db, const ex_opts *o, hid_t root, xcol *cols, int nc, int64_t n_sel, hid_t bt, cv_err *e) {
  hid_t g = group(root, "obs", "dataframe", "0.2.0");
  const char **names = calloc((size_t)nc + 1, sizeof *names);
  char **idx = calloc(EX_OBS_ROWS, sizeof *idx);
  hid_t di = -1, vt = vlstr();
  sqlite3_stmt *s = NULL;
  int rc = -1;
  if (g < 0 || !names || !idx) { cv_fail(e, "%s: writing obs", o->out); goto done; }
  for (int i = 0; i < nc; i++) names[i] = cols[i].name;
  if (attr_str(g, "_index", "_index") || attr_strs(g, "column-order", names, (size_t)nc)) {
    cv_fail(e, "%s: writing obs attributes", o->out);
    goto done;
  }
  di = dset(g, "_index", vt, (hsize_t)n_sel, 0, "string-array", "0.2.0");
  if (di < 0) { cv_fail(e, "%s: writing obs/_index", o->out); goto done; }
  for (int i = 0; i < nc; i++)
    if (obs_create(g, &cols[i], (hsize_t)n_sel, bt)) { cv_fail(e, "%s: writing obs column '%s'", o->out, cols[i].name); goto done; }
  sqlite3_str *q = sqlite3_str_new(NULL);
  sqlite3_str_appendall(q, "SELECT name");
  for (int i = 0; i < nc; i++) {
    char *qi = quote_id(cols[i].name);
    sqlite3_str_appendf(q, ", %s", qi);
    sqlite3_free(qi);
  }
  sqlite3_str_appendall(q, " FROM cells");
  if (o->where) sqlite3_str_appendf(q, " WHERE (%s\n)", o->where); /* the newline ends a -- comment */
  sqlite3_str_appendall(q, " ORDER BY cell_id");
  char *sql = sqlite3_str_finish(q);
  if (!sql || sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: reading obs: %s", o->path, sqlite3_errmsg(db));
    sqlite3_free(sql);
    goto done;
  }
  sqlite3_free(sql);
  int64_t row = 0;
  uint32_t k = 0;
  int r;
  for (;;) {
    r = sqlite3_step(s);
    if (r == SQLITE_ROW && row + k >= n_sel) { cv_fail(e, "%s: the cells changed while they were read", o->path); goto done; }
    if (k == EX_OBS_ROWS || (r != SQLITE_ROW && k)) {
      int bad = dset_put(di, vt, idx, (hsize_t)row, k, 0);
      for (int i = 0; i < nc && !bad; i++) bad = obs_flush(&cols[i], (hsize_t)row, k, bt);
      if (bad) { cv_fail(e, "%s: writing obs rows %lld..", o->out, (long long)row); goto done; }
      row += k;
      k = 0;
      if (cv_check_interrupt(e)) goto done;
    }
    if (r != SQLITE_ROW) break;
    const char *nm = (const char *)sqlite3_column_text(s, 0);
    free(idx[k]);
    idx[k] = strdup(nm ? nm : "");
    if (!idx[k]) { cv_fail(e, "out of memory"); goto done; }
    for (int i = 0; i < nc; i++) {
      xcol *c = &cols[i];
      int isnull = sqlite3_column_type(s, i + 1) == SQLITE_NULL;
      switch (c->kind) {
        case OK_CAT: {
          uint32_t code = 0;
          const char *v = (const char *)sqlite3_column_text(s, i + 1);
          if (isnull) c->c32[k] = -1;
          else if (cv_map_get(&c->codes, v ? v : "", &code)) c->c32[k] = (int32_t)code;
          else { cv_fail(e, "%s: obs column '%s': value '%s' is not in its categories", o->path, c->name, v ? v : ""); goto done; }
          break;
        }
        case OK_INT: c->i64[k] = isnull ? 0 : sqlite3_column_int64(s, i + 1); c->mask[k] = (int8_t)isnull; break;
        case OK_BOOL: c->b8[k] = isnull ? 0 : sqlite3_column_int64(s, i + 1) != 0; c->mask[k] = (int8_t)isnull; break;
        case OK_REAL: c->f64[k] = isnull ? NAN : sqlite3_column_double(s, i + 1); break;
        default: {
          const char *v = (const char *)sqlite3_column_text(s, i + 1);
          if (c->tg >= 0) { /* categories in order of first appearance */
            uint32_t code = 0;
            if (isnull) { c->c32[k] = -1; break; }
            if (!cv_map_get(&c->codes, v ? v : "", &code)) {
              code = c->n_cats;
              if (cv_grow((void **)&c->cats, &c->cats_cap, (size_t)c->n_cats + 1, sizeof *c->cats, e)) goto done;
              if (!(c->cats[c->n_cats] = strdup(v ? v : ""))) { cv_fail(e, "out of memory"); goto done; }
              c->n_cats++;
              if (cv_map_put(&c->codes, c->cats[code], code, e)) goto done;
            }
            c->c32[k] = (int32_t)code;
            break;
          }
          free(c->txt[k]);
          c->txt[k] = strdup(v ? v : "");
          if (!c->txt[k]) { cv_fail(e, "out of memory"); goto done; }
        }
      }
    }
    k++;
  }
  if (r != SQLITE_DONE) { cv_fail(e, "%s: reading obs: %s", o->path, sqlite3_errmsg(db)); goto done; }
  if (row != n_sel) { cv_fail(e, "%s: the cells changed while they were read", o->path); goto done; }
  for (int i = 0; i < nc; i++)
    if (cols[i].tg >= 0 && put_strings(cols[i].tg, "categories", (const char *const *)cols[i].cats, cols[i].n_cats)) {
      cv_fail(e, "%s: writing obs column '%s'", o->out, cols[i].name);
      goto done;
    }
  rc = 0;
done:
  sqlite3_finalize(s);
  if (idx) for (uint32_t i = 0; i < EX_OBS_ROWS; i++) free(idx[i]);
  free(idx);
  free(names);
  if (di >= 0) H5Dclose(di);
  H5Tclose(vt);
  if (g >= 0) H5Gclose(g);
  return rc;
}

/* ------------------------------------------------------------ export: var */
/* The categories of var column `col` if it was categorical (dc_meta var_categories): *n = 0 if not. */
static int var_categories(sqlite3 *db, const char *col, char ***cats, uint32_t *n, cv_map *m, cv_err *e) {
  sqlite3_stmt *s = NULL;
  size_t cap = 0;
  *n = 0;
  if (sqlite3_prepare_v2(db, "SELECT v.value FROM json_each((SELECT value FROM dc_meta WHERE key = 'var_categories')) j,"
                         " json_each(j.value) v WHERE j.key = ?1 ORDER BY CAST(v.key AS INTEGER)", -1, &s, NULL) != SQLITE_OK)
    return cv_fail(e, "dc_meta.var_categories: %s", sqlite3_errmsg(db));
  sqlite3_bind_text(s, 1, col, -1, SQLITE_STATIC);
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(s, 0);
    if (cv_grow((void **)cats, &cap, *n + 1, sizeof **cats, e)) break;
    (*cats)[*n] = strdup(v ? v : "");
    if (!(*cats)[*n] || cv_map_put(m, (*cats)[*n], *n, e)) { free((*cats)[*n]); cv_fail(e, "dc_meta.var_categories: column '%s': a repeated category or out of memory", col); break; }
    (*n)++;
  }
  sqlite3_finalize(s);
  if (r != SQLITE_DONE) return e->msg[0] ? -1 : cv_fail(e, "dc_meta.var_categories: malformed");
  return 0;
}

static int write_var(sqlite3 *db, const ex_opts *o, hid_t root, const gtable *g, const xgenes *x, hid_t bt, cv_err *e) {
  char *vic = ex_meta(db, "var_index_column");
  int c_index = g->c_name;
  if (vic)
    for (int c = 0; c < g->n_cols; c++) if (!strcmp(g->cols[c].name, vic)) c_index = c;
  free(vic);
  const char **names = calloc((size_t)g->n_cols + 1, sizeof *names);
  const char **tv = malloc(((size_t)x->n_out + 1) * sizeof *tv);
  int64_t *iv = malloc(((size_t)x->n_out + 1) * sizeof *iv);
  double *fv = malloc(((size_t)x->n_out + 1) * sizeof *fv);
  int8_t *mk = malloc((size_t)x->n_out + 1);
  int *which = calloc((size_t)g->n_cols + 1, sizeof *which);
  int n = 0, rc = -1;
  hid_t vg = -1, vt = vlstr();
  if (!names || !tv || !iv || !fv || !mk || !which) { cv_fail(e, "out of memory"); goto done; }
  for (int c = 0; c < g->n_cols; c++) {
    const char *nm = g->cols[c].name;
    if (c == c_index || c == g->c_name || c == g->c_total || c == g->c_ncells || c == g->c_orig || !strcmp(nm, "gene_id"))
      continue; /* the dataset's own columns: not the input's var */
    which[n] = c;
    names[n++] = nm;
  }
  vg = group(root, "var", "dataframe", "0.2.0");
  if (vg < 0 || attr_str(vg, "_index", "_index") || attr_strs(vg, "column-order", names, (size_t)n)) {
    cv_fail(e, "%s: writing var", o->out);
    goto done;
  }
  for (int64_t j = 0; j < x->n_out; j++) {
    const char *t = g->cols[c_index].t[x->ids[j]];
    tv[j] = t ? t : "";
  }
  if (put_strings(vg, "_index", tv, (hsize_t)x->n_out)) { cv_fail(e, "%s: writing var/_index", o->out); goto done; }
  for (int i = 0; i < n; i++) {
    const gcolumn *k = &g->cols[which[i]];
    hid_t d = -1, m = -1, sub = -1;
    int bad = 0;
    for (int64_t j = 0; j < x->n_out; j++) {
      int64_t id = x->ids[j];
      tv[j] = k->t && k->t[id] ? k->t[id] : "";
      iv[j] = k->i ? k->i[id] : 0;
      fv[j] = k->null[id] || !k->f ? NAN : k->f[id];
      mk[j] = (int8_t)k->null[id];
    }
    char **cats = NULL;
    uint32_t n_cats = 0;
    cv_map cm = {0};
    if (k->kind == GK_TEXT && var_categories(db, names[i], &cats, &n_cats, &cm, e)) goto done;
    if (n_cats) { /* categorical in the input: codes + categories */
      int32_t *codes = (int32_t *)iv; /* n_out int64 slots hold n_out int32 codes */
      for (int64_t j = 0; j < x->n_out && !bad; j++) {
        uint32_t cd = 0;
        int64_t id = x->ids[j];
        if (k->null[id]) codes[j] = -1;
        else if (cv_map_get(&cm, k->t[id], &cd)) codes[j] = (int32_t)cd;
        else bad = 1;
      }
      sub = bad ? -1 : group(vg, names[i], "categorical", "0.2.0");
      d = sub < 0 ? -1 : dset(sub, "codes", code_type(n_cats), (hsize_t)x->n_out, 0, "array", "0.2.0");
      bad = bad || d < 0 || attr_bool(sub, "ordered", 0) || dset_put(d, H5T_NATIVE_INT32, codes, 0, (hsize_t)x->n_out, 0) ||
            put_strings(sub, "categories", (const char *const *)cats, n_cats);
    } else if (k->kind == GK_TEXT) bad = put_strings(vg, names[i], tv, (hsize_t)x->n_out);
    else if (k->kind == GK_REAL) {
      d = dset(vg, names[i], H5T_IEEE_F64LE, (hsize_t)x->n_out, 0, "array", "0.2.0");
      bad = d < 0 || dset_put(d, H5T_NATIVE_DOUBLE, fv, 0, (hsize_t)x->n_out, 0);
    } else if (k->n_null) {
      sub = group(vg, names[i], "nullable-integer", "0.1.0");
      d = sub < 0 ? -1 : dset(sub, "values", H5T_STD_I64LE, (hsize_t)x->n_out, 0, "array", "0.2.0");
      m = sub < 0 ? -1 : dset(sub, "mask", bt, (hsize_t)x->n_out, 0, "array", "0.2.0");
      bad = d < 0 || m < 0 || dset_put(d, H5T_NATIVE_INT64, iv, 0, (hsize_t)x->n_out, 0) ||
            dset_put(m, bt, mk, 0, (hsize_t)x->n_out, 0);
    } else {
      d = dset(vg, names[i], H5T_STD_I64LE, (hsize_t)x->n_out, 0, "array", "0.2.0");
      bad = d < 0 || dset_put(d, H5T_NATIVE_INT64, iv, 0, (hsize_t)x->n_out, 0);
    }
    if (d >= 0) H5Dclose(d);
    if (m >= 0) H5Dclose(m);
    if (sub >= 0) H5Gclose(sub);
    for (uint32_t c = 0; c < n_cats; c++) free(cats[c]);
    free(cats);
    cv_map_free(&cm);
    if (bad) { cv_fail(e, "%s: writing var column '%s'", o->out, names[i]); goto done; }
  }
  rc = 0;
done:
  if (vg >= 0) H5Gclose(vg);
  H5Tclose(vt);
  free(names); free(tv); free(iv); free(fv); free(mk); free(which);
  return rc;
}

/* ------------------------------------------------------------ export: X */
/* Puts the entries of one cell in increasing column order (LSD radix on the
** column bits, `width` (<= 11) a pass; insertion sort for short cells). */
static void sort_cell(int32_t *ix, int32_t *vx, size_t n, uint64_t *a, uint64_t *b, int passes, int width) {
  size_t k;
  for (k = 1; k < n && ix[k] > ix[k - 1]; k++) {}
  if (k >= n) return;
  for (k = 0; k < n; k++) a[k] = (uint64_t)(uint32_t)ix[k] << 32 | (uint32_t)vx[k];
  if (n <= 48) {
    for (k = 1; k < n; k++) {
      uint64_t t = a[k];
      size_t j = k;
      for (; j > 0 && a[j - 1] > t; j--) a[j] = a[j - 1];
      a[j] = t;
    }
  } else {
    uint32_t cnt[(1u << 11) + 1];
    uint64_t mask = ((uint64_t)1 << width) - 1;
    for (int p = 0; p < passes; p++) {
      memset(cnt, 0, ((1u << width) + 1) * sizeof *cnt);
      int sh = 32 + width * p;
      for (k = 0; k < n; k++) cnt[((a[k] >> sh) & mask) + 1]++;
      for (uint32_t d = 0; d < (1u << width); d++) cnt[d + 1] += cnt[d];
      for (k = 0; k < n; k++) b[cnt[(a[k] >> sh) & mask]++] = a[k];
      uint64_t *t = a;
      a = b;
      b = t;
    }
  }
  for (k = 0; k < n; k++) {
    ix[k] = (int32_t)(a[k] >> 32);
    vx[k] = (int32_t)(uint32_t)a[k];
  }
}

typedef struct xstate {
  sqlite3 *db;
  const ex_opts *o;
  int sealed;
  uint64_t dataset_id;
  int64_t n_genes;
  const xgenes *xg;
  const int64_t *sel;   /* selected cell ids (sorted); unused when all */
  int all;              /* every cell (no --where) */
  void *cbuf;           /* X values converted to the output dtype, a slice at a time */
  int dt;               /* index into dtypes[] */
  int64_t n_sel;
  int64_t *indptr;      /* n_sel + 1 */
  hid_t d_data, d_ind, mt_data;
  uint64_t nnz_out;
  /* reused buffers */
  uint8_t *blob; size_t blob_cap;
  int64_t *ip; size_t ip_cap;
  int32_t *ix, *vx; size_t nz_cap;
  uint64_t *ka, *kb; size_t k_cap;
  uint32_t *cells, *chunks; size_t cells_cap;
  dc_tile_hdr *h;
  dc_decoder *dec;
} xstate;

static int x_tile(xstate *x, int64_t tile, int64_t fc, int64_t nc, int64_t nz, int64_t chunks, int64_t seal,
                  int64_t s0, int64_t s1, int64_t out_row, cv_err *e) {
  const char *path = x->o->path;
  sqlite3_blob *b = NULL;
  if (sqlite3_blob_open(x->db, "main", "tiles_data", "data", tile, 0, &b) != SQLITE_OK) {
    int r = cv_fail(e, "%s: tile %lld: %s", path, (long long)tile, sqlite3_errmsg(x->db));
    sqlite3_blob_close(b);
    return r;
  }
  size_t len = (size_t)sqlite3_blob_bytes(b);
  if (cv_grow((void **)&x->blob, &x->blob_cap, len + 1, 1, e) || sqlite3_blob_read(b, x->blob, (int)len, 0) != SQLITE_OK) {
    sqlite3_blob_close(b);
    return e->msg[0] ? -1 : cv_fail(e, "%s: tile %lld: cannot read its blob", path, (long long)tile);
  }
  sqlite3_blob_close(b);
  dc_error de;
  memset(&de, 0, sizeof de);
  if (dc_tile_parse(x->blob, len, x->h, &de) != DC_OK) return cv_fail(e, "%s: tile %lld: %s", path, (long long)tile, de.msg);
  if ((int64_t)x->h->n_cells != nc || (int64_t)x->h->nnz != nz || (int64_t)x->h->n_chunks != chunks ||
      (int64_t)x->h->n_genes > x->n_genes)   /* fewer: a tile written before an append added genes */
    return cv_fail(e, "%s: tile %lld: its header disagrees with tiles_data or the genes table (corrupt dataset; run verify)",
                   path, (long long)tile);
  if (x->sealed) {
    int64_t got = 0;
    if (dc_seal_tile(x->dataset_id, tile, fc, nc, nz, chunks, len, x->blob, (size_t)x->h->hdr_len, &got))
      return cv_fail(e, "out of memory");
    if (got != seal)
      return cv_fail(e, "%s: tile %lld: checksum mismatch: its blob and tiles_data row were not written together "
                     "(moved, swapped, copied or edited; run verify)", path, (long long)tile);
  }
  /* chunk by chunk: each decoded into chunk-sized buffers (its header entry, in a copy
  ** of the header, rebased to cell 0 and nonzero 0), so memory is one chunk, not one tile */
  const int32_t *col = x->xg->col;
  int bits = 0, passes, width; /* radix passes of at most 11 bits over the column bits */
  for (uint64_t v = x->xg->n_out > 0 ? (uint64_t)x->xg->n_out - 1 : 0; v; v >>= 1) bits++;
  passes = bits ? (bits + 10) / 11 : 1;
  width = bits ? (bits + passes - 1) / passes : 1;
  int64_t i = 0, k_sel = s1 - s0; /* i: next selected cell of the tile (index from s0) */
  for (uint32_t c = 0; c < x->h->n_chunks && i < k_sel; c++) {
    dc_chunk_info ci = x->h->chunk[c];
    int64_t c0 = ci.first_cell, c1 = c0 + ci.n_cells, i1 = i;
    while (i1 < k_sel && (x->all ? i1 : x->sel[s0 + i1] - fc) < c1) i1++;
    if (i1 == i) continue; /* no selected cell here */
    if (cv_grow((void **)&x->ip, &x->ip_cap, (size_t)ci.n_cells + 1, sizeof *x->ip, e)) return -1;
    if ((size_t)ci.nnz + 1 > x->nz_cap) {
      size_t a = x->nz_cap, b = x->nz_cap;
      if (cv_grow((void **)&x->ix, &a, (size_t)ci.nnz + 1, sizeof *x->ix, e) ||
          cv_grow((void **)&x->vx, &b, (size_t)ci.nnz + 1, sizeof *x->vx, e))
        return -1;
      x->nz_cap = a < b ? a : b;
    }
    dc_out out = {x->ip, x->ix, x->vx, 0};
    x->h->chunk[c].first_cell = 0;
    x->h->chunk[c].nnz_before = 0;
    int dr = dc_chunk_decode(x->dec, x->blob, len, x->h, c, &out, &de);
    x->h->chunk[c] = ci;
    if (dr != DC_OK) return cv_fail(e, "%s: tile %lld: %s", path, (long long)tile, de.msg);
    /* map genes to output columns and order each cell's entries, in place */
    uint64_t w = 0;
    for (; i < i1; i++) {
      int64_t r = (x->all ? i : x->sel[s0 + i] - fc) - c0;
      int64_t a = x->ip[r], z = x->ip[r + 1];
      uint64_t w0 = w;
      for (int64_t k = a; k < z; k++) {
        int32_t oc = col[x->ix[k]];
        if (oc >= 0) { x->ix[w] = oc; x->vx[w] = x->vx[k]; w++; }
      }
      size_t n = (size_t)(w - w0);
      if (n > 1) {
        size_t kc = x->k_cap, kd = x->k_cap;
        if (cv_grow((void **)&x->ka, &kc, n, sizeof *x->ka, e) || cv_grow((void **)&x->kb, &kd, n, sizeof *x->kb, e)) return -1;
        x->k_cap = kc < kd ? kc : kd;
        sort_cell(x->ix + w0, x->vx + w0, n, x->ka, x->kb, passes, width);
      }
      x->indptr[out_row + i + 1] = (int64_t)(x->nnz_out + w);
    }
    int bad = dset_put(x->d_ind, H5T_NATIVE_INT32, x->ix, x->nnz_out, w, 1);
    for (uint64_t k = 0; k < w && !bad; k += EX_CONV) { /* values: converted here, a slice at a time */
      uint64_t m = w - k < EX_CONV ? w - k : EX_CONV;
      const uint32_t *v = (const uint32_t *)x->vx + k;
      switch (x->dt) {
#define CONV(T) do { T *o_ = x->cbuf; for (uint64_t j = 0; j < m; j++) o_[j] = (T)v[j]; } while (0)
        case 0: CONV(int8_t); break;
        case 1: CONV(int16_t); break;
        case 2: CONV(int32_t); break;
        case 3: CONV(int64_t); break;
        case 4: CONV(uint8_t); break;
        case 5: CONV(uint16_t); break;
        case 6: CONV(uint32_t); break;
        case 7: CONV(uint64_t); break;
        case 8: CONV(float); break;
        default: CONV(double); break;
#undef CONV
      }
      bad = dset_put(x->d_data, x->mt_data, x->cbuf, x->nnz_out + k, m, 1);
    }
    if (bad) return cv_fail(e, "%s: writing X (tile %lld) failed (disk full?)", x->o->out, (long long)tile);
    x->nnz_out += w;
  }
  if (i != k_sel) return cv_fail(e, "%s: tile %lld: its chunks do not cover its cells (corrupt; run verify)", path, (long long)tile);
  return 0;
}

static int write_x(xstate *x, hid_t root, const char *dtype, cv_err *e) {
  hid_t g = group(root, "X", "csr_matrix", "0.1.0");
  sqlite3_stmt *s = NULL;
  int rc = -1;
  int64_t shape[2] = {x->n_sel, x->xg->n_out};
  x->dt = dtype_index(dtype);
  x->d_data = x->d_ind = -1;
  if (x->dt < 0) { cv_fail(e, "internal: dtype %s", dtype); goto done; }
  hid_t ft = dtype_file(x->dt);
  x->mt_data = dtype_mem(x->dt);
  x->cbuf = malloc(EX_CONV * 8);
  if (!x->cbuf) { cv_fail(e, "out of memory"); goto done; }
  if (g < 0 || attr_i64s(g, "shape", shape, 2)) { cv_fail(e, "%s: writing X", x->o->out); goto done; }
  x->d_data = dset(g, "data", ft, 0, 1, NULL, NULL);
  x->d_ind = dset(g, "indices", H5T_STD_I32LE, 0, 1, NULL, NULL);
  if (x->d_data < 0 || x->d_ind < 0) { cv_fail(e, "%s: writing X", x->o->out); goto done; }
  x->h = malloc(sizeof *x->h);
  x->dec = dc_decoder_new();
  if (!x->h || !x->dec) { cv_fail(e, "out of memory"); goto done; }
  x->indptr[0] = 0;
  const char *sql = x->sealed ? "SELECT tile, first_cell, n_cells, nnz, chunks, checksum FROM tiles_data ORDER BY tile"
                              : "SELECT tile, first_cell, n_cells, nnz, chunks, 0 FROM tiles_data ORDER BY tile";
  if (sqlite3_prepare_v2(x->db, sql, -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: tiles_data: %s", x->o->path, sqlite3_errmsg(x->db));
    goto done;
  }
  int64_t p = 0, next_cell = 0; /* p: next selected cell (index into sel) */
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t tile = sqlite3_column_int64(s, 0), fc = sqlite3_column_int64(s, 1), nc = sqlite3_column_int64(s, 2);
    if (fc != next_cell || nc < 0) {
      cv_fail(e, "%s: tile %lld starts at cell %lld, not %lld (corrupt dataset; run verify)", x->o->path, (long long)tile,
              (long long)fc, (long long)next_cell);
      goto done;
    }
    next_cell = fc + nc;
    int64_t s0 = p, s1;
    if (!x->all) {
      while (p < x->n_sel && x->sel[p] < fc + nc) p++;
      s1 = p;
    } else {
      s1 = p = fc + nc;
    }
    if (s1 == s0) continue;
    if (cv_check_interrupt(e) || x_tile(x, tile, fc, nc, sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4),
                                        sqlite3_column_int64(s, 5), s0, s1, s0, e))
      goto done;
  }
  if (r != SQLITE_DONE) { cv_fail(e, "%s: tiles_data: %s", x->o->path, sqlite3_errmsg(x->db)); goto done; }
  if (p != x->n_sel) { cv_fail(e, "%s: the tiles do not cover the cells (corrupt dataset; run verify)", x->o->path); goto done; }
  /* indptr: int32 when it fits (as scipy writes it) */
  {
    int wide = x->nnz_out > (uint64_t)INT32_MAX;
    hid_t d = dset(g, "indptr", wide ? H5T_STD_I64LE : H5T_STD_I32LE, (hsize_t)x->n_sel + 1, 0, NULL, NULL);
    int bad = d < 0;
    if (!bad && !wide) { /* narrow in place: entry i is read before it is written, and i*4 <= i*8 */
      for (int64_t i = 0; i <= x->n_sel; i++) {
        int32_t v = (int32_t)x->indptr[i];
        memcpy((char *)x->indptr + 4 * i, &v, 4);
      }
      bad = dset_put(d, H5T_NATIVE_INT32, x->indptr, 0, (hsize_t)x->n_sel + 1, 0);
    } else if (!bad) {
      bad = dset_put(d, H5T_NATIVE_INT64, x->indptr, 0, (hsize_t)x->n_sel + 1, 0);
    }
    if (d >= 0) H5Dclose(d);
    if (bad) { cv_fail(e, "%s: writing X/indptr", x->o->out); goto done; }
  }
  rc = 0;
done:
  sqlite3_finalize(s);
  if (x->d_data >= 0) H5Dclose(x->d_data);
  if (x->d_ind >= 0) H5Dclose(x->d_ind);
  if (g >= 0) H5Gclose(g);
  return rc;
}

/* ------------------------------------------------------------ export driver */
static int empty_groups(hid_t root) {
  static const char *const names[] = {"layers", "obsm", "obsp", "varm", "varp", "uns", NULL};
  for (int i = 0; names[i]; i++) {
    hid_t g = group(root, names[i], "dict", "0.1.0");
    if (g < 0) return -1;
    H5Gclose(g);
  }
  return 0;
}

int cv_export(const ex_opts *o, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  gtable g;
  xgenes xg;
  xstate x;
  xcol *cols = NULL;
  int nc = 0, rc = -1;
  int64_t *orig_order = NULL, *sel = NULL;
  char *dtype = NULL, *tmp = NULL;
  hid_t f = -1, bt = -1;
  memset(&g, 0, sizeof g);
  memset(&xg, 0, sizeof xg);
  memset(&x, 0, sizeof x);
  double t0 = cv_now();
  struct stat st, sd;
  if (stat(o->out, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return cv_fail(e, "%s: is a directory", o->out);
    if (stat(o->path, &sd) == 0 && sd.st_dev == st.st_dev && sd.st_ino == st.st_ino)
      return cv_fail(e, "%s: the output would replace the dataset", o->out);
    if (!o->force) return cv_fail(e, "%s: exists (use --force to replace it)", o->out);
  }
  int stored = o->order && !strcmp(o->order, "stored");
  if (o->order && !stored && strcmp(o->order, "original"))
    return cv_fail(e, "--order: '%s' is not original or stored", o->order);
  if (ex_open(o->path, &db, &version, e)) return -1;
  if (gtable_load(db, o->path, &g, e)) goto done;
  orig_order = genes_in_original_order(&g);
  xg.col = malloc(((size_t)g.n + 1) * sizeof *xg.col);
  if (!orig_order || !xg.col) { cv_fail(e, "out of memory"); goto done; }
  if (o->genes_file) {
    if (genes_from_file(&g, orig_order, o->genes_file, &xg, e)) goto done;
  } else {
    xg.n_out = g.n;
    xg.ids = malloc(((size_t)g.n + 1) * sizeof *xg.ids);
    if (!xg.ids) { cv_fail(e, "out of memory"); goto done; }
    for (int64_t i = 0; i < g.n; i++) xg.ids[i] = stored ? i : orig_order[i];
  }
  for (int64_t i = 0; i < g.n; i++) xg.col[i] = -1;
  for (int64_t j = 0; j < xg.n_out; j++) xg.col[xg.ids[j]] = (int32_t)j;
  /* the cells */
  int64_t n_cells = ex_meta_int(db, "n_cells", -1);
  if (n_cells < 0) { cv_fail(e, "%s: dc_meta has no n_cells", o->path); goto done; }
  int64_t n_sel = n_cells;
  if (o->where) {
    sqlite3_stmt *s = NULL;
    char *sql = sqlite3_mprintf("SELECT cell_id FROM cells WHERE (%s\n) ORDER BY cell_id", o->where);
    const char *tail = NULL;
    if (!sql || sqlite3_prepare_v2(db, sql, -1, &s, &tail) != SQLITE_OK) {
      cv_fail(e, "--where: %s", sqlite3_errmsg(db));
      sqlite3_free(sql);
      goto done;
    }
    int trailing = tail && *tail;
    sqlite3_free(sql);
    if (trailing) { sqlite3_finalize(s); cv_fail(e, "--where: '%s' is not one SQL expression", o->where); goto done; }
    size_t cap = 0;
    n_sel = 0;
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
      if (cv_grow((void **)&sel, &cap, (size_t)n_sel + 1, sizeof *sel, e)) { sqlite3_finalize(s); goto done; }
      sel[n_sel++] = sqlite3_column_int64(s, 0);
    }
    if (r != SQLITE_DONE) { cv_fail(e, "--where: %s", sqlite3_errmsg(db)); sqlite3_finalize(s); goto done; }
    sqlite3_finalize(s);
  }
  if (obs_columns(db, o->path, o->obs, &cols, &nc, e)) goto done;
  dtype = ex_meta(db, "x_dtype");
  if (!dtype || dtype_index(dtype) < 0) { /* not recorded (older dataset): int32, or int64 if a count may not fit */
    int64_t mx = 0;
    for (int64_t i = 0; g.c_total >= 0 && i < g.n; i++)
      if (g.cols[g.c_total].i[i] > mx) mx = g.cols[g.c_total].i[i];
    free(dtype);
    dtype = strdup(mx > INT32_MAX ? "int64" : "int32");
    if (!dtype) { cv_fail(e, "out of memory"); goto done; }
  }
  /* the output: a temporary file beside it, renamed into place */
  {
    char *d1 = strdup(o->out), *d2 = strdup(o->out);
    if (!d1 || !d2) { free(d1); free(d2); cv_fail(e, "out of memory"); goto done; }
    tmp = sqlite3_mprintf("%s/.%s.tmp-%d", dirname(d1), basename(d2), (int)getpid());
    free(d1);
    free(d2);
    if (!tmp) { cv_fail(e, "out of memory"); goto done; }
  }
  f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) { cv_fail(e, "%s: cannot create %s: %s", o->out, tmp, strerror(errno)); goto done; }
  bt = booltype();
  if (enc(f, "anndata", "0.1.0")) { cv_fail(e, "%s: writing", o->out); goto done; }
  x.indptr = malloc(((size_t)n_sel + 1) * sizeof *x.indptr);
  if (!x.indptr) { cv_fail(e, "out of memory"); goto done; }
  x.db = db;
  x.o = o;
  char *idt = ex_meta(db, "dataset_id");
  x.sealed = version >= 3 && idt && dc_seal_parse_id(idt, strlen(idt), &x.dataset_id) == 0;
  free(idt);
  if (version >= 3 && !x.sealed) { cv_fail(e, "%s: format version 3 without a well-formed dataset_id (corrupt)", o->path); goto done; }
  x.n_genes = g.n;
  x.xg = &xg;
  x.sel = sel;
  x.all = o->where == NULL;
  x.n_sel = n_sel;
  if (write_x(&x, f, dtype, e) || write_obs(db, o, f, cols, nc, n_sel, bt, e) || write_var(db, o, f, &g, &xg, bt, e))
    goto done;
  if (empty_groups(f)) { cv_fail(e, "%s: writing", o->out); goto done; }
  if (cv_check_interrupt(e)) goto done;
  herr_t cr = H5Fclose(f);
  f = -1;
  if (cr < 0) { cv_fail(e, "%s: closing %s failed (disk full?)", o->out, tmp); goto done; }
  if (rename(tmp, o->out) != 0) { cv_fail(e, "%s: cannot rename %s into place: %s", o->out, tmp, strerror(errno)); goto done; }
  if (!o->quiet)
    fprintf(stderr, "%s: %lld cells x %lld genes, %llu nonzeros (X %s, genes in %s order), %d obs columns; %.1f s\n",
            o->out, (long long)n_sel, (long long)xg.n_out, (unsigned long long)x.nnz_out, dtype,
            o->genes_file ? "--genes file" : stored ? "stored" : g.has_orig ? "the input's original" : "stored (no original recorded)",
            nc, cv_now() - t0);
  rc = 0;
done:
  if (f >= 0) H5Fclose(f);
  if (bt >= 0) H5Tclose(bt);
  if (rc && tmp) unlink(tmp);
  sqlite3_free(tmp);
  for (int i = 0; i < nc; i++) xcol_free(&cols[i]);
  free(cols);
  free(x.indptr); free(x.blob); free(x.ip); free(x.ix); free(x.vx); free(x.ka); free(x.kb); free(x.cells); free(x.chunks); free(x.cbuf);
  free(x.h);
  if (x.dec) dc_decoder_free(x.dec);
  free(sel);
  free(dtype);
  free(orig_order);
  free(xg.ids);
  free(xg.col);
  gtable_free(&g);
  sqlite3_close(db);
  return rc;
}
