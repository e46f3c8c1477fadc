/*
** tenx.c — 10x Genomics inputs (see tenx.h): detection, 10x HDF5, 10x
** Matrix Market directories (zlib reads .gz and plain files alike).
*/
#include "tenx.h"
#include "h5ad_hdf5.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------ helpers */
/* H5O_TYPE_GROUP / H5O_TYPE_DATASET of loc/path, or -1. */
static int h5_type(hid_t loc, const char *path) {
  if (!h5ad_exists(loc, path)) return -1;
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  if (H5Oget_info_by_name3(loc, path, &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) { H5Eclear2(H5E_DEFAULT); return -1; }
#else
  if (H5Oget_info_by_name2(loc, path, &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) { H5Eclear2(H5E_DEFAULT); return -1; }
#endif
  return (int)info.type;
}

/* Length of the 1-D dataset loc/path, or -1. */
static int64_t dset_len(hid_t loc, const char *path) {
  hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
  if (d < 0) { H5Eclear2(H5E_DEFAULT); return -1; }
  int64_t r = h5ad_ds_len(d);
  H5Dclose(d);
  return r;
}

static void init_file(h5file *f) {
  memset(f, 0, sizeof *f);
  f->fid = f->data = f->indices = f->indptr = -1;
  f->obs.index.dset = f->obs.index.mask = f->var.index.dset = f->var.index.mask = -1;
  f->spool_fd = -1;
  f->cached_b = -1;
}

/* A var column from dataset `ds` of group g, stored as `as`; absent: nothing. */
static int add_var_col(h5file *f, hid_t g, const char *gpath, const char *ds, const char *as, cv_err *e) {
  if (h5_type(g, ds) != H5O_TYPE_DATASET) return 0;
  h5col *c = &f->var.cols[f->var.n_cols];
  int r = h5ad_col_open(f, g, gpath, ds, f->n_vars, c, e);
  if (r < 0) return -1;
  if (r == 1) return 0;
  free(c->name);
  if (!(c->name = strdup(as))) return cv_fail(e, "out of memory");
  f->var.n_cols++;
  return 0;
}

/* The frames of a 10x input: obs index = dataset bc of gb; var index = dataset
** names of gv, with columns id -> gene_ids, type -> feature_types, genome ->
** genome (each NULL or absent: left out).  f->n_obs and f->n_vars must be set. */
static int tenx_frames(h5file *f, hid_t gb, const char *gbpath, const char *bc, hid_t gv, const char *gvpath,
                       const char *names, const char *id, const char *type, const char *genome, cv_err *e) {
  snprintf(f->obs.path, sizeof f->obs.path, "%s", "barcodes");
  snprintf(f->var.path, sizeof f->var.path, "%s", "features");
  f->obs.n_rows = f->n_obs;
  f->var.n_rows = f->n_vars;
  int r = h5ad_col_open(f, gb, gbpath, bc, f->n_obs, &f->obs.index, e);
  if (r == 1) return cv_fail(e, "%s: %s/%s: the barcodes have an unsupported type", f->path, gbpath, bc);
  if (r) return -1;
  r = h5ad_col_open(f, gv, gvpath, names, f->n_vars, &f->var.index, e);
  if (r == 1) return cv_fail(e, "%s: %s/%s: the gene names have an unsupported type", f->path, gvpath, names);
  if (r) return -1;
  f->var.cols = calloc(4, sizeof *f->var.cols);
  if (!f->var.cols) return cv_fail(e, "out of memory");
  for (int i = 0; i < 4; i++) f->var.cols[i].dset = f->var.cols[i].mask = -1;
  if ((id && add_var_col(f, gv, gvpath, id, "gene_ids", e)) ||
      (type && add_var_col(f, gv, gvpath, type, "feature_types", e)) ||
      (genome && add_var_col(f, gv, gvpath, genome, "genome", e)))
    return -1;
  return 0;
}

/* "Gene Expression", with any surrounding whitespace (a hand-edited features.tsv) */
static int is_gene_expression(const char *t) {
  static const char ge[] = "Gene Expression";
  while (*t == ' ' || *t == '\t') t++;
  if (strncmp(t, ge, sizeof ge - 1) != 0) return 0;
  for (t += sizeof ge - 1; *t; t++)
    if (*t != ' ' && *t != '\t') return 0;
  return 1;
}

uint64_t tenx_other_features(h5file *f, uint8_t **other, char *example, size_t n) {
  *other = NULL;
  if (example && n) example[0] = 0;
  for (int i = 0; i < f->var.n_cols; i++) {
    h5col *c = &f->var.cols[i];
    if (strcmp(c->name, "feature_types") != 0) continue;
    colbuf cb = {0};
    cv_err e;
    uint64_t cnt = 0;
    uint8_t *m = calloc(f->n_vars + 1, 1);
    if (!m) return 0;
    for (uint64_t s = 0; s < f->n_vars; s += 65536) {
      size_t k = (size_t)(f->n_vars - s < 65536 ? f->n_vars - s : 65536);
      if (h5ad_col_read(f, c, s, k, &cb, &e)) { colbuf_free(&cb); free(m); return 0; }
      for (size_t j = 0; j < k; j++) {
        const char *t = cb.kind == CVK_TEXT ? cb.text[j] : cb.kind == CVK_CATEGORY && cb.codes[j] >= 0 ? c->cats[cb.codes[j]] : NULL;
        if (t && !is_gene_expression(t)) {
          if (!cnt++ && example && n) snprintf(example, n, "%s", t);
          m[s + j] = 1;
        }
      }
    }
    colbuf_free(&cb);
    if (!cnt) { free(m); return 0; }
    *other = m;
    return cnt;
  }
  return 0;
}

/* ------------------------------------------------------------ 10x HDF5 */
static int tenx_h5_open(const char *path, hid_t fid, const char *grp, int v3, const char *gene_key, h5file *f,
                        cv_err *e) {
  init_file(f);
  f->kind = "10x h5";
  f->fid = fid;
  if (!(f->path = strdup(path))) { H5Fclose(fid); f->fid = -1; return cv_fail(e, "out of memory"); }
  snprintf(f->mpath, sizeof f->mpath, "%s", grp);
  hid_t g = H5Gopen2(fid, grp, H5P_DEFAULT), gv = -1;
  int rc = -1;
  if (g < 0) { H5Eclear2(H5E_DEFAULT); return cv_fail(e, "%s: cannot open group %s", path, grp); }
  /* shape: genes x cells */
  int64_t shape[2] = {-1, -1};
  hid_t sd = h5_type(g, "shape") == H5O_TYPE_DATASET ? H5Dopen2(g, "shape", H5P_DEFAULT) : -1;
  if (sd < 0 || dset_len(g, "shape") != 2 || H5Dread(sd, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, shape) < 0) {
    H5Eclear2(H5E_DEFAULT);
    if (sd >= 0) H5Dclose(sd);
    cv_fail(e, "%s: %s/shape: missing, or not 2 integers (genes, cells)", path, grp);
    goto done;
  }
  H5Dclose(sd);
  const char *names = v3 ? "name" : "gene_names", *ids = v3 ? "id" : "genes";
  char gvpath[300];
  snprintf(gvpath, sizeof gvpath, v3 ? "%s/features" : "%s", grp);
  gv = v3 ? H5Gopen2(g, "features", H5P_DEFAULT) : H5Gopen2(g, ".", H5P_DEFAULT);
  if (gv < 0) { H5Eclear2(H5E_DEFAULT); cv_fail(e, "%s: %s: cannot open", path, gvpath); goto done; }
  int no_names = h5_type(gv, names) != H5O_TYPE_DATASET;
  if (no_names) { /* no names: the ids name the genes (said below, once the file is found sound) */
    if (h5_type(gv, ids) != H5O_TYPE_DATASET) {
      cv_fail(e, "%s: %s has neither %s (gene names) nor %s (gene ids)", path, gvpath, names, ids);
      goto done;
    }
    names = ids;
  }
  int64_t nb = dset_len(g, "barcodes"), ng = dset_len(gv, names);
  if (nb < 0) { cv_fail(e, "%s: %s/barcodes: missing or not 1-D", path, grp); goto done; }
  if (ng < 0) { cv_fail(e, "%s: %s/%s: missing or not 1-D", path, gvpath, names); goto done; }
  if (shape[0] != ng || shape[1] != nb) {
    cv_fail(e, "%s: %s/shape is %lld genes x %lld cells, but there are %lld genes (%s/%s) and %lld barcodes", path,
            grp, (long long)shape[0], (long long)shape[1], (long long)ng, gvpath, names, (long long)nb);
    goto done;
  }
  f->n_obs = (uint64_t)nb;
  f->n_vars = (uint64_t)ng;
  if (f->n_obs >= UINT32_MAX) { cv_fail(e, "%s: %llu cells: at most 2^32-2 per file", path, (unsigned long long)f->n_obs); goto done; }
  if (f->n_vars >= INT32_MAX) { cv_fail(e, "%s: %llu genes: too many", path, (unsigned long long)f->n_vars); goto done; }
  if (tenx_frames(f, g, grp, "barcodes", gv, gvpath, names, names == ids ? NULL : ids, v3 ? "feature_type" : NULL,
                  v3 ? "genome" : NULL, e))
    goto done;
  /* CSC of genes x cells = CSR of cells x genes: indptr has cells + 1 entries */
  f->fmt = MAT_CSR;
  int64_t cs[2] = {shape[1], shape[0]};
  if (h5ad_sparse_open(f, g, cs, e)) goto done;
  if (no_names) { /* the ids are the names: no gene_ids column beside them */
    fprintf(stderr, "deltacells: note: %s: no %s/%s: %s/%s names the genes (no gene_ids column; --gene-key gene_ids "
            "keys by it too)\n", path, gvpath, v3 ? "name" : "gene_names", gvpath, ids);
    if (gene_key && !strcmp(gene_key, "gene_ids")) gene_key = NULL;
  }
  if (h5ad_gene_names(f, gene_key, e)) goto done;
  rc = 0;
done:
  if (gv >= 0) H5Gclose(gv);
  H5Gclose(g);
  return rc;
}

/* ------------------------------------------------------------ loom */
/* The members of group g that are 1-D datasets of n values (others skipped). */
static int loom_cols(h5file *f, hid_t g, const char *gpath, const char *skip, uint64_t n, h5frame *fr, cv_err *e) {
  H5G_info_t gi;
  if (H5Gget_info(g, &gi) < 0) { H5Eclear2(H5E_DEFAULT); return cv_fail(e, "%s: %s: unreadable group", f->path, gpath); }
  fr->cols = calloc(gi.nlinks + 1, sizeof *fr->cols);
  if (!fr->cols) return cv_fail(e, "out of memory");
  uint64_t skipped = 0;
  for (hsize_t i = 0; i < gi.nlinks; i++) {
    char nm[512];
    if (H5Lget_name_by_idx(g, ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, i, nm, sizeof nm, H5P_DEFAULT) < 0 &&
        H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nm, sizeof nm, H5P_DEFAULT) < 0) {
      H5Eclear2(H5E_DEFAULT);
      continue;
    }
    H5Eclear2(H5E_DEFAULT);
    if (strcmp(nm, skip) == 0) continue;
    if (h5_type(g, nm) != H5O_TYPE_DATASET || dset_len(g, nm) != (int64_t)n) { skipped++; continue; }
    h5col *c = &fr->cols[fr->n_cols];
    c->dset = c->mask = -1;
    int r = h5ad_col_open(f, g, gpath, nm, n, c, e);
    if (r < 0) return -1;
    if (r == 0) fr->n_cols++;
  }
  if (skipped)
    fprintf(stderr, "deltacells: note: %s: %s: %llu attributes that are not one value per %s (embeddings...) are "
            "not stored\n", f->path, gpath, (unsigned long long)skipped, fr == &f->obs ? "cell" : "gene");
  return 0;
}

static const char *first_of(hid_t g, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (h5_type(g, names[i]) == H5O_TYPE_DATASET) return names[i];
  return NULL;
}

static int loom_open(const char *path, hid_t fid, const char *layer, const char *gene_key, h5file *f, cv_err *e) {
  static const char *const cell_ids[] = {"CellID", "obs_names", "cell_names", "CellId", "cell_id", NULL};
  static const char *const gene_ids[] = {"Gene", "var_names", "gene_names", "Genes", "gene", NULL};
  init_file(f);
  f->kind = "loom";
  f->fid = fid;
  if (!(f->path = strdup(path))) return cv_fail(e, "out of memory");
  if (layer) snprintf(f->mpath, sizeof f->mpath, "layers/%s", layer);
  else snprintf(f->mpath, sizeof f->mpath, "matrix");
  hid_t ca = H5Gopen2(fid, "col_attrs", H5P_DEFAULT), ra = H5Gopen2(fid, "row_attrs", H5P_DEFAULT), dcpl = -1;
  int rc = -1;
  H5Eclear2(H5E_DEFAULT);
  if (ca < 0 || ra < 0) { cv_fail(e, "%s: a loom file without col_attrs or row_attrs", path); goto done; }
  if (h5_type(fid, f->mpath) != H5O_TYPE_DATASET) {
    if (layer) h5ad_no_layer(fid, path, layer, e);
    else cv_fail(e, "%s: loom: /matrix is not a dataset", path);
    goto done;
  }
  hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
  H5Pset_chunk_cache(dapl, 12421, (size_t)64 << 20, 1.0);
  f->data = H5Dopen2(fid, f->mpath, dapl);
  H5Pclose(dapl);
  if (f->data < 0) { H5Eclear2(H5E_DEFAULT); cv_fail(e, "%s: %s: cannot open", path, f->mpath); goto done; }
  hid_t sp = H5Dget_space(f->data), t = H5Dget_type(f->data);
  hsize_t d[2] = {0, 0};
  int nd = H5Sget_simple_extent_ndims(sp);
  if (nd == 2) H5Sget_simple_extent_dims(sp, d, NULL);
  H5T_class_t cls = H5Tget_class(t);
  H5Sclose(sp);
  H5Tclose(t);
  if (nd != 2) { cv_fail(e, "%s: %s: a loom matrix is 2-D (genes x cells), not %d-D", path, f->mpath, nd); goto done; }
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) { cv_fail(e, "%s: %s: not numbers", path, f->mpath); goto done; }
  f->data_float = cls == H5T_FLOAT;
  f->n_vars = d[0];
  f->n_obs = d[1];
  f->fmt = MAT_DENSE_T;
  dcpl = H5Dget_create_plist(f->data);
  hsize_t ch[2] = {0, 0};
  f->stripe = H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 2, ch) == 2 ? ch[1] : 64;
  if (f->n_obs >= UINT32_MAX) { cv_fail(e, "%s: %llu cells: at most 2^32-2 per file", path, (unsigned long long)f->n_obs); goto done; }
  if (f->n_vars >= INT32_MAX) { cv_fail(e, "%s: %llu genes: too many", path, (unsigned long long)f->n_vars); goto done; }
  const char *ci = first_of(ca, cell_ids), *gi = first_of(ra, gene_ids);
  if (!ci) { cv_fail(e, "%s: loom col_attrs has no cell names (CellID or obs_names)", path); goto done; }
  if (!gi) { cv_fail(e, "%s: loom row_attrs has no gene names (Gene or var_names)", path); goto done; }
  if (dset_len(ca, ci) != (int64_t)f->n_obs || dset_len(ra, gi) != (int64_t)f->n_vars) {
    cv_fail(e, "%s: %s is %llu genes x %llu cells, but col_attrs/%s has %lld values and row_attrs/%s %lld", path,
            f->mpath, (unsigned long long)f->n_vars, (unsigned long long)f->n_obs, ci, (long long)dset_len(ca, ci), gi,
            (long long)dset_len(ra, gi));
    goto done;
  }
  snprintf(f->obs.path, sizeof f->obs.path, "col_attrs");
  snprintf(f->var.path, sizeof f->var.path, "row_attrs");
  f->obs.n_rows = f->n_obs;
  f->var.n_rows = f->n_vars;
  int r = h5ad_col_open(f, ca, "col_attrs", ci, f->n_obs, &f->obs.index, e);
  if (r == 1) cv_fail(e, "%s: col_attrs/%s: unsupported type", path, ci);
  if (r) goto done;
  r = h5ad_col_open(f, ra, "row_attrs", gi, f->n_vars, &f->var.index, e);
  if (r == 1) cv_fail(e, "%s: row_attrs/%s: unsupported type", path, gi);
  if (r) goto done;
  if (loom_cols(f, ca, "col_attrs", ci, f->n_obs, &f->obs, e) || loom_cols(f, ra, "row_attrs", gi, f->n_vars, &f->var, e))
    goto done;
  if (h5ad_gene_names(f, gene_key, e)) goto done;
  rc = 0;
done:
  if (dcpl >= 0) H5Pclose(dcpl);
  if (ca >= 0) H5Gclose(ca);
  if (ra >= 0) H5Gclose(ra);
  H5Eclear2(H5E_DEFAULT);
  return rc;
}

/* ------------------------------------------------------------ text files */
typedef struct lreader {
  gzFile gz;
  const char *path;
  char *buf;
  size_t len, pos, cap;
  int eof;
  uint64_t line;
} lreader;

static int lr_open(lreader *r, const char *path, cv_err *e) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->gz = gzopen(path, "rb");
  if (!r->gz) return cv_fail(e, "%s: %s", path, errno ? strerror(errno) : "cannot open");
  gzbuffer(r->gz, 1 << 18);
  r->cap = 1 << 20;
  if (!(r->buf = malloc(r->cap + 1))) return cv_fail(e, "out of memory");
  return 0;
}

static void lr_close(lreader *r) {
  if (r->gz) gzclose(r->gz);
  free(r->buf);
  memset(r, 0, sizeof *r);
}

/* Moves the unread bytes to the front of the buffer and reads more after them (at the end of
** the file: r->eof set, nothing read); 0, or -1 on an error (a damaged or truncated .gz file,
** or a line that fills the whole buffer: named by its number). */
static int lr_read(lreader *r, cv_err *e) {
  if (r->pos > 0) {
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
  }
  if (r->len == r->cap) return cv_fail(e, "%s: line %llu is longer than %zu bytes", r->path, (unsigned long long)r->line + 1, r->cap);
  int k = gzread(r->gz, r->buf + r->len, (unsigned)(r->cap - r->len));
  if (k < 0) {
    int en;
    const char *m = gzerror(r->gz, &en);
    return cv_fail(e, "%s: %s", r->path, en == Z_ERRNO ? strerror(errno) : m);
  }
  if (k == 0) {
    int en;
    const char *m = gzerror(r->gz, &en);
    if (en != Z_OK && en != Z_STREAM_END)
      return cv_fail(e, "%s: %s (truncated or damaged file?)", r->path, en == Z_ERRNO ? strerror(errno) : m);
    r->eof = 1;
  }
  r->len += (size_t)k;
  return 0;
}

/* The next line (without its end of line, NUL-terminated) in *s, *n; 1 at the
** end of the file, -1 on an error (a damaged or truncated .gz file, or a line that holds a NUL
** byte: text has none, and the names and numbers read from it would end there unseen). */
static int lr_next(lreader *r, char **s, size_t *n, cv_err *e) {
  for (;;) {
    char *nl = r->pos < r->len ? memchr(r->buf + r->pos, '\n', r->len - r->pos) : NULL;
    if (nl || (r->eof && r->pos < r->len)) {
      char *a = r->buf + r->pos, *z = nl ? nl : r->buf + r->len;
      r->pos = (size_t)(z - r->buf) + (nl ? 1 : 0);
      if (z > a && z[-1] == '\r') z--;
      /* a UTF-8 byte-order mark (Excel's "UTF-8 CSV", PowerShell) is not part of the first name */
      if (r->line == 0 && z - a >= 3 && !memcmp(a, "\xEF\xBB\xBF", 3)) a += 3;
      r->line++;
      if (memchr(a, 0, (size_t)(z - a)))
        return cv_fail(e, "%s: line %llu holds a NUL byte (not a text file, or a damaged one)", r->path,
                       (unsigned long long)r->line);
      *z = 0;
      *s = a;
      *n = (size_t)(z - a);
      return 0;
    }
    if (r->eof) return 1;
    if (lr_read(r, e)) return -1;
  }
}

/* Skips the next line if its first byte is c, however long it is: it is read through a buffer at a
** time, never held whole (a Matrix Market comment: tools write provenance of any length there).
** 1 if a line was skipped, 0 if not (another line, or the end of the file), -1 on an error. */
static inline int lr_skip_if(lreader *r, char c, cv_err *e) {
  if (r->pos < r->len && r->buf[r->pos] != c) return 0;  /* the common case: one comparison */
  if (r->pos == r->len && !r->eof && lr_read(r, e)) return -1;
  if (r->pos == r->len || r->buf[r->pos] != c) return 0;
  for (;;) {
    char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
    if (nl) {
      r->pos = (size_t)(nl - r->buf) + 1;
      r->line++;
      return 1;
    }
    r->pos = r->len = 0;       /* the line so far: dropped */
    if (r->eof) {              /* the last line, without an end of line */
      r->line++;
      return 1;
    }
    if (lr_read(r, e)) return -1;
  }
}

/* lr_next past the lines whose first byte is c, skipped however long they are (lr_skip_if). */
static int lr_next_skipping(lreader *r, char c, char **s, size_t *n, cv_err *e) {
  int k;
  while ((k = lr_skip_if(r, c, e)) > 0) {}
  return k < 0 ? -1 : lr_next(r, s, n, e);
}

/* A growing list of strings. */
typedef struct strs { char **v; size_t n, cap; } strs;
static int strs_add(strs *l, const char *s, size_t n, cv_err *e) {
  if (cv_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, e)) return -1;
  if (!(l->v[l->n] = strndup(s, n))) return cv_fail(e, "out of memory");
  l->n++;
  return 0;
}
static void strs_free(strs *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------ 10x mtx */
typedef struct mtx_state {
  lreader lr;
  char *file;          /* the matrix file */
  int field;           /* 1 integer, 2 real, 3 pattern */
  int cells_rows;      /* rows are cells (a transposed matrix), else rows are genes */
  uint64_t rows, cols, nnz;
} mtx_state;

static void mtx_free(void *p) {
  mtx_state *m = p;
  lr_close(&m->lr);
  free(m->file);
  free(m);
}

/* dir/prefix + the first of names that exists, or NULL.  names come in pairs, gzipped then
** plain: when both of a pair exist, a note says which one is read. */
static char *find_file(const char *dir, const char *prefix, const char *const *names) {
  for (int i = 0; names[i]; i++) {
    size_t n = strlen(dir) + strlen(prefix) + strlen(names[i]) + 2;
    char *p = malloc(n);
    if (!p) return NULL;
    snprintf(p, n, "%s/%s%s", dir, prefix, names[i]);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
      size_t l = strlen(p);
      if (l > 3 && !strcmp(p + l - 3, ".gz")) {
        p[l - 3] = 0;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
          fprintf(stderr, "deltacells: note: %s: both %s.gz and %s are there; reading %s.gz\n", dir, p + strlen(dir) + 1,
                  p + strlen(dir) + 1, p + strlen(dir) + 1);
        p[l - 3] = '.';
      }
      return p;
    }
    free(p);
  }
  return NULL;
}

static int write_strings(hid_t loc, const char *name, char **v, size_t n, cv_err *e) {
  hsize_t d = n;
  hid_t sp = H5Screate_simple(1, &d, NULL), mt = H5Tcopy(H5T_C_S1), ds = -1;
  int rc = -1;
  H5Tset_size(mt, H5T_VARIABLE);
  H5Tset_cset(mt, H5T_CSET_UTF8);
  ds = H5Dcreate2(loc, name, mt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (ds >= 0 && (n == 0 || H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0)) rc = 0;
  else cv_fail(e, "in-memory HDF5: cannot write %s", name);
  H5Eclear2(H5E_DEFAULT);
  if (ds >= 0) H5Dclose(ds);
  H5Tclose(mt);
  H5Sclose(sp);
  return rc;
}

/* Reads barcodes (one a line) into l. */
static int read_barcodes(const char *path, strs *l, cv_err *e) {
  lreader r;
  char *s;
  size_t n;
  int k, rc = -1;
  if (lr_open(&r, path, e)) { lr_close(&r); return -1; }
  while ((k = lr_next(&r, &s, &n, e)) == 0) {
    if (n == 0) {  /* a blank last line is fine; a blank line inside is not */
      char *s2;
      size_t n2;
      int k2 = lr_next(&r, &s2, &n2, e);
      if (k2 < 0) goto done;
      if (k2 == 0) { cv_fail(e, "%s: line %llu is empty (a barcode per line expected)", path, (unsigned long long)r.line - 1); goto done; }
      break;
    }
    char *tab = memchr(s, '\t', n);  /* barcodes.tsv may carry more columns: the first is the barcode */
    if (tab) n = (size_t)(tab - s);
    if (!cv_utf8_valid(s, n)) { cv_fail(e, "%s: line %llu is not valid UTF-8", path, (unsigned long long)r.line); goto done; }
    if (strs_add(l, s, n, e)) goto done;
  }
  if (k < 0) goto done;
  rc = 0;
done:
  lr_close(&r);
  return rc;
}

/* Reads features.tsv (id, name, feature type) or genes.tsv (id, name).  A file of one column
** has no names apart from its ids: *one_col set, id left empty, name holding the column. */
static int read_features(const char *path, strs *id, strs *name, strs *type, int *one_col, cv_err *e) {
  lreader r;
  char *s;
  size_t n;
  int k, rc = -1, ncols = -1;
  if (lr_open(&r, path, e)) { lr_close(&r); return -1; }
  while ((k = lr_next(&r, &s, &n, e)) == 0) {
    if (n == 0) {
      char *s2;
      size_t n2;
      int k2 = lr_next(&r, &s2, &n2, e);
      if (k2 < 0) goto done;
      if (k2 == 0) { cv_fail(e, "%s: line %llu is empty (a feature per line expected)", path, (unsigned long long)r.line - 1); goto done; }
      break;
    }
    if (!cv_utf8_valid(s, n)) { cv_fail(e, "%s: line %llu is not valid UTF-8", path, (unsigned long long)r.line); goto done; }
    char *f[3] = {s, NULL, NULL};
    size_t fl[3] = {n, 0, 0};
    int c = 1;
    for (char *p = s; c < 3 && (p = memchr(p, '\t', (size_t)(s + n - p))) != NULL; p++) {
      fl[c - 1] = (size_t)(p - f[c - 1]);
      f[c] = p + 1;
      fl[c] = (size_t)(s + n - f[c]);
      c++;
    }
    if (c == 3) { char *t = memchr(f[2], '\t', fl[2]); if (t) fl[2] = (size_t)(t - f[2]); } /* more columns: ignored */
    if (ncols < 0) ncols = c;
    else if (c != ncols) {
      cv_fail(e, "%s: line %llu has %d tab-separated fields, line 1 has %d", path, (unsigned long long)r.line, c, ncols);
      goto done;
    }
    if ((c >= 2 && strs_add(id, f[0], fl[0], e)) || strs_add(name, c >= 2 ? f[1] : f[0], c >= 2 ? fl[1] : fl[0], e) ||
        (c >= 3 && strs_add(type, f[2], fl[2], e)))
      goto done;
  }
  if (k < 0) goto done;
  *one_col = ncols == 1;
  rc = 0;
done:
  lr_close(&r);
  return rc;
}

static int ieq_prefix(const char *s, const char *p) { return strncasecmp(s, p, strlen(p)) == 0; }

static inline int parse_u64(char **p, uint64_t *out) {
  char *s = *p;
  while (*s == ' ' || *s == '\t') s++;
  if (*s < '0' || *s > '9') return -1;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return -1;
    v = v * 10 + (uint64_t)(*s++ - '0');
  }
  *p = s;
  *out = v;
  return 0;
}

/* Reads the Matrix Market header and size line; leaves the reader at the entries. */
static int mtx_header(mtx_state *m, cv_err *e) {
  char *s;
  size_t n;
  int k = lr_next(&m->lr, &s, &n, e);
  if (k < 0) return -1;
  if (k > 0) return cv_fail(e, "%s: empty file (a Matrix Market file starts with '%%%%MatrixMarket')", m->file);
  char obj[32] = "", fmt[32] = "", field[32] = "", sym[32] = "";
  if (!ieq_prefix(s, "%%MatrixMarket") || sscanf(s + 14, "%31s %31s %31s %31s", obj, fmt, field, sym) != 4)
    return cv_fail(e, "%s: line 1: not a Matrix Market header ('%%%%MatrixMarket matrix coordinate integer general' "
                   "expected)", m->file);
  if (strcasecmp(obj, "matrix") != 0 || strcasecmp(fmt, "coordinate") != 0)
    return cv_fail(e, "%s: line 1: a '%s %s' Matrix Market file; a count matrix is 'matrix coordinate'", m->file, obj, fmt);
  if (!strcasecmp(field, "integer")) m->field = 1;
  else if (!strcasecmp(field, "real") || !strcasecmp(field, "double")) m->field = 2;
  else if (!strcasecmp(field, "pattern")) m->field = 3;
  else return cv_fail(e, "%s: line 1: values of type '%s'; counts are 'integer' (or 'real' holding whole numbers)", m->file, field);
  if (strcasecmp(sym, "general") != 0)
    return cv_fail(e, "%s: line 1: a '%s' matrix; a count matrix is 'general'", m->file, sym);
  for (;;) {
    k = lr_next_skipping(&m->lr, '%', &s, &n, e);  /* past comment lines, of any length */
    if (k < 0) return -1;
    if (k > 0) return cv_fail(e, "%s: ends before its size line (rows columns entries)", m->file);
    if (n == 0) continue;
    /* three unsigned numbers (sscanf's %llu took "-1" as 2^64-1) */
    char *p = s;
    uint64_t a, b, c;
    if (parse_u64(&p, &a) || parse_u64(&p, &b) || parse_u64(&p, &c) || p[strspn(p, " \t")])
      return cv_fail(e, "%s: line %llu: '%.60s' is not a size line (rows columns entries)", m->file,
                     (unsigned long long)m->lr.line, s);
    m->rows = a;
    m->cols = b;
    m->nnz = c;
    return 0;
  }
}

static int tenx_mtx_open(const char *path, const char *gene_key, h5file *f, cv_err *e) {
  static unsigned counter;
  static const char *const mtx_names[] = {"matrix.mtx.gz", "matrix.mtx", NULL};
  static const char *const feat_names[] = {"features.tsv.gz", "features.tsv", "genes.tsv.gz", "genes.tsv", NULL};
  static const char *const bc_names[] = {"barcodes.tsv.gz", "barcodes.tsv", NULL};
  init_file(f);
  f->kind = "10x mtx";
  if (!(f->path = strdup(path))) return cv_fail(e, "out of memory");
  struct stat st;
  char *dir = NULL, *prefix = NULL, *mfile = NULL, *ffile = NULL, *bfile = NULL;
  strs bc = {0}, id = {0}, nm = {0}, ty = {0};
  mtx_state *m = NULL;
  hid_t fapl = -1, mem = -1, gv = -1;
  int rc = -1, one_col = 0;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    dir = strdup(path);
    prefix = strdup("");
  } else { /* DIR/PREFIXmatrix.mtx[.gz] */
    char *c1 = strdup(path), *c2 = strdup(path);
    if (c1 && c2) {
      dir = strdup(dirname(c1));
      const char *b = basename(c2);
      const char *at = strstr(b, "matrix.mtx");
      while (at && strstr(at + 1, "matrix.mtx")) at = strstr(at + 1, "matrix.mtx");
      if (at) prefix = strndup(b, (size_t)(at - b));
    }
    free(c1);
    free(c2);
    if (dir && !prefix) {
      cv_fail(e, "%s: a Matrix Market file is read as part of a 10x directory: its name must end in matrix.mtx or "
              "matrix.mtx.gz, beside barcodes.tsv[.gz] and features.tsv[.gz] (with the same prefix)", path);
      goto done;
    }
  }
  if (!dir || !prefix) { cv_fail(e, "out of memory"); goto done; }
  mfile = find_file(dir, prefix, mtx_names);
  ffile = find_file(dir, prefix, feat_names);
  bfile = find_file(dir, prefix, bc_names);
  if (!mfile || !ffile || !bfile) {
    cv_fail(e, "%s: is a directory without %s%s (a 10x matrix directory holds %smatrix.mtx[.gz], %sfeatures.tsv[.gz] or %sgenes.tsv[.gz], "
            "and %sbarcodes.tsv[.gz])", path, prefix, !mfile ? "matrix.mtx.gz or matrix.mtx" : !ffile ?
            "features.tsv.gz, features.tsv, genes.tsv.gz or genes.tsv" : "barcodes.tsv.gz or barcodes.tsv",
            prefix, prefix, prefix, prefix);
    goto done;
  }
  if (read_barcodes(bfile, &bc, e) || read_features(ffile, &id, &nm, &ty, &one_col, e)) goto done;
  if (!(m = calloc(1, sizeof *m))) { cv_fail(e, "out of memory"); goto done; }
  f->ext = m;
  f->ext_free = mtx_free;
  m->file = mfile;
  mfile = NULL;
  if (lr_open(&m->lr, m->file, e) || mtx_header(m, e)) goto done;
  if (m->rows == nm.n && m->cols == bc.n) {
    m->cells_rows = 0;
    if (nm.n == bc.n) /* a square matrix: both orders fit; the 10x one is taken, and said */
      fprintf(stderr, "deltacells: note: %s: %llu x %llu, as many features as barcodes: read as genes x cells (rows "
              "are features, as 10x writes it), not cells x genes\n", m->file, (unsigned long long)m->rows,
              (unsigned long long)m->cols);
  } else if (m->rows == bc.n && m->cols == nm.n) m->cells_rows = 1;
  else {
    cv_fail(e, "%s: the matrix is %llu x %llu, but there are %zu features (%s) and %zu barcodes (%s)", m->file,
            (unsigned long long)m->rows, (unsigned long long)m->cols, nm.n, ffile, bc.n, bfile);
    goto done;
  }
  f->n_obs = bc.n;
  f->n_vars = nm.n;
  f->nnz = m->nnz;
  if (f->n_obs >= UINT32_MAX) { cv_fail(e, "%s: %llu cells: at most 2^32-2 per file", path, (unsigned long long)f->n_obs); goto done; }
  if (f->n_vars >= INT32_MAX) { cv_fail(e, "%s: %llu genes: too many", path, (unsigned long long)f->n_vars); goto done; }
  {
    const char *b = strrchr(m->file, '/');
    snprintf(f->mpath, sizeof f->mpath, "%s", b ? b + 1 : m->file);
  }
  /* barcodes and features into an in-memory HDF5 file: the same frames as a 10x HDF5 file */
  fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, (size_t)1 << 20, 0);
  char mname[64];
  snprintf(mname, sizeof mname, "deltacells-mtx-%d-%u", (int)getpid(), counter++);
  mem = H5Fcreate(mname, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (mem < 0) { H5Eclear2(H5E_DEFAULT); cv_fail(e, "%s: cannot create an in-memory HDF5 file", path); goto done; }
  f->fid = mem;
  gv = H5Gcreate2(mem, "features", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (gv < 0 || write_strings(mem, "barcodes", bc.v, bc.n, e) || (!one_col && write_strings(gv, "id", id.v, id.n, e)) ||
      write_strings(gv, "name", nm.v, nm.n, e) || (ty.n && write_strings(gv, "feature_type", ty.v, ty.n, e))) {
    if (gv < 0) cv_fail(e, "%s: cannot create an in-memory HDF5 group", path);
    goto done;
  }
  strs_free(&bc); strs_free(&id); strs_free(&nm); strs_free(&ty);
  if (tenx_frames(f, mem, "barcodes", "barcodes", gv, "features", "name", one_col ? NULL : "id", "feature_type", NULL, e))
    goto done;
  if (one_col) { /* its values are the names and the ids at once: no gene_ids column beside them */
    fprintf(stderr, "deltacells: note: %s: one column, no gene names apart from the ids: that column names the "
            "genes (no gene_ids column; --gene-key gene_ids keys by it too)\n", ffile);
    if (gene_key && !strcmp(gene_key, "gene_ids")) gene_key = NULL;
  }
  f->fmt = MAT_SPOOL;
  if (h5ad_gene_names(f, gene_key, e)) goto done;
  rc = 0;
done:
  if (gv >= 0) H5Gclose(gv);
  if (fapl >= 0) H5Pclose(fapl);
  strs_free(&bc); strs_free(&id); strs_free(&nm); strs_free(&ty);
  free(dir); free(prefix); free(mfile); free(ffile); free(bfile);
  return rc;
}

/* Parses an unsigned decimal at *p (skipping blanks before); -1 if none. */

int tenx_mtx_spool(h5file *f, const char *dir, uint32_t tile_cells, uint64_t *total, uint64_t *ncells,
                   void (*progress)(void *, uint64_t), void *parg, cv_err *e) {
  mtx_state *m = f->ext;
  if (f->fmt != MAT_SPOOL || !m) return cv_fail(e, "%s: internal: not a Matrix Market input", f->path);
  if (h5ad_spool_begin(f, dir, tile_cells, e)) return -1;
  uint64_t got = 0;
  char *s;
  size_t n;
  int k;
  while ((k = lr_next_skipping(&m->lr, '%', &s, &n, e)) == 0) {  /* comments among the entries too */
    char *p = s;
    uint64_t i, j, v = 1;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == 0 || *p == '%') continue;
    if (got == m->nnz)
      return cv_fail(e, "%s: line %llu: more entries than the %llu of its size line", m->file,
                     (unsigned long long)m->lr.line, (unsigned long long)m->nnz);
    if (parse_u64(&p, &i) || parse_u64(&p, &j))
      return cv_fail(e, "%s: line %llu: '%.60s' is not an entry (row column value)", m->file,
                     (unsigned long long)m->lr.line, s);
    if (i < 1 || i > m->rows || j < 1 || j > m->cols)
      return cv_fail(e, "%s: line %llu: entry (%llu, %llu) is outside the %llu x %llu matrix", m->file,
                     (unsigned long long)m->lr.line, (unsigned long long)i, (unsigned long long)j,
                     (unsigned long long)m->rows, (unsigned long long)m->cols);
    uint64_t cell = (m->cells_rows ? i : j) - 1, gene = (m->cells_rows ? j : i) - 1;
    if (m->field != 3) {
      char *q = p;
      int bad = 0;
      if (m->field == 1) {
        while (*q == ' ' || *q == '\t') q++;
        if (*q == '-' || *q == '+') bad = *q == '-';
        if (bad || parse_u64(&p, &v)) bad = 1;
      } else {
        char *end;
        while (*p == ' ' || *p == '\t') p++;
        /* Matrix Market's decimal syntax only (strtod also takes 0x10, inf, nan) */
        size_t tl = strspn(p, "0123456789+-.eE");
        double d = strtod(p, &end);
        if (end == p || end != p + tl || !(d >= 0 && d <= 4294967295.0 && d == floor(d))) bad = 1;
        else { v = (uint64_t)d; p = end; }
      }
      while (!bad && (*p == ' ' || *p == '\t')) p++;
      if (bad || *p || v > UINT32_MAX) {
        char cellname[300];
        h5ad_cell_name(f, cell, cellname, sizeof cellname);
        return cv_fail(e, "%s: line %llu: cell %s, gene '%s': value '%.40s' is not a count (a non-negative whole "
                       "number below 2^32)", m->file, (unsigned long long)m->lr.line, cellname, f->var_names[gene],
                       q + strspn(q, " \t"));
      }
    } else {
      while (*p == ' ' || *p == '\t') p++;
      if (*p)
        return cv_fail(e, "%s: line %llu: '%.60s': a pattern entry has no value", m->file,
                       (unsigned long long)m->lr.line, s);
    }
    got++;
    if (v) {
      total[gene] += v;
      ncells[gene]++;
      if (h5ad_spool_put(f, (uint32_t)cell, (uint32_t)gene, (uint32_t)v, e)) return -1;
    }
    if ((got & 0xfffff) == 0) {
      if (cv_check_interrupt(e)) return -1;
      if (progress) progress(parg, got);
    }
  }
  if (k < 0) return -1;
  if (got < m->nnz)
    return cv_fail(e, "%s: ends after %llu of the %llu entries of its size line (truncated?)", m->file,
                   (unsigned long long)got, (unsigned long long)m->nnz);
  lr_close(&m->lr);
  return h5ad_spool_end(f, e);
}

/* ------------------------------------------------------------ detection */
static int ends_with(const char *s, const char *t) {
  size_t a = strlen(s), b = strlen(t);
  return a >= b && strcmp(s + a - b, t) == 0;
}

int cv_input_open(const char *path, const char *layer, int raw, const char *gene_key, h5file *f, cv_err *e) {
  struct stat st;
  if (stat(path, &st) != 0) return h5ad_open(path, layer, raw, gene_key, f, e); /* its message */
  int is_mtx = S_ISDIR(st.st_mode) || ends_with(path, ".mtx") || ends_with(path, ".mtx.gz");
  hid_t fid = -1;
  const char *grp = NULL;
  int v3 = 0;
  char v2grp[256] = "";
  if (!is_mtx && H5Fis_hdf5(path) > 0) {
    fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fid >= 0 && h5_type(fid, "obs") < 0) {
      if (h5_type(fid, "matrix") == H5O_TYPE_GROUP && h5ad_exists(fid, "matrix/barcodes") && h5ad_exists(fid, "matrix/features")) {
        grp = "matrix";
        v3 = 1;
      } else if (h5_type(fid, "matrix") == H5O_TYPE_GROUP && !h5ad_exists(fid, "matrix/genes")) {
        /* CellRanger 3+'s group with a part missing (a CellRanger 2 genome group has 'genes') */
        const char *miss = h5ad_exists(fid, "matrix/barcodes") ? "features" : "barcodes";
        H5Fclose(fid);
        H5Eclear2(H5E_DEFAULT);
        init_file(f);
        f->path = strdup(path);
        return cv_fail(e, "%s: a 10x HDF5 file without /matrix/%s (CellRanger 3+ writes /matrix/barcodes, data, "
                       "indices, indptr, shape and the group features: id, name, feature_type)", path, miss);
      } else if (h5_type(fid, "matrix") == H5O_TYPE_DATASET && h5ad_exists(fid, "row_attrs") && h5ad_exists(fid, "col_attrs")) {
        if (raw) {
          H5Fclose(fid);
          init_file(f);
          f->path = strdup(path);
          return cv_fail(e, "%s: a loom file has no raw counts apart (--raw applies to h5ad files; --layer NAME reads "
                         "loom layers/NAME)", path);
        }
        return loom_open(path, fid, layer, gene_key, f, e);
      } else { /* CellRanger 2: one group per genome, each with barcodes, genes, gene_names, data... */
        hid_t root = H5Gopen2(fid, "/", H5P_DEFAULT);
        H5G_info_t gi;
        int found = 0;
        char names[512] = "";
        if (root >= 0 && H5Gget_info(root, &gi) >= 0) {
          for (hsize_t i = 0; i < gi.nlinks; i++) {
            char nm[256];
            if (H5Lget_name_by_idx(root, ".", H5_INDEX_NAME, H5_ITER_INC, i, nm, sizeof nm, H5P_DEFAULT) < 0) continue;
            char b1[300], b2[300];
            snprintf(b1, sizeof b1, "%s/barcodes", nm);
            snprintf(b2, sizeof b2, "%s/genes", nm);
            if (h5_type(root, nm) == H5O_TYPE_GROUP && h5ad_exists(root, b1) && h5ad_exists(root, b2)) {
              if (!found++) snprintf(v2grp, sizeof v2grp, "%s", nm);
              size_t l = strlen(names);
              snprintf(names + l, sizeof names - l, "%s'%s'", l ? ", " : "", nm);
            }
          }
        }
        if (root >= 0) H5Gclose(root);
        H5Eclear2(H5E_DEFAULT);
        if (found > 1) {
          H5Fclose(fid);
          init_file(f);
          f->path = strdup(path);
          return cv_fail(e, "%s: a CellRanger 2 file of %d genomes (%s); the converter reads files of one genome",
                         path, found, names);
        }
        if (found) grp = v2grp;
      }
    }
    H5Eclear2(H5E_DEFAULT);
    if (!grp && fid >= 0) { H5Fclose(fid); fid = -1; }
  }
  if (!is_mtx && !grp) return h5ad_open(path, layer, raw, gene_key, f, e);
  if (layer || raw) {
    if (fid >= 0) H5Fclose(fid);
    init_file(f);
    f->path = strdup(path);
    return cv_fail(e, "%s: a 10x %s input has one count matrix; %s applies to h5ad files only", path,
                   is_mtx ? "Matrix Market" : "HDF5", layer ? "--layer" : "--raw");
  }
  if (is_mtx) return tenx_mtx_open(path, gene_key, f, e);
  return tenx_h5_open(path, fid, grp, v3, gene_key, f, e);
}
