/*
** export.c — `deltacells export` (the driver, and X): a dataset (or the cells an SQL expression
** selects, the genes a file lists, the obs columns named) written as an h5ad
** file in anndata's on-disk format (encoding 0.1.0/0.2.0, as anndata 0.8
** writes it).  The obs and var frames are export_frames.c's, the genes table
** export_genes.c's, the HDF5 elements export_h5.c's.
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
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dc_codec.h"
#include "dc_format.h"
#include "dc_seal.h"

#include "export_int.h"

#define EX_CONV ((uint64_t)1 << 16)  /* X values converted per write */

/* ------------------------------------------------------------ export: X */
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
  const cv_dtype *dt;   /* X's output dtype */
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

/* The m counts v in dtype d, into out (float16: its bits).  Returns 1 if d does not hold one
** (cv_dtype_holds: dc_meta x_dtype is wrong), else 0. */
static int x_convert(const cv_dtype *d, const uint32_t *v, uint64_t m, void *out) {
  const cv_dtype t = *d;   /* a copy the stores below cannot alias */
  int lost = 0;
  switch (t.code) {
#define CONV(T, V) do { T *o_ = out; for (uint64_t j = 0; j < m; j++) { o_[j] = (V); lost |= !cv_dtype_holds(&t, v[j]); } } while (0)
    case CV_INT8: CONV(int8_t, (int8_t)v[j]); break;
    case CV_INT16: CONV(int16_t, (int16_t)v[j]); break;
    case CV_INT32: CONV(int32_t, (int32_t)v[j]); break;
    case CV_INT64: CONV(int64_t, v[j]); break;
    case CV_UINT8: CONV(uint8_t, (uint8_t)v[j]); break;
    case CV_UINT16: CONV(uint16_t, (uint16_t)v[j]); break;
    case CV_UINT32: CONV(uint32_t, v[j]); break;
    case CV_UINT64: CONV(uint64_t, v[j]); break;
    case CV_FLOAT16: CONV(uint16_t, cv_dtype_half(v[j])); break;
    case CV_FLOAT32: CONV(float, (float)v[j]); break;
    default: CONV(double, v[j]); break;
#undef CONV
  }
  return lost;
}

/* The error of a count among the m counts v of tile that X's dtype does not hold (x_convert):
** the first such count, the dtype, and for a float the counts it holds. */
static int x_lost(const xstate *x, int64_t tile, const uint32_t *v, uint64_t m, cv_err *e) {
  uint64_t j = 0;
  while (j + 1 < m && cv_dtype_holds(x->dt, v[j])) j++;
  char why[160] = "";
  if (x->dt->is_float)
    snprintf(why, sizeof why, " exactly (it holds every count up to %llu, above that only some, none above %g)",
             1ULL << (x->dt->mant + 1), x->dt->max);
  return cv_fail(e, "%s: tile %lld holds a count of %u, which X's dtype %s does not hold%s; dc_meta x_dtype is wrong, "
                 "so nothing is exported", x->o->path, (long long)tile, v[j], x->dt->name, why);
}

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
        cv_sort_row((uint32_t *)x->ix + w0, (uint32_t *)x->vx + w0, n, (uint32_t)x->xg->n_out, x->ka, x->kb);
      }
      x->indptr[out_row + i + 1] = (int64_t)(x->nnz_out + w);
    }
    int bad = ex_dset_put(x->d_ind, H5T_NATIVE_INT32, x->ix, x->nnz_out, w, 1);
    for (uint64_t k = 0; k < w && !bad; k += EX_CONV) { /* values: converted here, a slice at a time */
      uint64_t m = w - k < EX_CONV ? w - k : EX_CONV;
      const uint32_t *v = (const uint32_t *)x->vx + k;
      if (x_convert(x->dt, v, m, x->cbuf)) return x_lost(x, tile, v, m, e);
      bad = ex_dset_put(x->d_data, x->mt_data, x->cbuf, x->nnz_out + k, m, 1);
    }
    if (bad) return cv_fail(e, "%s: writing X (tile %lld) failed (disk full?)", x->o->out, (long long)tile);
    x->nnz_out += w;
  }
  if (i != k_sel) return cv_fail(e, "%s: tile %lld: its chunks do not cover its cells (corrupt; run verify)", path, (long long)tile);
  return 0;
}

static int write_x(xstate *x, hid_t root, const char *dtype, cv_err *e) {
  hid_t g = ex_group(root, "X", "csr_matrix", "0.1.0");
  sqlite3_stmt *s = NULL;
  int rc = -1;
  int64_t shape[2] = {x->n_sel, x->xg->n_out};
  x->dt = cv_dtype_find(dtype);
  x->d_data = x->d_ind = -1;
  if (!x->dt) { cv_fail(e, "internal: dtype %s", dtype); goto done; }
  hid_t ft = cv_dtype_file(x->dt);
  x->mt_data = cv_dtype_mem(x->dt);
  if (ft < 0 || x->mt_data < 0) { cv_fail(e, "%s: no HDF5 type for X's dtype %s", x->o->out, x->dt->name); goto done; }
  x->cbuf = malloc(EX_CONV * 8);
  if (!x->cbuf) { cv_fail(e, "out of memory"); goto done; }
  if (g < 0 || ex_attr_i64s(g, "shape", shape, 2)) { cv_fail(e, "%s: writing X", x->o->out); goto done; }
  x->d_data = ex_dset(g, "data", ft, 0, 1, NULL, NULL);
  x->d_ind = ex_dset(g, "indices", H5T_STD_I32LE, 0, 1, NULL, NULL);
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
    } else if (fc + nc > x->n_sel) { /* indptr holds n_sel + 1 entries */
      cv_fail(e, "%s: tile %lld holds cells %lld..%lld, but dc_meta.n_cells says %lld (corrupt dataset; run verify)",
              x->o->path, (long long)tile, (long long)fc, (long long)(fc + nc - 1), (long long)x->n_sel);
      goto done;
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
    hid_t d = ex_dset(g, "indptr", wide ? H5T_STD_I64LE : H5T_STD_I32LE, (hsize_t)x->n_sel + 1, 0, NULL, NULL);
    int bad = d < 0;
    if (!bad && !wide) { /* narrow in place: entry i is read before it is written, and i*4 <= i*8 */
      for (int64_t i = 0; i <= x->n_sel; i++) {
        int32_t v = (int32_t)x->indptr[i];
        memcpy((char *)x->indptr + 4 * i, &v, 4);
      }
      bad = ex_dset_put(d, H5T_NATIVE_INT32, x->indptr, 0, (hsize_t)x->n_sel + 1, 0);
    } else if (!bad) {
      bad = ex_dset_put(d, H5T_NATIVE_INT64, x->indptr, 0, (hsize_t)x->n_sel + 1, 0);
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
    hid_t g = ex_group(root, names[i], "dict", "0.1.0");
    if (g < 0) return -1;
    H5Gclose(g);
  }
  return 0;
}

/* `PREFIX<pid>` files in dir (dsw_temp_prefix of the output) that a killed export left: removed
** when their process is gone and nobody holds HDF5's lock on them (HDF5 flock()s a file it
** writes, unless HDF5_USE_FILE_LOCKING=FALSE; the process check covers that case). */
static void remove_stale_exports(const char *dir, const char *prefix) {
  size_t pl = strlen(prefix);
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    const char *nm = de->d_name, *p = nm + pl;
    if (strncmp(nm, prefix, pl) != 0 || !*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > 9) continue;
    pid_t pid = (pid_t)atol(p);
    if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    char *path = sqlite3_mprintf("%s/%s", dir, nm);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(path) == 0)
      fprintf(stderr, "deltacells: note: removed %s, left by an export that was killed\n", path);
    if (fd >= 0) close(fd);
    sqlite3_free(path);
  }
  if (d) closedir(d);
}

/* Counts the HDF5 calls that fail while the output is written.  Not every failure reaches a
** return value this code sees: a chunk that HDF5 keeps cached is written when its dataset is
** closed, and a full disk (or `ulimit -f`) there had let export rename a truncated file into
** place and exit 0. */
static herr_t count_h5_failure(hid_t stack, void *n) {
  (void)stack;
  ++*(int *)n;
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
  H5E_auto2_t h5_was = NULL;
  void *h5_was_data = NULL;
  int h5_failed = 0, h5_counting = 0;
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
  if (ex_gtable_load(db, o->path, &g, e)) goto done;
  if (g.orig_problem[0] && !stored) {
    cv_fail(e, "%s: %s, so the input's gene order is unknown (deltacells verify checks the dataset; --order stored "
            "exports the stored order)", o->path, g.orig_problem);
    goto done;
  }
  orig_order = ex_genes_in_original_order(&g);
  xg.col = malloc(((size_t)g.n + 1) * sizeof *xg.col);
  if (!orig_order || !xg.col) { cv_fail(e, "out of memory"); goto done; }
  if (o->genes_file) {
    if (ex_genes_from_file(&g, orig_order, o->genes_file, &xg, e)) goto done;
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
  if (ex_obs_columns(db, o->path, o->obs, &cols, &nc, e)) goto done;
  dtype = ex_meta(db, "x_dtype");
  if (!dtype || !cv_dtype_find(dtype)) { /* not recorded (older dataset): int32, or int64 if a count may not fit */
    int64_t mx = 0;
    for (int64_t i = 0; g.c_total >= 0 && i < g.n; i++)
      if (g.cols[g.c_total].i[i] > mx) mx = g.cols[g.c_total].i[i];
    if (dtype)   /* a name of a later version, or damage (verify reports it): said, not silent */
      fprintf(stderr, "deltacells: note: %s: dc_meta.x_dtype '%s' is not a dtype this version knows; X is written as %s\n",
              o->path, dtype, mx > INT32_MAX ? "int64" : "int32");
    free(dtype);
    dtype = strdup(mx > INT32_MAX ? "int64" : "int32");
    if (!dtype) { cv_fail(e, "out of memory"); goto done; }
  }
  /* the output: a temporary file beside it, renamed into place (one a killed export left is removed first) */
  {
    char *dir = NULL, *prefix = NULL;
    if (dsw_temp_prefix(o->out, &dir, &prefix)) { cv_fail(e, "out of memory"); goto done; }
    remove_stale_exports(dir, prefix);
    tmp = sqlite3_mprintf("%s/%s%d", dir, prefix, (int)getpid());
    free(dir);
    free(prefix);
    if (!tmp) { cv_fail(e, "out of memory"); goto done; }
  }
  H5Eget_auto2(H5E_DEFAULT, &h5_was, &h5_was_data);
  H5Eset_auto2(H5E_DEFAULT, count_h5_failure, &h5_failed);
  h5_counting = 1;
  f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) { cv_fail(e, "%s: cannot create %s: %s", o->out, tmp, strerror(errno)); goto done; }
  bt = ex_booltype();
  if (ex_enc(f, "anndata", "0.1.0")) { cv_fail(e, "%s: writing", o->out); goto done; }
  x.indptr = malloc(((size_t)n_sel + 1) * sizeof *x.indptr);
  if (!x.indptr) { cv_fail(e, "out of memory"); goto done; }
  x.db = db;
  x.o = o;
  char *idt = ex_meta(db, "dataset_id");
  x.sealed = version >= 3 && idt && dc_seal_parse_id(idt, strlen(idt), &x.dataset_id) == 0;
  int has_id = idt != NULL;
  free(idt);
  if (version >= 3 && !x.sealed) { cv_fail(e, "%s: format version 3 without a well-formed dataset_id (corrupt)", o->path); goto done; }
  if (version < 3 && has_id) { cv_fail(e, "%s: format version %lld with a dataset_id, which only version 3 and later have "
                                    "(the version was changed; corrupt)", o->path, (long long)version); goto done; }
  x.n_genes = g.n;
  x.xg = &xg;
  x.sel = sel;
  x.all = o->where == NULL;
  x.n_sel = n_sel;
  if (write_x(&x, f, dtype, e) || ex_write_obs(db, o, f, cols, nc, n_sel, bt, e) || ex_write_var(db, o, f, &g, &xg, bt, e))
    goto done;
  if (empty_groups(f)) { cv_fail(e, "%s: writing", o->out); goto done; }
  if (cv_check_interrupt(e)) goto done;
  herr_t cr = H5Fclose(f);
  f = -1;
  if (cr < 0 || h5_failed) { cv_fail(e, "%s: writing %s failed (disk full?)", o->out, tmp); goto done; }
  if (dsw_fsync_path(tmp, 0)) { cv_fail(e, "%s: writing %s failed: %s", o->out, tmp, strerror(errno)); goto done; }
  if (rename(tmp, o->out) != 0) { cv_fail(e, "%s: cannot rename %s into place: %s", o->out, tmp, strerror(errno)); goto done; }
  if (!o->quiet)
    printf("%s: %lld cells x %lld genes, %llu nonzeros (X %s, genes in %s order), %d obs columns; %.1f s\n",
           o->out, (long long)n_sel, (long long)xg.n_out, (unsigned long long)x.nnz_out, dtype,
           o->genes_file ? "--genes file" : stored ? "stored" : g.has_orig ? "the input's original" : "stored (no original recorded)",
           nc, cv_now() - t0);
  rc = 0;
done:
  if (f >= 0) H5Fclose(f);
  if (bt >= 0) H5Tclose(bt);
  if (h5_counting) H5Eset_auto2(H5E_DEFAULT, h5_was, h5_was_data);
  if (rc && tmp) unlink(tmp);
  sqlite3_free(tmp);
  for (int i = 0; i < nc; i++) ex_xcol_free(&cols[i]);
  free(cols);
  free(x.indptr); free(x.blob); free(x.ip); free(x.ix); free(x.vx); free(x.ka); free(x.kb); free(x.cells); free(x.chunks); free(x.cbuf);
  free(x.h);
  if (x.dec) dc_decoder_free(x.dec);
  free(sel);
  free(dtype);
  free(orig_order);
  free(xg.ids);
  free(xg.col);
  ex_gtable_free(&g);
  sqlite3_close(db);
  return rc;
}
