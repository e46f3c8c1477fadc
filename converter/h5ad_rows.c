/*
** h5ad_rows.c — reading the count matrix by rows (see h5ad.h): CSR and dense slabs, values
** checked, and CSC or unordered entries transposed through the spool file.
*/
#include "h5ad.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5ad_hdf5.h"

/* ------------------------------------------------------------ matrix rows */
void rowbuf_clear(rowbuf *rb) {
  rb->n_rows = 0;
  if (rb->indptr) rb->indptr[0] = 0;
}
void rowbuf_free(rowbuf *rb) {
  free(rb->indptr);
  free(rb->indices);
  free(rb->data);
  memset(rb, 0, sizeof *rb);
}

static int rb_reserve(rowbuf *rb, uint64_t more_rows, uint64_t more_nnz, cv_err *e) {
  if (cv_grow((void **)&rb->indptr, &rb->cap_rows, rb->n_rows + more_rows + 1, sizeof *rb->indptr, e))
    return -1;
  if (rb->n_rows == 0) rb->indptr[0] = 0;
  uint64_t nnz = rb->indptr[rb->n_rows];
  size_t c2 = rb->cap_nnz;
  if (cv_grow((void **)&rb->indices, &c2, nnz + more_nnz, sizeof *rb->indices, e)) return -1;
  c2 = rb->cap_nnz;
  if (cv_grow((void **)&rb->data, &c2, nnz + more_nnz, sizeof *rb->data, e)) return -1;
  rb->cap_nnz = c2;
  return 0;
}

/* A count value: validated, 0 if it is to be dropped.  v is printed exactly where a double
** holds it (an integer below 2^53), else with every digit a double has (%g had printed
** -4294967295 as -4.29497e+09, %.9g 3.0000000000000004 as 3). */
static int bad_value(h5file *f, uint64_t row, uint64_t col, double v, cv_err *e) {
  char cell[300], num[40];
  h5ad_cell_name(f, row, cell, sizeof cell);
  if (v == floor(v) && fabs(v) < 9007199254740992.0) snprintf(num, sizeof num, "%.0f", v);
  else snprintf(num, sizeof num, "%.17g", v);
  const char *gene = f->var_names && col < f->n_vars ? f->var_names[col] : "?";
  if (v < 0)
    return cv_fail(e, "%s: %s: cell %s, gene '%s' (column %llu): negative value %s; counts must be "
                   "non-negative integers", f->path, f->mpath, cell, gene, (unsigned long long)col, num);
  if (v > 4294967295.0)
    return cv_fail(e, "%s: %s: cell %s, gene '%s' (column %llu): value %s exceeds 2^32-1", f->path,
                   f->mpath, cell, gene, (unsigned long long)col, num);
  return cv_fail(e, "%s: %s: cell %s, gene '%s' (column %llu): value %s is not an integer count; "
                 "%s holds normalised data? convert raw counts with --layer counts or --raw",
                 f->path, f->mpath, cell, gene, (unsigned long long)col, num, f->mpath);
}

static inline int val_ok_f(double v) { return v >= 0 && v <= 4294967295.0 && v == floor(v); }

/* Slabs of X's indices and data, read in a native type chosen so that HDF5
** converts nothing for the usual int32/float32 files (its conversions are
** slow): indices as int32 or int64, values as int32, uint32, int64, uint64,
** float or double. */
enum { T_I32 = 1, T_U32, T_I64, T_U64, T_F32, T_F64 };

static int pick_type(hid_t ds, int is_index) {
  hid_t t = H5Dget_type(ds);
  H5T_class_t c = H5Tget_class(t);
  size_t sz = H5Tget_size(t);
  H5T_sign_t sg = H5Tget_sign(t);
  H5Tclose(t);
  if (c == H5T_FLOAT) return sz <= 4 ? T_F32 : T_F64;
  if (is_index) return (sz < 4 || (sz == 4 && sg == H5T_SGN_2)) ? T_I32 : T_I64;
  if (sz <= 4) return sg == H5T_SGN_2 ? T_I32 : T_U32;
  return sg == H5T_SGN_2 ? T_I64 : T_U64;
}

static hid_t mem_type(int t) {
  switch (t) {
    case T_I32: return H5T_NATIVE_INT32;
    case T_U32: return H5T_NATIVE_UINT32;
    case T_I64: return H5T_NATIVE_INT64;
    case T_U64: return H5T_NATIVE_UINT64;
    case T_F32: return H5T_NATIVE_FLOAT;
    default: return H5T_NATIVE_DOUBLE;
  }
}

/* Loads indices/data [lo, hi) into the slab buffers. */
static int slab_load(h5file *f, uint64_t lo, uint64_t hi, cv_err *e) {
  size_t n = (size_t)(hi - lo);
  if (!f->ity) {
    f->ity = pick_type(f->indices, 1);
    f->vty = pick_type(f->data, 0);
  }
  if (n > f->scap) {
    size_t c = n;   /* what this read needs: the CSR windows are small (CV_ROW_SLAB), the CSC ones CV_SLAB */
    free(f->sind);
    free(f->sval);
    f->sind = malloc(c * 8);
    f->sval = malloc(c * 8);
    if (!f->sind || !f->sval) { f->scap = 0; return cv_fail(e, "out of memory (X slab of %zu values)", c); }
    f->scap = c;
    cv_advise_huge(f->sind, c * 8);
    cv_advise_huge(f->sval, c * 8);
  }
  if (n == 0) return 0;
  if (h5ad_ds_read(f->indices, mem_type(f->ity), lo, n, 0, f->sind) < 0) return h5ad_fail(e, f, "X indices");
  if (h5ad_ds_read(f->data, mem_type(f->vty), lo, n, 0, f->sval) < 0) return h5ad_fail(e, f, "X data");
  return 0;
}

static inline int64_t slab_idx(int ity, const void *sind, size_t k) {
  return ity == T_I32 ? (int64_t)((const int32_t *)sind)[k] : ((const int64_t *)sind)[k];
}

/* The count at k: 0 and *v set when valid, else -1 with *bad the value. */
static inline int slab_val(int vty, const void *sval, size_t k, uint32_t *v, double *bad) {
  switch (vty) {
    case T_I32: {
      int32_t x = ((const int32_t *)sval)[k];
      if (x < 0) { *bad = x; return -1; }
      *v = (uint32_t)x;
      return 0;
    }
    case T_U32: *v = ((const uint32_t *)sval)[k]; return 0;
    case T_I64: {
      int64_t x = ((const int64_t *)sval)[k];
      if (x < 0 || x > (int64_t)UINT32_MAX) { *bad = (double)x; return -1; }
      *v = (uint32_t)x;
      return 0;
    }
    case T_U64: {
      uint64_t x = ((const uint64_t *)sval)[k];
      if (x > UINT32_MAX) { *bad = (double)x; return -1; }
      *v = (uint32_t)x;
      return 0;
    }
    case T_F32: {
      float x = ((const float *)sval)[k];
      if (!(x >= 0 && x < 4294967296.0f && x == floorf(x))) { *bad = x; return -1; }
      *v = (uint32_t)x;
      return 0;
    }
    default: {
      double x = ((const double *)sval)[k];
      if (!val_ok_f(x)) { *bad = x; return -1; }
      *v = (uint32_t)x;
      return 0;
    }
  }
}

/* One row: slab entries [ka, kb) appended at out; returns the new out, or
** UINT64_MAX with *bad_k (and *bad, for a bad value) at the first fault.
** Types are parameters, so the compiler hoists the dispatch out of the loop. */
static inline uint64_t csr_row_t(int ity, const void *sind, int vty, const void *sval, size_t ka, size_t kb,
                                 uint64_t n_vars, const uint32_t *gmap, uint32_t *restrict oind,
                                 uint32_t *restrict oval, uint64_t out, size_t *bad_k, double *bad) {
  int64_t prev = -1;
  for (size_t k = ka; k < kb; k++) {
    int64_t g = slab_idx(ity, sind, k);
    uint32_t v;
    if (g <= prev || (uint64_t)g >= n_vars || slab_val(vty, sval, k, &v, bad)) {
      *bad_k = k;
      return UINT64_MAX;
    }
    prev = g;
    if (!v) continue;
    oind[out] = gmap ? gmap[g] : (uint32_t)g;
    oval[out] = v;
    out++;
  }
  return out;
}

static uint64_t csr_row(int ity, const void *sind, int vty, const void *sval, size_t ka, size_t kb,
                        uint64_t n_vars, const uint32_t *gmap, uint32_t *oind, uint32_t *oval, uint64_t out,
                        size_t *bad_k, double *bad) {
  if (ity == T_I32 && vty == T_I32)
    return csr_row_t(T_I32, sind, T_I32, sval, ka, kb, n_vars, gmap, oind, oval, out, bad_k, bad);
  if (ity == T_I32 && vty == T_F32)
    return csr_row_t(T_I32, sind, T_F32, sval, ka, kb, n_vars, gmap, oind, oval, out, bad_k, bad);
  return csr_row_t(ity, sind, vty, sval, ka, kb, n_vars, gmap, oind, oval, out, bad_k, bad);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The message of a fault in row `row` at gene index g: out of range, a gene
** given twice (dup), or a bad value. Returns -1. */
static int row_fault(h5file *f, uint64_t row, int64_t g, int dup, double bad, cv_err *e) {
  char cell[300];
  h5ad_cell_name(f, row, cell, sizeof cell);
  if (g < 0 || (uint64_t)g >= f->n_vars)
    return cv_fail(e, "%s: %s/indices: cell %s has gene index %lld, out of range 0..%llu", f->path, f->mpath, cell,
                   (long long)g, (unsigned long long)(f->n_vars ? f->n_vars - 1 : 0));
  if (dup)
    return cv_fail(e, "%s: %s/indices: cell %s: gene '%s' (column %lld) appears twice; sum the duplicates "
                   "first (scipy: X.sum_duplicates())", f->path, f->mpath, cell, f->var_names[g], (long long)g);
  return bad_value(f, row, (uint64_t)g, bad, e);
}

/* A row whose gene indices are not in increasing order (slab entries [ka, kb),
** as scipy allows): its entries sorted by gene and appended at out; *out2 gets
** the new end.  A gene given twice is an error naming the cell and the gene. */
static int csr_row_sorted(h5file *f, uint64_t row, size_t ka, size_t kb, const uint32_t *gmap, uint32_t *oind,
                          uint32_t *oval, uint64_t out, uint64_t *out2, cv_err *e) {
  size_t n = kb - ka;
  if (cv_grow((void **)&f->rowkeys, &f->rowkeys_cap, n + 1, sizeof *f->rowkeys, e)) return -1;
  for (size_t k = ka; k < kb; k++) {
    int64_t g = slab_idx(f->ity, f->sind, k);
    if (g < 0 || (uint64_t)g >= f->n_vars) return row_fault(f, row, g, 0, 0, e);
    f->rowkeys[k - ka] = (uint64_t)g << 32 | (uint64_t)(k - ka);
  }
  qsort(f->rowkeys, n, sizeof *f->rowkeys, cmp_u64);
  for (size_t i = 0; i < n; i++) {
    int64_t g = (int64_t)(f->rowkeys[i] >> 32);
    size_t k = ka + (size_t)(uint32_t)f->rowkeys[i];
    if (i > 0 && (uint64_t)g == f->rowkeys[i - 1] >> 32) return row_fault(f, row, g, 1, 0, e);
    uint32_t v;
    double bad = 0;
    if (slab_val(f->vty, f->sval, k, &v, &bad)) return row_fault(f, row, g, 0, bad, e);
    if (!v) continue;
    oind[out] = gmap ? gmap[g] : (uint32_t)g;
    oval[out] = v;
    out++;
  }
  *out2 = out;
  return 0;
}

/* Reads CSR rows [r0, r1). */
static int csr_rows(h5file *f, uint64_t r0, uint64_t r1, const uint32_t *gmap, rowbuf *rb, cv_err *e) {
  uint64_t nr = r1 - r0;
  int64_t *ptr = malloc((nr + 1) * sizeof *ptr);
  int rc = -1;
  if (!ptr) return cv_fail(e, "out of memory");
  if (h5ad_ds_read(f->indptr, H5T_NATIVE_INT64, r0, nr + 1, 0, ptr) < 0) { h5ad_fail(e, f, "X indptr"); goto done; }
  for (uint64_t i = 0; i < nr; i++)
    if (ptr[i + 1] < ptr[i] || ptr[i] < 0 || (uint64_t)ptr[i + 1] > f->nnz) {
      cv_fail(e, "%s: %s/indptr: entries %llu..%llu (%lld, %lld) are not non-decreasing within "
              "0..%llu", f->path, f->mpath, (unsigned long long)(r0 + i), (unsigned long long)(r0 + i + 1),
              (long long)ptr[i], (long long)ptr[i + 1], (unsigned long long)f->nnz);
      goto done;
    }
  uint64_t lo = (uint64_t)ptr[0], hi = (uint64_t)ptr[nr];
  if (rb_reserve(rb, nr, hi - lo, e)) goto done;
  uint64_t wlo = lo, whi = lo; /* window of loaded values */
  uint64_t out = rb->indptr[rb->n_rows];
  uint32_t *oind = rb->indices, *oval = rb->data;
  for (uint64_t i = 0; i < nr; i++) {
    uint64_t a = (uint64_t)ptr[i], b = (uint64_t)ptr[i + 1];
    uint64_t row = r0 + i;
    if (b > whi) { /* load [a, max(b, a + slab)) */
      wlo = a;
      whi = a + CV_ROW_SLAB < hi ? a + CV_ROW_SLAB : hi;
      if (whi < b) whi = b;
      if (slab_load(f, wlo, whi, e)) goto done;
    }
    size_t bad_k = 0;
    double bad = 0;
    uint64_t o2 = csr_row(f->ity, f->sind, f->vty, f->sval, (size_t)(a - wlo), (size_t)(b - wlo), f->n_vars, gmap,
                          oind, oval, out, &bad_k, &bad);
    if (o2 == UINT64_MAX) {
      int64_t g = slab_idx(f->ity, f->sind, bad_k), prev = bad_k > (size_t)(a - wlo) ? slab_idx(f->ity, f->sind, bad_k - 1) : -1;
      if (g >= 0 && (uint64_t)g < f->n_vars && g < prev) { /* unsorted within the row (scipy allows it): sort it */
        if (csr_row_sorted(f, row, (size_t)(a - wlo), (size_t)(b - wlo), gmap, oind, oval, out, &o2, e)) goto done;
      } else {
        row_fault(f, row, g, g == prev, bad, e);
        goto done;
      }
    }
    out = o2;
    rb->indptr[++rb->n_rows] = out;
  }
  rc = 0;
done:
  free(ptr);
  return rc;
}

/* Columns [c0, c0+nc) of a 2-D dataset of nr rows, into buf (nr x nc). */
static int ds_read_cols(hid_t ds, hid_t mt, uint64_t c0, uint64_t nc, uint64_t nr, void *buf) {
  if (nc == 0 || nr == 0) return 0;
  hid_t fs = H5Dget_space(ds), ms = -1;
  int rc = -1;
  if (fs < 0) return -1;
  hsize_t st[2] = {0, c0}, ct[2] = {nr, nc};
  if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL) >= 0 && (ms = H5Screate_simple(2, ct, NULL)) >= 0 &&
      H5Dread(ds, mt, ms, fs, H5P_DEFAULT, buf) >= 0)
    rc = 0;
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  return rc;
}

static int dense_rows(h5file *f, uint64_t r0, uint64_t r1, const uint32_t *gmap, rowbuf *rb, cv_err *e) {
  uint64_t g = f->n_vars;
  int tr = f->fmt == MAT_DENSE_T; /* stored genes x cells */
  uint64_t step = g ? CV_SLAB / g : r1 - r0;
  if (tr && f->stripe) step = step / f->stripe * f->stripe; /* whole chunks: each read once */
  if (tr && step < f->stripe) step = f->stripe;
  if (step < 1) step = 1;
  size_t cap = (size_t)(step * g);
  double *fv = NULL;
  int64_t *iv = NULL;
  int rc = -1;
  if (f->data_float) fv = malloc((cap ? cap : 1) * sizeof *fv);
  else iv = malloc((cap ? cap : 1) * sizeof *iv);
  if (!fv && !iv) return cv_fail(e, "out of memory");
  for (uint64_t s = r0; s < r1; s += step) {
    uint64_t n = r1 - s < step ? r1 - s : step;
    hid_t mt = fv ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
    void *buf = fv ? (void *)fv : (void *)iv;
    if (g && (tr ? ds_read_cols(f->data, mt, s, n, g, buf) : h5ad_ds_read(f->data, mt, s, n, g, buf)) < 0) {
      h5ad_fail(e, f, f->mpath);
      goto done;
    }
    if (rb_reserve(rb, n, n * g, e)) goto done;
    uint64_t out = rb->indptr[rb->n_rows];
    for (uint64_t i = 0; i < n; i++) {
      for (uint64_t j = 0; j < g; j++) {
        uint32_t v;
        uint64_t at = tr ? j * n + i : i * g + j;
        if (fv) {
          double d = fv[at];
          if (d == 0) continue;
          if (!val_ok_f(d)) { bad_value(f, s + i, j, d, e); goto done; }
          v = (uint32_t)d;
        } else {
          int64_t d = iv[at];
          if (d == 0) continue;
          if (d < 0 || d > (int64_t)UINT32_MAX) { bad_value(f, s + i, j, (double)d, e); goto done; }
          v = (uint32_t)d;
        }
        rb->indices[out] = gmap ? gmap[j] : (uint32_t)j;
        rb->data[out] = v;
        out++;
      }
      rb->indptr[++rb->n_rows] = out;
    }
  }
  rc = 0;
done:
  free(fv);
  free(iv);
  return rc;
}

/* ------------------------------------------------------------ CSC spool */
static int spool_flush(h5file *f, spool_bucket *b, cv_err *e) {
  if (!b->n_buf) return 0;
  size_t bytes = b->n_buf * 12;
  const char *p = (const char *)b->buf;
  uint64_t off = f->spool_len;
  size_t done = 0;
  while (done < bytes) {
    ssize_t w = pwrite(f->spool_fd, p + done, bytes - done, (off_t)(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return cv_fail(e, "%s: writing the CSC transpose spool: %s", f->path, w < 0 ? strerror(errno) : "short write");
    done += (size_t)w;
  }
  if (cv_grow((void **)&b->runs, &b->cap_runs, b->n_runs + 1, sizeof *b->runs, e)) return -1;
  b->runs[b->n_runs].off = off;
  b->runs[b->n_runs].n = (uint32_t)b->n_buf;
  b->n_runs++;
  f->spool_len += bytes;
  b->n_buf = 0;
  return 0;
}

static int csc_dup(h5file *f, uint64_t r, uint64_t j, cv_err *e) {
  char cell[300];
  h5ad_cell_name(f, r, cell, sizeof cell);
  return cv_fail(e, "%s: %s/indices: cell %s: gene '%s' (column %llu) appears twice; sum the duplicates first "
                 "(scipy: X.sum_duplicates())", f->path, f->mpath, cell, f->var_names[j], (unsigned long long)j);
}

int h5ad_spool_begin(h5file *f, const char *dir, uint32_t tile_cells, cv_err *e) {
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/.deltacells-spool-XXXXXX", dir);
  f->spool_fd = mkstemp(tmpl);
  if (f->spool_fd < 0) return cv_fail(e, "%s: cannot create the transpose spool in %s: %s", f->path, dir, strerror(errno));
  unlink(tmpl); /* never left behind, whatever happens */
  f->split = cv_split_make(f->n_obs, tile_cells);
  f->n_buckets = (size_t)f->split.k;
  if (!f->n_buckets) f->n_buckets = 1;
  f->buckets = calloc(f->n_buckets, sizeof *f->buckets);
  size_t per = CV_SPOOL_RAM / 12 / f->n_buckets;
  if (per < 4096) per = 4096;
  if (per > (1u << 22)) per = 1u << 22;
  f->bucket_cap = per;
  if (!f->buckets) return cv_fail(e, "out of memory");
  for (size_t b = 0; b < f->n_buckets; b++)
    if (!(f->buckets[b].buf = malloc(per * 12))) return cv_fail(e, "out of memory (transpose spool buffers)");
  return 0;
}

int h5ad_spool_put(h5file *f, uint32_t r, uint32_t j, uint32_t v, cv_err *e) {
  size_t bi = (size_t)cv_split_tile(&f->split, r);
  spool_bucket *bk = &f->buckets[bi];
  uint32_t *q = bk->buf + bk->n_buf * 3;
  q[0] = r;
  q[1] = j;
  q[2] = v;
  bk->nnz++;
  if (++bk->n_buf == f->bucket_cap && spool_flush(f, bk, e)) return -1;
  return 0;
}

int h5ad_spool_end(h5file *f, cv_err *e) {
  for (size_t b = 0; b < f->n_buckets; b++) {
    if (spool_flush(f, &f->buckets[b], e)) return -1;
    free(f->buckets[b].buf);
    f->buckets[b].buf = NULL;
  }
  return 0;
}

int h5ad_csc_spool(h5file *f, const char *dir, uint32_t tile_cells, uint64_t *total, uint64_t *ncells,
                   void (*progress)(void *, uint64_t), void *parg, cv_err *e) {
  int64_t *ptr = NULL;
  int rc = -1;
  if (h5ad_spool_begin(f, dir, tile_cells, e)) return -1;
  uint64_t ng = f->n_vars;
  ptr = malloc((ng + 1) * sizeof *ptr);
  if (!ptr) return cv_fail(e, "out of memory");
  if (h5ad_ds_read(f->indptr, H5T_NATIVE_INT64, 0, ng + 1, 0, ptr) < 0) { h5ad_fail(e, f, "X indptr"); goto done; }
  for (uint64_t j = 0; j < ng; j++)
    if (ptr[j + 1] < ptr[j] || ptr[j] < 0 || (uint64_t)ptr[j + 1] > f->nnz) {
      cv_fail(e, "%s: %s/indptr: entries %llu..%llu are not non-decreasing", f->path, f->mpath,
              (unsigned long long)j, (unsigned long long)j + 1);
      goto done;
    }
  uint64_t wlo = 0, whi = 0;
  for (uint64_t j = 0; j < ng; j++) {
    uint64_t a = (uint64_t)ptr[j], b = (uint64_t)ptr[j + 1];
    if (b > whi) {
      wlo = a;
      whi = a + CV_SLAB < f->nnz ? a + CV_SLAB : f->nnz;
      if (whi < b) whi = b;
      if (slab_load(f, wlo, whi, e)) goto done;
      if (cv_check_interrupt(e)) goto done;
      if (progress) progress(parg, wlo);
    }
    int64_t prev = -1;
    int unsorted = 0;
    for (uint64_t k = a; k < b; k++) {
      int64_t r = slab_idx(f->ity, f->sind, (size_t)(k - wlo));
      if (r < 0 || (uint64_t)r >= f->n_obs) {
        cv_fail(e, "%s: %s/indices: gene '%s' (column %llu) has cell index %lld, out of range 0..%llu",
                f->path, f->mpath, f->var_names[j], (unsigned long long)j, (long long)r,
                (unsigned long long)(f->n_obs ? f->n_obs - 1 : 0));
        goto done;
      }
      if (r == prev) {
        csc_dup(f, (uint64_t)r, j, e);
        goto done;
      }
      if (r < prev) unsorted = 1; /* scipy allows it; the spool puts cells in order anyway */
      prev = r;
      uint32_t v;
      double bad;
      if (slab_val(f->vty, f->sval, (size_t)(k - wlo), &v, &bad)) { bad_value(f, (uint64_t)r, j, bad, e); goto done; }
      if (!v) continue;
      total[j] += v;
      ncells[j]++;
      if (h5ad_spool_put(f, (uint32_t)r, (uint32_t)j, v, e)) goto done;
    }
    if (unsorted) { /* a cell given twice in this gene's column, not next to each other? */
      size_t n = (size_t)(b - a);
      if (cv_grow((void **)&f->rowkeys, &f->rowkeys_cap, n + 1, sizeof *f->rowkeys, e)) goto done;
      for (uint64_t k = a; k < b; k++) f->rowkeys[k - a] = (uint64_t)slab_idx(f->ity, f->sind, (size_t)(k - wlo));
      qsort(f->rowkeys, n, sizeof *f->rowkeys, cmp_u64);
      for (size_t i = 1; i < n; i++)
        if (f->rowkeys[i] == f->rowkeys[i - 1]) { csc_dup(f, f->rowkeys[i], j, e); goto done; }
    }
  }
  if (h5ad_spool_end(f, e)) goto done;
  rc = 0;
done:
  free(ptr);
  return rc;
}

static int csc_rows(h5file *f, uint64_t r0, uint64_t r1, const uint32_t *gmap, rowbuf *rb, cv_err *e) {
  if (f->spool_fd < 0) return cv_fail(e, "%s: internal: CSC rows read before the spool pass", f->path);
  if (r1 > r0 && r0 >= f->n_obs)
    return cv_fail(e, "%s: internal: CSC rows %llu..%llu out of range", f->path, (unsigned long long)r0,
                   (unsigned long long)r1);
  size_t bi = r1 > r0 ? (size_t)cv_split_tile(&f->split, r0) : 0;
  if (r1 > r0 && (size_t)cv_split_tile(&f->split, r1 - 1) != bi)
    return cv_fail(e, "%s: internal: CSC rows %llu..%llu span tiles", f->path, (unsigned long long)r0,
                   (unsigned long long)r1);
  spool_bucket *bk = &f->buckets[bi];
  if (f->cached_b != (int64_t)bi) {
    free(f->cached);
    f->cached = malloc((bk->nnz ? bk->nnz : 1) * 12);
    if (!f->cached) return cv_fail(e, "out of memory (CSC tile of %llu nonzeros)", (unsigned long long)bk->nnz);
    uint64_t at = 0;
    for (size_t r = 0; r < bk->n_runs; r++) {
      size_t bytes = (size_t)bk->runs[r].n * 12, got = 0;
      while (got < bytes) {
        ssize_t k = pread(f->spool_fd, (char *)(f->cached + at * 3) + got, bytes - got,
                          (off_t)(bk->runs[r].off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return cv_fail(e, "%s: reading the CSC transpose spool: %s", f->path, k < 0 ? strerror(errno) : "short read");
        got += (size_t)k;
      }
      at += bk->runs[r].n;
    }
    f->cached_b = (int64_t)bi;
    f->cached_nnz = bk->nnz;
  }
  uint64_t nr = r1 - r0;
  if (rb_reserve(rb, nr, f->cached_nnz, e)) return -1;
  uint64_t base = rb->indptr[rb->n_rows];
  uint64_t *ip = rb->indptr + rb->n_rows; /* ip[0] = base */
  for (uint64_t i = 1; i <= nr; i++) ip[i] = 0;
  const uint32_t *c = f->cached;
  for (uint64_t k = 0; k < f->cached_nnz; k++) {
    uint64_t r = c[k * 3];
    if (r >= r0 && r < r1) ip[r - r0 + 1]++;
  }
  for (uint64_t i = 1; i <= nr; i++) ip[i] += ip[i - 1];
  /* ip[i] is now the start of row i (relative ip[0] = base); scatter with cursors */
  uint64_t *cur = malloc((nr + 1) * sizeof *cur);
  if (!cur) return cv_fail(e, "out of memory");
  if (f->fmt == MAT_SPOOL && !f->stamp && !(f->stamp = calloc(f->n_vars + 1, sizeof *f->stamp))) {
    free(cur);
    return cv_fail(e, "out of memory");
  }
  for (uint64_t i = 0; i < nr; i++) cur[i] = ip[i];
  for (uint64_t k = 0; k < f->cached_nnz; k++) {
    uint64_t r = c[k * 3];
    if (r < r0 || r >= r1) continue;
    uint64_t at = cur[r - r0]++;
    rb->indices[at] = f->stamp || !gmap ? c[k * 3 + 1] : gmap[c[k * 3 + 1]];
    rb->data[at] = c[k * 3 + 2];
  }
  free(cur);
  if (f->stamp) { /* entries came in any order: a gene given twice in a cell? Then the gene map */
    for (uint64_t i = 0; i < nr; i++) {
      uint32_t mark = (uint32_t)(r0 + i + 1);
      for (uint64_t k = ip[i]; k < ip[i + 1]; k++) {
        uint32_t j = rb->indices[k];
        if (f->stamp[j] == mark) {
          char cell[300];
          h5ad_cell_name(f, r0 + i, cell, sizeof cell);
          return cv_fail(e, "%s: %s: cell %s: gene '%s' (feature %u) appears twice", f->path, f->mpath, cell,
                         f->var_names[j], j + 1);
        }
        f->stamp[j] = mark;
        if (gmap) rb->indices[k] = gmap[j];
      }
    }
  }
  (void)base;
  rb->n_rows += nr;
  return 0;
}

int h5ad_read_rows(h5file *f, uint64_t r0, uint64_t r1, const uint32_t *gmap, rowbuf *rb, cv_err *e) {
  if (r1 > f->n_obs || r0 > r1) return cv_fail(e, "%s: internal: rows %llu..%llu out of range", f->path, (unsigned long long)r0, (unsigned long long)r1);
  if (rb_reserve(rb, r1 - r0, 0, e)) return -1;
  switch (f->fmt) {
    case MAT_CSR: return csr_rows(f, r0, r1, gmap, rb, e);
    case MAT_DENSE: case MAT_DENSE_T: return dense_rows(f, r0, r1, gmap, rb, e);
    case MAT_CSC: case MAT_SPOOL: return csc_rows(f, r0, r1, gmap, rb, e);
  }
  return cv_fail(e, "%s: internal: unknown matrix format", f->path);
}
