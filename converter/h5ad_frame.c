/*
** h5ad_frame.c — the obs and var data frames of an h5ad file (see h5ad.h): column buffers,
** opening a frame's columns by their encoding, reading them in slices, the gene names.
*/
#include "h5ad.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cv_dtype.h"
#include "h5ad_hdf5.h"

const char *cv_kind_name(int kind) {
  switch (kind) {
    case CVK_CATEGORY: return "category";
    case CVK_INT: return "int";
    case CVK_REAL: return "real";
    case CVK_BOOL: return "bool";
    case CVK_TEXT: return "text";
  }
  return "?";
}

/* ------------------------------------------------------------ colbuf */
int colbuf_reset(colbuf *b, int kind, size_t n, cv_err *e) {
  if (n > b->cap) {
    size_t c = n;
    free(b->codes); free(b->i64); free(b->valid); free(b->f64); free(b->b8);
    free(b->text); free(b->text_len); free(b->text_off);
    b->codes = malloc(c * sizeof *b->codes);
    b->i64 = malloc(c * sizeof *b->i64);
    b->valid = malloc(c);
    b->f64 = malloc(c * sizeof *b->f64);
    b->b8 = malloc(c);
    b->text = malloc(c * sizeof *b->text);
    b->text_len = malloc(c * sizeof *b->text_len);
    b->text_off = malloc(c * sizeof *b->text_off);
    if (!b->codes || !b->i64 || !b->valid || !b->f64 || !b->b8 || !b->text || !b->text_len ||
        !b->text_off) {
      b->cap = 0;
      return cv_fail(e, "out of memory (column buffer of %zu values)", n);
    }
    b->cap = c;
  }
  b->kind = kind;
  b->n = (uint32_t)n;
  b->arena_len = 0;
  return 0;
}

int colbuf_text_set(colbuf *b, size_t i, const char *s, size_t len, cv_err *e) {
  if (len > UINT32_MAX) return cv_fail(e, "string of %zu bytes is too long", len);
  if (cv_grow((void **)&b->arena, &b->arena_cap, b->arena_len + len + 1, 1, e)) return -1;
  memcpy(b->arena + b->arena_len, s, len);
  b->arena[b->arena_len + len] = 0;
  b->text_off[i] = b->arena_len;
  b->text_len[i] = (uint32_t)len;
  b->arena_len += len + 1;
  return 0;
}

void colbuf_text_null(colbuf *b, size_t i) {
  b->text_off[i] = UINT64_MAX;
  b->text_len[i] = 0;
}

void colbuf_text_done(colbuf *b) {
  for (uint32_t i = 0; i < b->n; i++)
    b->text[i] = b->text_off[i] == UINT64_MAX ? NULL : b->arena + b->text_off[i];
}

void colbuf_free(colbuf *b) {
  free(b->codes); free(b->i64); free(b->valid); free(b->f64); free(b->b8);
  free(b->text); free(b->text_len); free(b->text_off); free(b->arena);
  memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------ frames */
/* Formats a number as pandas prints it in a label ("3", "1.5", "nan"). */
static void fmt_real(double v, char *buf, size_t n) {
  if (isnan(v)) { snprintf(buf, n, "nan"); return; }
  for (int p = 15; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eEni")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* Reads all of a 1-D dataset as text labels (strings, numbers or bools). */
static int read_labels(h5file *f, hid_t ds, const char *what, char ***out, uint32_t *n_out,
                       char dtype[8], cv_err *e) {
  int64_t n = h5ad_ds_len(ds);
  *out = NULL;
  *n_out = 0;
  if (n < 0) return cv_fail(e, "%s: %s: not a 1-D array", f->path, what);
  if ((uint64_t)n > 0x7ffffffeu) return cv_fail(e, "%s: %s: too many categories", f->path, what);
  char **v = calloc((size_t)n + 1, sizeof *v);
  colbuf cb = {0};
  hid_t t = H5Dget_type(ds);
  H5T_class_t cls = H5Tget_class(t);
  int rc = -1;
  if (!v) { cv_fail(e, "out of memory"); goto done; }
  /* numbers: their exact type (int16, uint32, float32, ...; float16, which no pandas index
  ** holds, as float32), for export to give the categories back in it (dc_meta obs_cat_dtypes) */
  const cv_dtype *ct = cls == H5T_INTEGER || cls == H5T_FLOAT ? cv_dtype_of(t) : NULL;
  if (ct && ct->code == CV_FLOAT16) ct = cv_dtype_at(CV_FLOAT32);
  snprintf(dtype, 8, "%s", ct ? ct->name : cls == H5T_INTEGER ? "int64" : cls == H5T_FLOAT ? "float64" : cls == H5T_ENUM ? "bool" : "");
  if (cls == H5T_STRING) {
    for (int64_t s = 0; s < n; s += 65536) {
      size_t k = (size_t)(n - s < 65536 ? n - s : 65536);
      if (colbuf_reset(&cb, CVK_TEXT, k, e) || h5ad_read_strs(f, ds, what, (uint64_t)s, k, &cb, 0, e))
        goto done;
      for (size_t i = 0; i < k; i++)
        if (!(v[s + (int64_t)i] = strdup(cb.arena + cb.text_off[i]))) { cv_fail(e, "out of memory"); goto done; }
    }
  } else if (cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM) {
    double *d = malloc(((size_t)n + 1) * sizeof *d);
    int8_t *b = malloc((size_t)n + 1);
    int ok = d && b, uns = cls == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
    if (ok && cls == H5T_ENUM) {
      hid_t nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
      ok = H5Tget_size(nt) == 1 && h5ad_ds_read(ds, nt, 0, (uint64_t)n, 0, b) == 0;
      H5Tclose(nt);
    } else if (ok) {
      /* integers read as such (through a double, ids past 2^53 changed), unsigned ones apart */
      hid_t mt = cls == H5T_FLOAT ? H5T_NATIVE_DOUBLE : uns ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
      ok = h5ad_ds_read(ds, mt, 0, (uint64_t)n, 0, d) == 0;
    }
    for (int64_t i = 0; ok && i < n; i++) {
      char buf[64];
      if (cls == H5T_ENUM) snprintf(buf, sizeof buf, "%s", b[i] ? "True" : "False");
      else if (uns) snprintf(buf, sizeof buf, "%llu", (unsigned long long)((uint64_t *)d)[i]);
      else if (cls == H5T_INTEGER) snprintf(buf, sizeof buf, "%lld", (long long)((int64_t *)d)[i]);
      else fmt_real(d[i], buf, sizeof buf);
      if (!(v[i] = strdup(buf))) ok = 0;
    }
    free(d);
    free(b);
    if (!ok) { h5ad_fail(e, f, what); goto done; }
  } else {
    cv_fail(e, "%s: %s: unsupported category type", f->path, what);
    goto done;
  }
  *out = v;
  *n_out = (uint32_t)n;
  v = NULL;
  rc = 0;
done:
  if (v) h5ad_free_strs(v, n);
  colbuf_free(&cb);
  h5ad_close_id(&t);
  return rc;
}

static void col_free(h5col *c) {
  free(c->name);
  h5ad_close_id(&c->dset);
  h5ad_close_id(&c->mask);
  if (c->cats) h5ad_free_strs(c->cats, c->n_cats);
  memset(c, 0, sizeof *c);
  c->dset = c->mask = -1;
}

/* Kind of a plain dataset by its type (0 if unsupported). */
static int dset_kind(hid_t ds) {
  hid_t t = H5Dget_type(ds);
  int k = 0;
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: k = CVK_INT; break;
    case H5T_FLOAT: k = CVK_REAL; break;
    case H5T_STRING: k = CVK_TEXT; break;
    case H5T_ENUM: {
      hid_t nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
      if (H5Tget_nmembers(t) == 2 && H5Tget_size(nt) == 1) k = CVK_BOOL;
      H5Tclose(nt);
      break;
    }
    default: break;
  }
  H5Tclose(t);
  return k;
}

/* The numpy name of an integer or float dataset's type ("int8" .. "uint64", "float16" ..
** "float64": cv_dtype_of), else "". */
static void dset_dtype(hid_t ds, char out[8]) {
  out[0] = 0;
  hid_t t = H5Dget_type(ds);
  if (t < 0) return;
  const cv_dtype *d = cv_dtype_of(t);
  if (d) snprintf(out, 8, "%s", d->name);
  H5Tclose(t);
}

/* Opens column `name` of frame group g. Returns 0, -1 (error), or 1 (an
** unsupported column, skipped with a warning). */
int h5ad_col_open(h5file *f, hid_t g, const char *fpath, const char *name, uint64_t n_rows, h5col *c,
                  cv_err *e) {
  char what[600];
  hid_t o = -1;
  memset(c, 0, sizeof *c);
  c->dset = c->mask = -1;
  snprintf(what, sizeof what, "%s/%s", fpath, name);
  if (!(c->name = strdup(name))) return cv_fail(e, "out of memory");
  H5I_type_t t = h5ad_open_obj(g, name, &o);
  if (t == H5I_BADID) return cv_fail(e, "%s: %s: column listed but missing", f->path, what);
  if (t == H5I_GROUP) {
    char *enc = NULL;
    if (h5ad_attr_str(o, "encoding-type", &enc)) {
      h5ad_close_id(&o);
      return cv_fail(e, "%s: %s: its `encoding-type` attribute holds a NUL byte before its end (text cannot: "
                     "the rest would be lost)", f->path, what);
    }
    if (enc && strcmp(enc, "categorical") == 0) {
      hid_t cats = -1;
      c->enc = ENC_CAT;
      c->kind = CVK_CATEGORY;
      if (h5ad_open_obj(o, "codes", &c->dset) != H5I_DATASET ||
          h5ad_open_obj(o, "categories", &cats) != H5I_DATASET) {
        h5ad_close_id(&cats);
        free(enc);
        h5ad_close_id(&o);
        return cv_fail(e, "%s: %s: categorical without codes/categories", f->path, what);
      }
      char w2[700];
      snprintf(w2, sizeof w2, "%s/categories", what);
      c->ordered = h5ad_attr_true(o, "ordered");
      int rc = read_labels(f, cats, w2, &c->cats, &c->n_cats, c->dtype, e);
      h5ad_close_id(&cats);
      free(enc);
      h5ad_close_id(&o);
      if (rc) return -1;
    } else if (enc && (strcmp(enc, "nullable-integer") == 0 || strcmp(enc, "nullable-boolean") == 0)) {
      c->enc = ENC_NULLABLE;
      if (h5ad_open_obj(o, "values", &c->dset) != H5I_DATASET) {
        free(enc);
        h5ad_close_id(&o);
        return cv_fail(e, "%s: %s: %s without values", f->path, what, "nullable column");
      }
      if (h5ad_exists(o, "mask") && h5ad_open_obj(o, "mask", &c->mask) != H5I_DATASET) h5ad_close_id(&c->mask);
      c->kind = dset_kind(c->dset);
      dset_dtype(c->dset, c->dtype);
      free(enc);
      h5ad_close_id(&o);
      if (c->kind != CVK_INT && c->kind != CVK_BOOL && c->kind != CVK_REAL)
        return cv_fail(e, "%s: %s: nullable values of an unsupported type", f->path, what);
    } else {
      fprintf(stderr, "deltacells: warning: %s: %s: encoding '%s' is not an obs column type; skipped\n",
              f->path, what, enc ? enc : "(none)");
      free(enc);
      h5ad_close_id(&o);
      return 1;
    }
  } else {
    c->dset = o;
    /* anndata < 0.8: integer codes whose `categories` attribute refers to
    ** the categories dataset (obs/__categories/NAME) */
    if (H5Aexists(o, "categories") > 0) {
      hid_t a = H5Aopen(o, "categories", H5P_DEFAULT), at = H5Aget_type(a), cats = -1;
      if (H5Tget_class(at) == H5T_REFERENCE) {
        hobj_ref_t ref;
        if (H5Aread(a, H5T_STD_REF_OBJ, &ref) >= 0) cats = H5Rdereference2(o, H5P_DEFAULT, H5R_OBJECT, &ref);
      } else if (H5Tget_class(at) == H5T_STRING) {
        char *p = NULL;
        if (h5ad_attr_str(o, "categories", &p)) {
          H5Tclose(at);
          H5Aclose(a);
          return cv_fail(e, "%s: %s: its `categories` attribute holds a NUL byte before its end (text cannot: "
                         "the rest would be lost)", f->path, what);
        }
        if (p) h5ad_open_obj(g, p, &cats);
        free(p);
      }
      H5Tclose(at);
      H5Aclose(a);
      if (cats < 0 || H5Iget_type(cats) != H5I_DATASET) {
        h5ad_close_id(&cats);
        h5ad_walk w;
        return cv_fail(e, "%s: %s: its `categories` attribute does not lead to a dataset (%s)",
                       f->path, what, h5ad_reason(&w));
      }
      char w2[700];
      snprintf(w2, sizeof w2, "%s (categories)", what);
      c->ordered = h5ad_attr_true(cats, "ordered") || h5ad_attr_true(o, "ordered");
      int rc = read_labels(f, cats, w2, &c->cats, &c->n_cats, c->dtype, e);
      h5ad_close_id(&cats);
      if (rc) return -1;
      c->enc = ENC_CAT_OLD;
      c->kind = CVK_CATEGORY;
    } else {
      H5Eclear2(H5E_DEFAULT);
      c->kind = dset_kind(o);
      c->enc = c->kind == CVK_TEXT ? ENC_STR : ENC_NUM;
      if (c->kind == CVK_INT || c->kind == CVK_REAL) dset_dtype(o, c->dtype);
      if (!c->kind) {
        fprintf(stderr, "deltacells: warning: %s: %s: unsupported data type; column skipped\n",
                f->path, what);
        return 1;
      }
    }
  }
  int64_t len = h5ad_ds_len(c->dset);
  if (len < 0) {
    fprintf(stderr, "deltacells: warning: %s: %s: not a 1-D column; skipped\n", f->path, what);
    return 1;
  }
  if ((uint64_t)len != n_rows)
    return cv_fail(e, "%s: %s: %lld values, but the frame has %llu rows", f->path, what,
                   (long long)len, (unsigned long long)n_rows);
  if (c->mask >= 0 && h5ad_ds_len(c->mask) != len)
    return cv_fail(e, "%s: %s/mask: length differs from values", f->path, what);
  return 0;
}

void h5ad_frame_free(h5frame *fr) {
  col_free(&fr->index);
  for (int i = 0; i < fr->n_cols; i++) col_free(&fr->cols[i]);
  free(fr->cols);
  fr->cols = NULL;
  fr->n_cols = 0;
}

int h5ad_frame_open(h5file *f, const char *path, h5frame *fr, cv_err *e) {
  hid_t g = -1;
  char **order = NULL;
  long n_order = 0;
  int rc = -1;
  memset(fr, 0, sizeof *fr);
  fr->index.dset = fr->index.mask = -1;
  snprintf(fr->path, sizeof fr->path, "%s", path);
  H5I_type_t t = h5ad_open_obj(f->fid, path, &g);
  if (t == H5I_BADID)
    return cv_fail(e, "%s: no '%s' group: not an h5ad file (nor a 10x HDF5 file: no 'matrix' group)", f->path, path);
  if (t != H5I_GROUP) {
    h5ad_close_id(&g);
    return cv_fail(e, "%s: %s is a dataset (a structured array of anndata < 0.7), which is not "
                   "supported: re-save the file with a newer anndata", f->path, path);
  }
  char *idx = NULL;
  if (h5ad_attr_str(g, "_index", &idx)) {
    cv_fail(e, "%s: %s: its `_index` attribute holds a NUL byte before its end (text cannot: the rest would "
            "be lost)", f->path, path);
    goto done;
  }
  if (!idx) {
    if (h5ad_exists(g, "_index")) idx = strdup("_index");
    else if (h5ad_exists(g, "index")) idx = strdup("index");
  }
  if (!idx) { cv_fail(e, "%s: %s: no `_index` attribute naming the index", f->path, path); goto done; }
  /* the index: opened as a column (may be categorical or numeric) */
  {
    hid_t ids = -1;
    H5I_type_t it = h5ad_open_obj(g, idx, &ids);
    if (it == H5I_BADID) {
      cv_fail(e, "%s: %s: the index '%s' is missing", f->path, path, idx);
      free(idx);
      goto done;
    }
    int64_t n = -1;
    if (it == H5I_DATASET) n = h5ad_ds_len(ids);
    else {
      hid_t codes = -1;
      if (h5ad_open_obj(ids, "codes", &codes) == H5I_DATASET) n = h5ad_ds_len(codes);
      else if (h5ad_open_obj(ids, "values", &codes) == H5I_DATASET) n = h5ad_ds_len(codes);
      h5ad_close_id(&codes);
    }
    h5ad_close_id(&ids);
    if (n < 0) {
      cv_fail(e, "%s: %s/%s: the index is not a 1-D array", f->path, path, idx);
      free(idx);
      goto done;
    }
    fr->n_rows = (uint64_t)n;
    int r = h5ad_col_open(f, g, path, idx, fr->n_rows, &fr->index, e);
    free(idx);
    if (r == 1) cv_fail(e, "%s: %s: the index has an unsupported type", f->path, path);
    if (r) goto done;
  }
  n_order = h5ad_attr_strs(g, "column-order", &order);
  if (n_order == -2) {
    cv_fail(e, "%s: %s: a name in its `column-order` attribute holds a NUL byte before its end (text cannot: "
            "the rest would be lost)", f->path, path);
    goto done;
  }
  if (n_order < 0) { cv_fail(e, "%s: %s: unreadable `column-order` attribute", f->path, path); goto done; }
  fr->cols = calloc((size_t)n_order + 1, sizeof *fr->cols);
  if (!fr->cols) { cv_fail(e, "out of memory"); goto done; }
  for (long i = 0; i < n_order; i++) {
    h5col *c = &fr->cols[fr->n_cols];
    int r = h5ad_col_open(f, g, path, order[i], fr->n_rows, c, e);
    if (r < 0) { col_free(c); goto done; }
    if (r == 1) { col_free(c); continue; }
    fr->n_cols++;
  }
  rc = 0;
done:
  h5ad_free_strs(order, n_order);
  h5ad_close_id(&g);
  return rc;
}

/* ------------------------------------------------------------ column reads */
int h5ad_col_read(h5file *f, const h5col *c, uint64_t start, size_t n, colbuf *out, cv_err *e) {
  char what[600];
  snprintf(what, sizeof what, "%s", c->name);
  if (colbuf_reset(out, c->kind, n, e)) return -1;
  if (n == 0) return 0;
  switch (c->kind) {
    case CVK_CATEGORY: {
      if (h5ad_ds_read(c->dset, H5T_NATIVE_INT64, start, n, 0, out->i64) < 0) return h5ad_fail(e, f, what);
      for (size_t i = 0; i < n; i++) {
        int64_t v = out->i64[i];
        if (v >= (int64_t)c->n_cats)
          return cv_fail(e, "%s: column %s: code %lld of row %llu is not below the %u categories",
                         f->path, c->name, (long long)v, (unsigned long long)(start + i), c->n_cats);
        out->codes[i] = v < 0 ? -1 : (int32_t)v;
      }
      return 0;
    }
    case CVK_INT:
      if (!strcmp(c->dtype, "uint64")) {
        /* HDF5's conversion to int64 clamps 2^63 and up to 2^63-1 without a word */
        uint64_t *u = (uint64_t *)out->i64;
        if (h5ad_ds_read(c->dset, H5T_NATIVE_UINT64, start, n, 0, u) < 0) return h5ad_fail(e, f, what);
        for (size_t i = 0; i < n; i++)
          if (u[i] > (uint64_t)INT64_MAX)
            return cv_fail(e, "%s: column %s: value %llu of row %llu does not fit a signed 64-bit integer, "
                           "which is how the dataset stores integers; make the column float64 or text first",
                           f->path, c->name, (unsigned long long)u[i], (unsigned long long)(start + i));
      } else if (h5ad_ds_read(c->dset, H5T_NATIVE_INT64, start, n, 0, out->i64) < 0) {
        return h5ad_fail(e, f, what);
      }
      memset(out->valid, 1, n);
      break;
    case CVK_REAL:
      if (h5ad_ds_read(c->dset, H5T_NATIVE_DOUBLE, start, n, 0, out->f64) < 0) return h5ad_fail(e, f, what);
      break;
    case CVK_BOOL: {
      hid_t t = H5Dget_type(c->dset), nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
      int r = h5ad_ds_read(c->dset, nt, start, n, 0, out->b8);
      H5Tclose(nt);
      H5Tclose(t);
      if (r < 0) return h5ad_fail(e, f, what);
      for (size_t i = 0; i < n; i++) out->b8[i] = out->b8[i] ? 1 : 0;
      break;
    }
    case CVK_TEXT:
      if (h5ad_read_strs(f, c->dset, what, start, n, out, 0, e)) return -1;
      colbuf_text_done(out);
      return 0;
  }
  if (c->mask >= 0) {
    hid_t t = H5Dget_type(c->mask), nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
    uint8_t *m = malloc(n * (H5Tget_size(nt) > 8 ? H5Tget_size(nt) : 8));
    int r = m ? h5ad_ds_read(c->mask, H5Tget_class(nt) == H5T_ENUM ? nt : H5T_NATIVE_UINT8, start, n, 0, m) : -1;
    H5Tclose(nt);
    H5Tclose(t);
    if (r < 0) { free(m); return h5ad_fail(e, f, "mask"); }
    for (size_t i = 0; i < n; i++) {
      if (!m[i]) continue;
      if (c->kind == CVK_INT) out->valid[i] = 0;
      else if (c->kind == CVK_BOOL) out->b8[i] = -1;
      else if (c->kind == CVK_REAL) out->f64[i] = NAN;
    }
    free(m);
  }
  return 0;
}

void h5ad_cell_name(h5file *f, uint64_t row, char *buf, size_t n) {
  colbuf cb = {0};
  cv_err e;
  snprintf(buf, n, "row %llu", (unsigned long long)row);
  if (f->obs.index.dset >= 0 && h5ad_col_read(f, &f->obs.index, row, 1, &cb, &e) == 0) {
    if (cb.kind == CVK_TEXT && cb.text[0])
      snprintf(buf, n, "'%s' (row %llu)", cb.text[0], (unsigned long long)row);
    else if (cb.kind == CVK_CATEGORY && cb.codes[0] >= 0)
      snprintf(buf, n, "'%s' (row %llu)", f->obs.index.cats[cb.codes[0]], (unsigned long long)row);
  }
  colbuf_free(&cb);
}

/* f->var_names from the var index, or from var column gene_key. */
int h5ad_gene_names(h5file *f, const char *gene_key, cv_err *e) {
  /* gene names: the var index, or the --gene-key column */
  const h5col *gc = &f->var.index;
  if (gene_key) {
    gc = NULL;
    for (int i = 0; i < f->var.n_cols; i++)
      if (strcmp(f->var.cols[i].name, gene_key) == 0) gc = &f->var.cols[i];
    if (!gc) {
      const char **nm = calloc((size_t)f->var.n_cols + 1, sizeof *nm);
      if (!nm) return cv_fail(e, "out of memory");
      for (int i = 0; i < f->var.n_cols; i++) nm[i] = f->var.cols[i].name;
      const char *best = cv_closest(gene_key, nm, f->var.n_cols);
      char list[1024], hint[300] = "";
      cv_list_names(list, sizeof list, nm, f->var.n_cols);
      if (best) snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
      free(nm);
      return cv_fail(e, "%s: --gene-key: %s has no column '%s' (its columns: %s)%s", f->path, f->var.path, gene_key,
                     list, hint);
    }
  }
  f->var_names = calloc(f->n_vars + 1, sizeof *f->var_names);
  if (!f->var_names) return cv_fail(e, "out of memory");
  colbuf cb = {0};
  for (uint64_t s = 0; s < f->n_vars; s += 65536) {
    size_t k = (size_t)(f->n_vars - s < 65536 ? f->n_vars - s : 65536);
    if (h5ad_col_read(f, gc, s, k, &cb, e)) { colbuf_free(&cb); return cv_prefix(e, "gene names of %s", f->var.path); }
    for (size_t i = 0; i < k; i++) {
      char buf[64];
      const char *s1 = buf;
      switch (cb.kind) {
        case CVK_TEXT: s1 = cb.text[i]; break;
        case CVK_CATEGORY: s1 = cb.codes[i] < 0 ? NULL : gc->cats[cb.codes[i]]; break;
        case CVK_INT: if (cb.valid[i]) snprintf(buf, sizeof buf, "%lld", (long long)cb.i64[i]); else s1 = NULL; break;
        case CVK_REAL: if (!isnan(cb.f64[i])) fmt_real(cb.f64[i], buf, sizeof buf); else s1 = NULL; break;
        case CVK_BOOL: if (cb.b8[i] >= 0) snprintf(buf, sizeof buf, "%s", cb.b8[i] ? "True" : "False"); else s1 = NULL; break;
      }
      if (!s1) {
        colbuf_free(&cb);
        return cv_fail(e, "%s: gene %llu of %s has no name (missing value in '%s')", f->path,
                       (unsigned long long)(s + i), f->var.path, gc->name);
      }
      if (!cv_utf8_valid(s1, strlen(s1))) {
        colbuf_free(&cb);
        return cv_fail(e, "%s: gene %llu of %s: its name is not valid UTF-8", f->path, (unsigned long long)(s + i),
                       f->var.path);
      }
      if (!(f->var_names[s + i] = strdup(s1))) { colbuf_free(&cb); return cv_fail(e, "out of memory"); }
    }
  }
  colbuf_free(&cb);
  return 0;
}


uint64_t h5ad_strip_gene_names(h5file *f, int apply) {
  uint64_t n = 0;
  for (uint64_t i = 0; f->var_names && i < f->n_vars; i++) {
    char *s = f->var_names[i];
    size_t a = 0, b = strlen(s);
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    if (a == b || (a == 0 && s[b] == 0)) continue; /* all blank: kept as it is */
    n++;
    if (!apply) continue;
    memmove(s, s + a, b - a);
    s[b - a] = 0;
  }
  return n;
}
