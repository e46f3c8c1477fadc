/*
** h5ad.c — reading h5ad files with the HDF5 C library (see h5ad.h).
*/
#include "h5ad.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ------------------------------------------------------------ HDF5 errors */
typedef struct h5_walk { char msg[400]; } h5_walk;
static herr_t walk_cb(unsigned n, const H5E_error2_t *d, void *arg) {
  h5_walk *w = arg;
  (void)n;
  /* walked upward: the first entry is the innermost; keep it */
  if (!w->msg[0] && d->desc && d->desc[0]) snprintf(w->msg, sizeof w->msg, "%s", d->desc);
  return 0;
}
/* The innermost message of HDF5's current error stack ("" if none). */
static const char *h5_reason(h5_walk *w) {
  w->msg[0] = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, w);
  H5Eclear2(H5E_DEFAULT);
  return w->msg[0] ? w->msg : "HDF5 read error";
}
static int h5_fail(cv_err *e, const h5file *f, const char *what) {
  h5_walk w;
  return cv_fail(e, "%s: %s: %s", f->path, what, h5_reason(&w));
}

/* ------------------------------------------------------------ helpers */
static void close_id(hid_t *id) {
  if (*id >= 0) {
    H5I_type_t t = H5Iget_type(*id);
    if (t == H5I_DATASET) H5Dclose(*id);
    else if (t == H5I_GROUP) H5Gclose(*id);
    else if (t == H5I_ATTR) H5Aclose(*id);
    else if (t == H5I_DATATYPE) H5Tclose(*id);
    else if (t == H5I_DATASPACE) H5Sclose(*id);
    else if (t == H5I_FILE) H5Fclose(*id);
  }
  *id = -1;
}

/* 1 if every component of path exists below loc. */
static int h5_exists(hid_t loc, const char *path) {
  char buf[1024];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) return 0;
  memcpy(buf, path, n + 1);
  for (size_t i = 0; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      htri_t ok = H5Lexists(loc, buf, H5P_DEFAULT);
      if (ok <= 0) { H5Eclear2(H5E_DEFAULT); return 0; }
      buf[i] = c;
    }
  }
  return 1;
}

/* H5I_GROUP, H5I_DATASET, or H5I_BADID. Opens the object into *out. */
static H5I_type_t h5_open_obj(hid_t loc, const char *path, hid_t *out) {
  *out = -1;
  if (!h5_exists(loc, path)) return H5I_BADID;
  hid_t o = H5Oopen(loc, path, H5P_DEFAULT);
  if (o < 0) { H5Eclear2(H5E_DEFAULT); return H5I_BADID; }
  H5I_type_t t = H5Iget_type(o);
  if (t != H5I_GROUP && t != H5I_DATASET) { H5Oclose(o); return H5I_BADID; }
  *out = o;
  return t;
}

/* Reads a string attribute (scalar, or first element). *out malloc'd or NULL
** if absent / not a string. */
static char *attr_str(hid_t obj, const char *name) {
  if (H5Aexists(obj, name) <= 0) { H5Eclear2(H5E_DEFAULT); return NULL; }
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = -1, sp = -1, mt = -1;
  char *res = NULL;
  if (a < 0) goto done;
  t = H5Aget_type(a);
  sp = H5Aget_space(a);
  if (t < 0 || sp < 0 || H5Tget_class(t) != H5T_STRING) goto done;
  hssize_t np = H5Sget_simple_extent_npoints(sp);
  if (np < 1) goto done;
  if (H5Tis_variable_str(t) > 0) {
    mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5T_CSET_UTF8);
    char **v = calloc((size_t)np, sizeof *v);
    if (v && H5Aread(a, mt, v) >= 0) {
      res = v[0] ? strdup(v[0]) : strdup("");
      H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
    }
    free(v);
  } else {
    size_t sz = H5Tget_size(t);
    char *v = calloc((size_t)np * sz + 1, 1);
    mt = H5Tcopy(t);
    if (v && H5Aread(a, mt, v) >= 0) {
      v[sz] = 0;
      size_t k = strlen(v);
      while (k > 0 && v[k - 1] == ' ') v[--k] = 0;
      res = v;
      v = NULL;
    }
    free(v);
  }
done:
  close_id(&mt); close_id(&sp); close_id(&t); close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return res;
}

/* Reads a string-array attribute (e.g. column-order). Returns count or -1;
** an absent attribute or a numeric empty array gives 0. */
static long attr_strs(hid_t obj, const char *name, char ***out) {
  *out = NULL;
  if (H5Aexists(obj, name) <= 0) { H5Eclear2(H5E_DEFAULT); return 0; }
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = -1, sp = -1, mt = -1;
  long res = -1;
  if (a < 0) goto done;
  t = H5Aget_type(a);
  sp = H5Aget_space(a);
  if (t < 0 || sp < 0) goto done;
  hssize_t np = H5Sget_simple_extent_npoints(sp);
  if (np < 0) goto done;
  if (np == 0) { res = 0; goto done; }
  if (H5Tget_class(t) != H5T_STRING) goto done;
  char **v = calloc((size_t)np, sizeof *v);
  if (!v) goto done;
  if (H5Tis_variable_str(t) > 0) {
    mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5T_CSET_UTF8);
    char **raw = calloc((size_t)np, sizeof *raw);
    if (raw && H5Aread(a, mt, raw) >= 0) {
      for (hssize_t i = 0; i < np; i++) v[i] = strdup(raw[i] ? raw[i] : "");
      H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, raw);
      res = (long)np;
    }
    free(raw);
  } else {
    size_t sz = H5Tget_size(t);
    char *raw = calloc((size_t)np * sz + 1, 1);
    mt = H5Tcopy(t);
    if (raw && H5Aread(a, mt, raw) >= 0) {
      for (hssize_t i = 0; i < np; i++) {
        size_t k = strnlen(raw + (size_t)i * sz, sz);
        while (k > 0 && raw[(size_t)i * sz + k - 1] == ' ') k--;
        v[i] = strndup(raw + (size_t)i * sz, k);
      }
      res = (long)np;
    }
    free(raw);
  }
  if (res < 0) { free(v); v = NULL; }
  else for (long i = 0; i < res; i++) if (!v[i]) res = -1;
  *out = v;
done:
  close_id(&mt); close_id(&sp); close_id(&t); close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return res;
}

static void free_strs(char **v, long n) {
  if (!v) return;
  for (long i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Reads an integer-array attribute (shape). Returns count or -1. */
static int attr_ints(hid_t obj, const char *name, int64_t *out, int max) {
  if (H5Aexists(obj, name) <= 0) { H5Eclear2(H5E_DEFAULT); return -1; }
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), sp = -1, t = -1;
  int res = -1;
  if (a < 0) goto done;
  sp = H5Aget_space(a);
  t = H5Aget_type(a);
  hssize_t np = H5Sget_simple_extent_npoints(sp);
  if (np < 1 || np > max || H5Tget_class(t) != H5T_INTEGER) goto done;
  if (H5Aread(a, H5T_NATIVE_INT64, out) >= 0) res = (int)np;
done:
  close_id(&t); close_id(&sp); close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return res;
}

/* Length of a 1-D dataset, or -1 if not 1-D. */
static int64_t ds_len1(hid_t ds) {
  hid_t sp = H5Dget_space(ds);
  if (sp < 0) return -1;
  int nd = H5Sget_simple_extent_ndims(sp);
  hsize_t d[2] = {0, 0};
  int64_t r = -1;
  if (nd == 1 && H5Sget_simple_extent_dims(sp, d, NULL) == 1) r = (int64_t)d[0];
  H5Sclose(sp);
  return r;
}

/* Reads [start, start+count) of a 1-D dataset, or rows of a 2-D one
** (count rows x ncols when ncols > 0). */
static int ds_read(hid_t ds, hid_t mt, uint64_t start, uint64_t count, uint64_t ncols,
                   void *buf) {
  if (count == 0) return 0;
  hid_t fs = H5Dget_space(ds), ms = -1;
  int rc = -1;
  if (fs < 0) return -1;
  if (ncols) {
    hsize_t st[2] = {start, 0}, ct[2] = {count, ncols};
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, ct, NULL) < 0) goto done;
    ms = H5Screate_simple(2, ct, NULL);
  } else {
    hsize_t st = start, ct = count;
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &st, NULL, &ct, NULL) < 0) goto done;
    ms = H5Screate_simple(1, &ct, NULL);
  }
  if (ms < 0) goto done;
  if (H5Dread(ds, mt, ms, fs, H5P_DEFAULT, buf) >= 0) rc = 0;
done:
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  return rc;
}

static hid_t vlen_str_type(void) {
  hid_t mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, H5T_VARIABLE);
  H5Tset_cset(mt, H5T_CSET_UTF8);
  return mt;
}

/* Reads strings [start, start+n) of a string dataset into cb (kind text) at
** positions off.. . */
static int read_strs(h5file *f, hid_t ds, const char *what, uint64_t start, size_t n,
                     colbuf *cb, size_t off, cv_err *e) {
  if (n == 0) return 0;
  hid_t t = H5Dget_type(ds), mt = -1;
  int rc = -1;
  if (t < 0) return h5_fail(e, f, what);
  if (H5Tis_variable_str(t) > 0) {
    mt = vlen_str_type();
    char **v = calloc(n, sizeof *v);
    if (!v) { cv_fail(e, "out of memory"); goto done; }
    if (ds_read(ds, mt, start, n, 0, v) < 0) { free(v); h5_fail(e, f, what); goto done; }
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
      const char *s = v[i] ? v[i] : "";
      rc = colbuf_text_set(cb, off + i, s, strlen(s), e);
    }
    hsize_t hn = n;
    hid_t ms = H5Screate_simple(1, &hn, NULL);
    H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, v);
    H5Sclose(ms);
    free(v);
  } else {
    size_t sz = H5Tget_size(t);
    mt = H5Tcopy(t);
    char *v = malloc(n * sz + 1);
    if (!v) { cv_fail(e, "out of memory"); goto done; }
    if (ds_read(ds, mt, start, n, 0, v) < 0) { free(v); h5_fail(e, f, what); goto done; }
    H5T_str_t pad = H5Tget_strpad(t);
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
      const char *s = v + i * sz;
      size_t k = strnlen(s, sz);
      if (pad == H5T_STR_SPACEPAD) while (k > 0 && s[k - 1] == ' ') k--;
      rc = colbuf_text_set(cb, off + i, s, k, e);
    }
    free(v);
  }
done:
  close_id(&mt);
  close_id(&t);
  return rc;
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
                       cv_err *e) {
  int64_t n = ds_len1(ds);
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
  if (cls == H5T_STRING) {
    for (int64_t s = 0; s < n; s += 65536) {
      size_t k = (size_t)(n - s < 65536 ? n - s : 65536);
      if (colbuf_reset(&cb, CVK_TEXT, k, e) || read_strs(f, ds, what, (uint64_t)s, k, &cb, 0, e))
        goto done;
      for (size_t i = 0; i < k; i++)
        if (!(v[s + (int64_t)i] = strdup(cb.arena + cb.text_off[i]))) { cv_fail(e, "out of memory"); goto done; }
    }
  } else if (cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM) {
    double *d = malloc(((size_t)n + 1) * sizeof *d);
    int8_t *b = malloc((size_t)n + 1);
    int ok = d && b;
    if (ok && cls == H5T_ENUM) {
      hid_t nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
      ok = H5Tget_size(nt) == 1 && ds_read(ds, nt, 0, (uint64_t)n, 0, b) == 0;
      H5Tclose(nt);
    } else if (ok) {
      ok = ds_read(ds, H5T_NATIVE_DOUBLE, 0, (uint64_t)n, 0, d) == 0;
    }
    for (int64_t i = 0; ok && i < n; i++) {
      char buf[64];
      if (cls == H5T_ENUM) snprintf(buf, sizeof buf, "%s", b[i] ? "True" : "False");
      else if (cls == H5T_INTEGER) snprintf(buf, sizeof buf, "%.0f", d[i]);
      else fmt_real(d[i], buf, sizeof buf);
      if (!(v[i] = strdup(buf))) ok = 0;
    }
    free(d);
    free(b);
    if (!ok) { h5_fail(e, f, what); goto done; }
  } else {
    cv_fail(e, "%s: %s: unsupported category type", f->path, what);
    goto done;
  }
  *out = v;
  *n_out = (uint32_t)n;
  v = NULL;
  rc = 0;
done:
  if (v) free_strs(v, n);
  colbuf_free(&cb);
  close_id(&t);
  return rc;
}

static void col_free(h5col *c) {
  free(c->name);
  close_id(&c->dset);
  close_id(&c->mask);
  if (c->cats) free_strs(c->cats, c->n_cats);
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
  H5I_type_t t = h5_open_obj(g, name, &o);
  if (t == H5I_BADID) return cv_fail(e, "%s: %s: column listed but missing", f->path, what);
  if (t == H5I_GROUP) {
    char *enc = attr_str(o, "encoding-type");
    if (enc && strcmp(enc, "categorical") == 0) {
      hid_t cats = -1;
      c->enc = ENC_CAT;
      c->kind = CVK_CATEGORY;
      if (h5_open_obj(o, "codes", &c->dset) != H5I_DATASET ||
          h5_open_obj(o, "categories", &cats) != H5I_DATASET) {
        close_id(&cats);
        free(enc);
        close_id(&o);
        return cv_fail(e, "%s: %s: categorical without codes/categories", f->path, what);
      }
      char w2[700];
      snprintf(w2, sizeof w2, "%s/categories", what);
      int rc = read_labels(f, cats, w2, &c->cats, &c->n_cats, e);
      close_id(&cats);
      free(enc);
      close_id(&o);
      if (rc) return -1;
    } else if (enc && (strcmp(enc, "nullable-integer") == 0 || strcmp(enc, "nullable-boolean") == 0)) {
      c->enc = ENC_NULLABLE;
      if (h5_open_obj(o, "values", &c->dset) != H5I_DATASET) {
        free(enc);
        close_id(&o);
        return cv_fail(e, "%s: %s: %s without values", f->path, what, "nullable column");
      }
      if (h5_exists(o, "mask") && h5_open_obj(o, "mask", &c->mask) != H5I_DATASET) close_id(&c->mask);
      c->kind = dset_kind(c->dset);
      free(enc);
      close_id(&o);
      if (c->kind != CVK_INT && c->kind != CVK_BOOL && c->kind != CVK_REAL)
        return cv_fail(e, "%s: %s: nullable values of an unsupported type", f->path, what);
    } else {
      fprintf(stderr, "deltacells: warning: %s: %s: encoding '%s' is not an obs column type; skipped\n",
              f->path, what, enc ? enc : "(none)");
      free(enc);
      close_id(&o);
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
        char *p = attr_str(o, "categories");
        if (p) h5_open_obj(g, p, &cats);
        free(p);
      }
      H5Tclose(at);
      H5Aclose(a);
      if (cats < 0 || H5Iget_type(cats) != H5I_DATASET) {
        close_id(&cats);
        h5_walk w;
        return cv_fail(e, "%s: %s: its `categories` attribute does not lead to a dataset (%s)",
                       f->path, what, h5_reason(&w));
      }
      char w2[700];
      snprintf(w2, sizeof w2, "%s (categories)", what);
      int rc = read_labels(f, cats, w2, &c->cats, &c->n_cats, e);
      close_id(&cats);
      if (rc) return -1;
      c->enc = ENC_CAT_OLD;
      c->kind = CVK_CATEGORY;
    } else {
      H5Eclear2(H5E_DEFAULT);
      c->kind = dset_kind(o);
      c->enc = c->kind == CVK_TEXT ? ENC_STR : ENC_NUM;
      if (!c->kind) {
        fprintf(stderr, "deltacells: warning: %s: %s: unsupported data type; column skipped\n",
                f->path, what);
        return 1;
      }
    }
  }
  int64_t len = ds_len1(c->dset);
  if (len < 0) {
    fprintf(stderr, "deltacells: warning: %s: %s: not a 1-D column; skipped\n", f->path, what);
    return 1;
  }
  if ((uint64_t)len != n_rows)
    return cv_fail(e, "%s: %s: %lld values, but the frame has %llu rows", f->path, what,
                   (long long)len, (unsigned long long)n_rows);
  if (c->mask >= 0 && ds_len1(c->mask) != len)
    return cv_fail(e, "%s: %s/mask: length differs from values", f->path, what);
  return 0;
}

static void frame_free(h5frame *fr) {
  col_free(&fr->index);
  for (int i = 0; i < fr->n_cols; i++) col_free(&fr->cols[i]);
  free(fr->cols);
  fr->cols = NULL;
  fr->n_cols = 0;
}

static int frame_open(h5file *f, const char *path, h5frame *fr, cv_err *e) {
  hid_t g = -1;
  char **order = NULL;
  long n_order = 0;
  int rc = -1;
  memset(fr, 0, sizeof *fr);
  fr->index.dset = fr->index.mask = -1;
  snprintf(fr->path, sizeof fr->path, "%s", path);
  H5I_type_t t = h5_open_obj(f->fid, path, &g);
  if (t == H5I_BADID)
    return cv_fail(e, "%s: no '%s' group: not an h5ad file (nor a 10x HDF5 file: no 'matrix' group)", f->path, path);
  if (t != H5I_GROUP) {
    close_id(&g);
    return cv_fail(e, "%s: %s is a dataset (a structured array of anndata < 0.7), which is not "
                   "supported: re-save the file with a newer anndata", f->path, path);
  }
  char *idx = attr_str(g, "_index");
  if (!idx) {
    if (h5_exists(g, "_index")) idx = strdup("_index");
    else if (h5_exists(g, "index")) idx = strdup("index");
  }
  if (!idx) { cv_fail(e, "%s: %s: no `_index` attribute naming the index", f->path, path); goto done; }
  /* the index: opened as a column (may be categorical or numeric) */
  {
    hid_t ids = -1;
    H5I_type_t it = h5_open_obj(g, idx, &ids);
    if (it == H5I_BADID) {
      cv_fail(e, "%s: %s: the index '%s' is missing", f->path, path, idx);
      free(idx);
      goto done;
    }
    int64_t n = -1;
    if (it == H5I_DATASET) n = ds_len1(ids);
    else {
      hid_t codes = -1;
      if (h5_open_obj(ids, "codes", &codes) == H5I_DATASET) n = ds_len1(codes);
      else if (h5_open_obj(ids, "values", &codes) == H5I_DATASET) n = ds_len1(codes);
      close_id(&codes);
    }
    close_id(&ids);
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
  n_order = attr_strs(g, "column-order", &order);
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
  free_strs(order, n_order);
  close_id(&g);
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
      if (ds_read(c->dset, H5T_NATIVE_INT64, start, n, 0, out->i64) < 0) return h5_fail(e, f, what);
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
      if (ds_read(c->dset, H5T_NATIVE_INT64, start, n, 0, out->i64) < 0) return h5_fail(e, f, what);
      memset(out->valid, 1, n);
      break;
    case CVK_REAL:
      if (ds_read(c->dset, H5T_NATIVE_DOUBLE, start, n, 0, out->f64) < 0) return h5_fail(e, f, what);
      break;
    case CVK_BOOL: {
      hid_t t = H5Dget_type(c->dset), nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
      int r = ds_read(c->dset, nt, start, n, 0, out->b8);
      H5Tclose(nt);
      H5Tclose(t);
      if (r < 0) return h5_fail(e, f, what);
      for (size_t i = 0; i < n; i++) out->b8[i] = out->b8[i] ? 1 : 0;
      break;
    }
    case CVK_TEXT:
      if (read_strs(f, c->dset, what, start, n, out, 0, e)) return -1;
      colbuf_text_done(out);
      return 0;
  }
  if (c->mask >= 0) {
    hid_t t = H5Dget_type(c->mask), nt = H5Tget_native_type(t, H5T_DIR_ASCEND);
    uint8_t *m = malloc(n * (H5Tget_size(nt) > 8 ? H5Tget_size(nt) : 8));
    int r = m ? ds_read(c->mask, H5Tget_class(nt) == H5T_ENUM ? nt : H5T_NATIVE_UINT8, start, n, 0, m) : -1;
    H5Tclose(nt);
    H5Tclose(t);
    if (r < 0) { free(m); return h5_fail(e, f, "mask"); }
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

/* ------------------------------------------------------------ open */
static int open_x_dset(h5file *f, hid_t g, const char *name, hid_t *out, cv_err *e) {
  hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
  H5Pset_chunk_cache(dapl, 12421, (size_t)16 << 20, 1.0);
  *out = h5_exists(g, name) ? H5Dopen2(g, name, dapl) : -1;
  H5Pclose(dapl);
  if (*out < 0) {
    H5Eclear2(H5E_DEFAULT);
    return cv_fail(e, "%s: %s: sparse matrix without '%s'", f->path, f->mpath, name);
  }
  return 0;
}

/* The names of group path's members (sorted by name); 0 if none or absent. */
static int group_members(hid_t fid, const char *path, char ***out) {
  *out = NULL;
  if (!h5_exists(fid, path)) return 0;
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
  int64_t nd = ds_len1(f->data), ni = ds_len1(f->indices), np = ds_len1(f->indptr);
  if (nd < 0 || ni < 0 || np < 0) return cv_fail(e, "%s: %s: data/indices/indptr must be 1-D", f->path, f->mpath);
  if (nd != ni)
    return cv_fail(e, "%s: %s: data has %lld values but indices %lld", f->path, f->mpath, (long long)nd, (long long)ni);
  int64_t major = f->fmt == MAT_CSR ? shape[0] : shape[1];
  if (np != major + 1)
    return cv_fail(e, "%s: %s: indptr has %lld entries, but shape %lld x %lld needs %lld", f->path,
                   f->mpath, (long long)np, (long long)shape[0], (long long)shape[1], (long long)(major + 1));
  int64_t ends[2];
  if (np > 0) {
    if (ds_read(f->indptr, H5T_NATIVE_INT64, 0, 1, 0, &ends[0]) < 0 ||
        ds_read(f->indptr, H5T_NATIVE_INT64, (uint64_t)np - 1, 1, 0, &ends[1]) < 0)
      return h5_fail(e, f, "indptr");
    if (ends[0] != 0 || ends[1] != nd)
      return cv_fail(e, "%s: %s: indptr runs from %lld to %lld, but there are %lld values", f->path,
                     f->mpath, (long long)ends[0], (long long)ends[1], (long long)nd);
  }
  f->nnz = (uint64_t)nd;
  return 0;
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
  if (f->fid < 0) return h5_fail(e, f, "cannot open (truncated or damaged file?)");

  if (layer) snprintf(f->mpath, sizeof f->mpath, "layers/%s", layer);
  else snprintf(f->mpath, sizeof f->mpath, "%s", raw ? "raw/X" : "X");
  if (frame_open(f, "obs", &f->obs, e)) return -1;
  if (raw && !h5_exists(f->fid, "raw"))
    return cv_fail(e, "%s: --raw: the file has no raw counts (no 'raw' group); counts are in X%s", path,
                   h5_exists(f->fid, "layers") ? " or a layer (--layer NAME)" : "");
  if (raw && !h5_exists(f->fid, "raw/var"))
    return cv_fail(e, "%s: --raw: the file's 'raw' group has no 'var' (damaged raw?)", path);
  if (frame_open(f, raw ? "raw/var" : "var", &f->var, e)) return -1;
  f->n_obs = f->obs.n_rows;
  f->n_vars = f->var.n_rows;
  if (f->n_obs >= UINT32_MAX) return cv_fail(e, "%s: %llu cells: at most 2^32-2 per file", path, (unsigned long long)f->n_obs);
  if (f->n_vars >= INT32_MAX) return cv_fail(e, "%s: %llu genes: too many", path, (unsigned long long)f->n_vars);

  H5I_type_t t = h5_open_obj(f->fid, f->mpath, &x);
  if (t == H5I_BADID) {
    if (layer && !h5_exists(f->fid, f->mpath)) {
      char **nm = NULL, list[1024], hint[300] = "";
      int n = group_members(f->fid, "layers", &nm);
      const char *best = cv_closest(layer, (const char *const *)nm, n);
      cv_list_names(list, sizeof list, (const char *const *)nm, n);
      if (best) snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
      cv_fail(e, "%s: no layer '%s' (the file's layers: %s)%s", path, layer, list, hint);
      free_strs(nm, n);
      return -1;
    }
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
    char *enc = attr_str(x, "encoding-type");
    char *old = attr_str(x, "h5sparse_format");
    if (enc && strcmp(enc, "csr_matrix") == 0) f->fmt = MAT_CSR;
    else if (enc && strcmp(enc, "csc_matrix") == 0) f->fmt = MAT_CSC;
    else if (!enc && old && strcmp(old, "csr") == 0) f->fmt = MAT_CSR;
    else if (!enc && old && strcmp(old, "csc") == 0) f->fmt = MAT_CSC;
    int n = attr_ints(x, "shape", shape, 2);
    if (n < 0) n = attr_ints(x, "h5sparse_shape", shape, 2);
    free(old);
    if (!f->fmt) {
      cv_fail(e, "%s: %s: a group that is not a sparse matrix (encoding-type '%s')", path, f->mpath,
              enc ? enc : "none");
      free(enc);
      close_id(&x);
      return -1;
    }
    free(enc);
    if (n != 2) { close_id(&x); return cv_fail(e, "%s: %s: no valid `shape` attribute", path, f->mpath); }
    int r = h5ad_sparse_open(f, x, shape, e);
    close_id(&x);
    if (r) return -1;
  }
  if (shape[0] != (int64_t)f->n_obs || shape[1] != (int64_t)f->n_vars)
    return cv_fail(e, "%s: %s has shape %lld x %lld, but obs has %llu rows and %s has %llu", path,
                   f->mpath, (long long)shape[0], (long long)shape[1], (unsigned long long)f->n_obs,
                   f->var.path, (unsigned long long)f->n_vars);

  return h5ad_gene_names(f, gene_key, e);
}

uint64_t h5ad_strip_gene_names(h5file *f) {
  uint64_t n = 0;
  for (uint64_t i = 0; f->var_names && i < f->n_vars; i++) {
    char *s = f->var_names[i];
    size_t a = 0, b = strlen(s);
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    if (a == b || (a == 0 && s[b] == 0)) continue; /* all blank: kept as it is */
    memmove(s, s + a, b - a);
    s[b - a] = 0;
    n++;
  }
  return n;
}

void h5ad_close(h5file *f) {
  if (f->var_names) for (uint64_t i = 0; i < f->n_vars; i++) free(f->var_names[i]);
  free(f->var_names);
  frame_free(&f->obs);
  frame_free(&f->var);
  close_id(&f->data);
  close_id(&f->indices);
  close_id(&f->indptr);
  close_id(&f->fid);
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

/* A count value: validated, 0 if it is to be dropped. */
static int bad_value(h5file *f, uint64_t row, uint64_t col, double v, cv_err *e) {
  char cell[300];
  h5ad_cell_name(f, row, cell, sizeof cell);
  const char *gene = f->var_names && col < f->n_vars ? f->var_names[col] : "?";
  if (v < 0)
    return cv_fail(e, "%s: %s: cell %s, gene '%s' (column %llu): negative value %g; counts must be "
                   "non-negative integers", f->path, f->mpath, cell, gene, (unsigned long long)col, v);
  if (v > 4294967295.0)
    return cv_fail(e, "%s: %s: cell %s, gene '%s' (column %llu): value %.0f exceeds 2^32-1", f->path,
                   f->mpath, cell, gene, (unsigned long long)col, v);
  return cv_fail(e, "%s: %s: cell %s, gene '%s' (column %llu): value %.9g is not an integer count; "
                 "%s holds normalised data? convert raw counts with --layer counts or --raw",
                 f->path, f->mpath, cell, gene, (unsigned long long)col, v, f->mpath);
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
    size_t c = n > CV_SLAB ? n : CV_SLAB;
    free(f->sind);
    free(f->sval);
    f->sind = malloc(c * 8);
    f->sval = malloc(c * 8);
    if (!f->sind || !f->sval) { f->scap = 0; return cv_fail(e, "out of memory (X slab of %zu values)", c); }
    f->scap = c;
  }
  if (n == 0) return 0;
  if (ds_read(f->indices, mem_type(f->ity), lo, n, 0, f->sind) < 0) return h5_fail(e, f, "X indices");
  if (ds_read(f->data, mem_type(f->vty), lo, n, 0, f->sval) < 0) return h5_fail(e, f, "X data");
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
  if (ds_read(f->indptr, H5T_NATIVE_INT64, r0, nr + 1, 0, ptr) < 0) { h5_fail(e, f, "X indptr"); goto done; }
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
      whi = a + CV_SLAB < hi ? a + CV_SLAB : hi;
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
    if (g && (tr ? ds_read_cols(f->data, mt, s, n, g, buf) : ds_read(f->data, mt, s, n, g, buf)) < 0) {
      h5_fail(e, f, f->mpath);
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
  if (ds_read(f->indptr, H5T_NATIVE_INT64, 0, ng + 1, 0, ptr) < 0) { h5_fail(e, f, "X indptr"); goto done; }
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
