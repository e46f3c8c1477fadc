/*
** h5ad.c — opening and closing an h5ad input (see h5ad.h): the file, its frames, the count
** matrix (dense, CSR or CSC) and the checks of its shape and types.
*/
#include "h5ad.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5ad_hdf5.h"

/* ------------------------------------------------------------ open */
static int open_x_dset(h5file *f, hid_t g, const char *name, hid_t *out, cv_err *e) {
  /* HDF5's default chunk cache (1 MiB): X is read in slabs of CV_SLAB values,
  ** so a chunk is read whole, mostly straight into the slab.  A 16 MiB cache
  ** (w0 = 1) allocated and freed a buffer per chunk instead, and every one of
  ** them was fresh memory: 0.26 against 0.37 s and 8 K against 14 K page faults
  ** for an append of 3,000 x 8,000 (bench_append's files). */
  *out = h5ad_exists(g, name) ? H5Dopen2(g, name, H5P_DEFAULT) : -1;
  if (*out < 0) {
    H5Eclear2(H5E_DEFAULT);
    return cv_fail(e, "%s: %s: sparse matrix without '%s'", f->path, f->mpath, name);
  }
  return 0;
}

/* The names of group path's members (sorted by name); 0 if none or absent. */
static int group_members(hid_t fid, const char *path, char ***out) {
  *out = NULL;
  if (!h5ad_exists(fid, path)) return 0;
  hid_t g = H5Gopen2(fid, path, H5P_DEFAULT);
  H5G_info_t gi;
  int n = 0;
  if (g < 0 || H5Gget_info(g, &gi) < 0 || !(*out = calloc(gi.nlinks + 1, sizeof **out))) {
    if (g >= 0) H5Gclose(g);
    H5Eclear2(H5E_DEFAULT);
    return 0;
  }
  for (hsize_t i = 0; i < gi.nlinks; i++) {
    char nm[512];
    if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nm, sizeof nm, H5P_DEFAULT) < 0) continue;
    if (((*out)[n] = strdup(nm))) n++;
  }
  H5Gclose(g);
  H5Eclear2(H5E_DEFAULT);
  return n;
}

static int check_num_type(h5file *f, hid_t ds, const char *what, int allow_float, int *is_float,
                          cv_err *e) {
  hid_t t = H5Dget_type(ds);
  H5T_class_t c = H5Tget_class(t);
  H5Tclose(t);
  if (c == H5T_INTEGER) { if (is_float) *is_float = 0; return 0; }
  if (c == H5T_FLOAT && allow_float) { if (is_float) *is_float = 1; return 0; }
  return cv_fail(e, "%s: %s/%s: unsupported data type (need %s)", f->path, f->mpath, what,
                 allow_float ? "integers or floats" : "integers");
}

/* Opens data/indices/indptr of sparse group x (f->fmt MAT_CSR or MAT_CSC;
** shape: rows x columns as stored) and checks their types and lengths. */
int h5ad_sparse_open(h5file *f, hid_t x, const int64_t shape[2], cv_err *e) {
  if (open_x_dset(f, x, "data", &f->data, e) || open_x_dset(f, x, "indices", &f->indices, e) ||
      open_x_dset(f, x, "indptr", &f->indptr, e)) {
    return -1;
  }
  if (check_num_type(f, f->data, "data", 1, &f->data_float, e) ||
      check_num_type(f, f->indices, "indices", 0, NULL, e) ||
      check_num_type(f, f->indptr, "indptr", 0, NULL, e))
    return -1;
  int64_t nd = h5ad_ds_len(f->data), ni = h5ad_ds_len(f->indices), np = h5ad_ds_len(f->indptr);
  if (nd < 0 || ni < 0 || np < 0) return cv_fail(e, "%s: %s: data/indices/indptr must be 1-D", f->path, f->mpath);
  if (nd != ni)
    return cv_fail(e, "%s: %s: data has %lld values but indices %lld", f->path, f->mpath, (long long)nd, (long long)ni);
  int64_t major = f->fmt == MAT_CSR ? shape[0] : shape[1];
  if (np != major + 1)
    return cv_fail(e, "%s: %s: indptr has %lld entries, but shape %lld x %lld needs %lld", f->path,
                   f->mpath, (long long)np, (long long)shape[0], (long long)shape[1], (long long)(major + 1));
  int64_t ends[2];
  if (np > 0) {
    if (h5ad_ds_read(f->indptr, H5T_NATIVE_INT64, 0, 1, 0, &ends[0]) < 0 ||
        h5ad_ds_read(f->indptr, H5T_NATIVE_INT64, (uint64_t)np - 1, 1, 0, &ends[1]) < 0)
      return h5ad_fail(e, f, "indptr");
    if (ends[0] != 0 || ends[1] != nd)
      return cv_fail(e, "%s: %s: indptr runs from %lld to %lld, but there are %lld values", f->path,
                     f->mpath, (long long)ends[0], (long long)ends[1], (long long)nd);
  }
  f->nnz = (uint64_t)nd;
  return 0;
}

int h5ad_no_layer(hid_t fid, const char *path, const char *layer, cv_err *e) {
  char **nm = NULL, list[1024], hint[300] = "";
  int n = group_members(fid, "layers", &nm);
  const char *best = cv_closest(layer, (const char *const *)nm, n);
  cv_list_names(list, sizeof list, (const char *const *)nm, n);
  if (best) snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
  cv_fail(e, "%s: no layer '%s' (the file's layers: %s)%s", path, layer, list, hint);
  h5ad_free_strs(nm, n);
  return -1;
}

int h5ad_open(const char *path, const char *layer, int raw, const char *gene_key, h5file *f,
              cv_err *e) {
  hid_t x = -1;
  memset(f, 0, sizeof *f);
  f->fid = f->data = f->indices = f->indptr = -1;
  f->obs.index.dset = f->obs.index.mask = f->var.index.dset = f->var.index.mask = -1;
  f->spool_fd = -1;
  f->cached_b = -1;
  f->kind = "h5ad";
  if (!(f->path = strdup(path))) return cv_fail(e, "out of memory");
  struct stat st;
  if (stat(path, &st) != 0) return cv_fail(e, "%s: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) return cv_fail(e, "%s: is a directory", path);
  if (H5Fis_hdf5(path) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return cv_fail(e, "%s: not an HDF5 file (an h5ad file is HDF5)", path);
  }
  f->fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f->fid < 0) return h5ad_fail(e, f, "cannot open (truncated or damaged file?)");

  if (layer) snprintf(f->mpath, sizeof f->mpath, "layers/%s", layer);
  else snprintf(f->mpath, sizeof f->mpath, "%s", raw ? "raw/X" : "X");
  if (h5ad_frame_open(f, "obs", &f->obs, e)) return -1;
  if (raw && !h5ad_exists(f->fid, "raw"))
    return cv_fail(e, "%s: --raw: the file has no raw counts (no 'raw' group); counts are in X%s", path,
                   h5ad_exists(f->fid, "layers") ? " or a layer (--layer NAME)" : "");
  if (raw && !h5ad_exists(f->fid, "raw/var"))
    return cv_fail(e, "%s: --raw: the file's 'raw' group has no 'var' (damaged raw?)", path);
  if (h5ad_frame_open(f, raw ? "raw/var" : "var", &f->var, e)) return -1;
  f->n_obs = f->obs.n_rows;
  f->n_vars = f->var.n_rows;
  if (f->n_obs >= UINT32_MAX) return cv_fail(e, "%s: %llu cells: at most 2^32-2 per file", path, (unsigned long long)f->n_obs);
  if (f->n_vars >= INT32_MAX) return cv_fail(e, "%s: %llu genes: too many", path, (unsigned long long)f->n_vars);

  H5I_type_t t = h5ad_open_obj(f->fid, f->mpath, &x);
  if (t == H5I_BADID) {
    if (layer && !h5ad_exists(f->fid, f->mpath)) return h5ad_no_layer(f->fid, path, layer, e);
    return cv_fail(e, "%s: no %s: the file has no count matrix there%s", path, f->mpath,
                   raw || layer ? "" : " (try --layer NAME or --raw)");
  }
  int64_t shape[2] = {-1, -1};
  if (t == H5I_DATASET) {
    f->fmt = MAT_DENSE;
    f->data = x;
    x = -1;
    hid_t sp = H5Dget_space(f->data);
    hsize_t d[2];
    int nd = H5Sget_simple_extent_ndims(sp);
    if (nd != 2) { H5Sclose(sp); return cv_fail(e, "%s: %s: a dense matrix must be 2-D, not %d-D", path, f->mpath, nd); }
    H5Sget_simple_extent_dims(sp, d, NULL);
    H5Sclose(sp);
    shape[0] = (int64_t)d[0];
    shape[1] = (int64_t)d[1];
    if (check_num_type(f, f->data, "(data)", 1, &f->data_float, e)) return -1;
  } else {
    char *enc = NULL, *old = NULL;
    const char *bad = h5ad_attr_str(x, "encoding-type", &enc) ? "encoding-type"
                      : h5ad_attr_str(x, "h5sparse_format", &old) ? "h5sparse_format" : NULL;
    if (bad) {
      free(enc);
      h5ad_close_id(&x);
      return cv_fail(e, "%s: %s: its `%s` attribute holds a NUL byte before its end (text cannot: the rest "
                     "would be lost)", path, f->mpath, bad);
    }
    if (enc && strcmp(enc, "csr_matrix") == 0) f->fmt = MAT_CSR;
    else if (enc && strcmp(enc, "csc_matrix") == 0) f->fmt = MAT_CSC;
    else if (!enc && old && strcmp(old, "csr") == 0) f->fmt = MAT_CSR;
    else if (!enc && old && strcmp(old, "csc") == 0) f->fmt = MAT_CSC;
    int n = h5ad_attr_ints(x, "shape", shape, 2);
    if (n < 0) n = h5ad_attr_ints(x, "h5sparse_shape", shape, 2);
    free(old);
    if (!f->fmt) {
      cv_fail(e, "%s: %s: a group that is not a sparse matrix (encoding-type '%s')", path, f->mpath,
              enc ? enc : "none");
      free(enc);
      h5ad_close_id(&x);
      return -1;
    }
    free(enc);
    if (n != 2) { h5ad_close_id(&x); return cv_fail(e, "%s: %s: no valid `shape` attribute", path, f->mpath); }
    int r = h5ad_sparse_open(f, x, shape, e);
    h5ad_close_id(&x);
    if (r) return -1;
  }
  if (shape[0] != (int64_t)f->n_obs || shape[1] != (int64_t)f->n_vars)
    return cv_fail(e, "%s: %s has shape %lld x %lld, but obs has %llu rows and %s has %llu", path,
                   f->mpath, (long long)shape[0], (long long)shape[1], (unsigned long long)f->n_obs,
                   f->var.path, (unsigned long long)f->n_vars);

  return h5ad_gene_names(f, gene_key, e);
}
void h5ad_close(h5file *f) {
  if (f->var_names) for (uint64_t i = 0; i < f->n_vars; i++) free(f->var_names[i]);
  free(f->var_names);
  h5ad_frame_free(&f->obs);
  h5ad_frame_free(&f->var);
  h5ad_close_id(&f->data);
  h5ad_close_id(&f->indices);
  h5ad_close_id(&f->indptr);
  h5ad_close_id(&f->fid);
  if (f->spool_fd >= 0) close(f->spool_fd);
  for (size_t b = 0; b < f->n_buckets; b++) {
    free(f->buckets[b].runs);
    free(f->buckets[b].buf);
  }
  free(f->buckets);
  free(f->cached);
  free(f->sind);
  free(f->sval);
  free(f->rowkeys);
  free(f->stamp);
  free(f->label);
  if (f->ext && f->ext_free) f->ext_free(f->ext);
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fid = f->data = f->indices = f->indptr = -1;
  f->spool_fd = -1;
}
