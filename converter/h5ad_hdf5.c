/*
** h5ad_hdf5.c — HDF5 access that the input readers share (see h5ad_hdf5.h): HDF5's error
** messages, objects by path, string and integer attributes, slices of datasets, string
** datasets.
*/
#include "h5ad_hdf5.h"

#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>

/* ------------------------------------------------------------ HDF5 errors */
static herr_t walk_cb(unsigned n, const H5E_error2_t *d, void *arg) {
  h5ad_walk *w = arg;
  (void)n;
  /* walked upward: the first entry is the innermost; keep it */
  if (!w->msg[0] && d->desc && d->desc[0]) snprintf(w->msg, sizeof w->msg, "%s", d->desc);
  return 0;
}
/* The innermost message of HDF5's current error stack ("" if none). */
const char *h5ad_reason(h5ad_walk *w) {
  w->msg[0] = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, w);
  H5Eclear2(H5E_DEFAULT);
  return w->msg[0] ? w->msg : "HDF5 read error";
}
int h5ad_fail(cv_err *e, const h5file *f, const char *what) {
  h5ad_walk w;
  return cv_fail(e, "%s: %s: %s", f->path, what, h5ad_reason(&w));
}

/* ------------------------------------------------------------ helpers */
void h5ad_close_id(hid_t *id) {
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
int h5ad_exists(hid_t loc, const char *path) {
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
H5I_type_t h5ad_open_obj(hid_t loc, const char *path, hid_t *out) {
  *out = -1;
  if (!h5ad_exists(loc, path)) return H5I_BADID;
  hid_t o = H5Oopen(loc, path, H5P_DEFAULT);
  if (o < 0) { H5Eclear2(H5E_DEFAULT); return H5I_BADID; }
  H5I_type_t t = H5Iget_type(o);
  if (t != H5I_GROUP && t != H5I_DATASET) { H5Oclose(o); return H5I_BADID; }
  *out = o;
  return t;
}

/* The length of fixed-length string s[0, sz) without its padding (NULs; with spaces, also
** spaces: trailing ones are cut), or -1 when a NUL byte comes before more text: text cannot hold
** one, and the rest would be lost.  Attributes and string datasets alike. */
static long fixed_len(const char *s, size_t sz, int spaces) {
  size_t k = strnlen(s, sz);
  for (size_t j = k; j < sz; j++)
    if (s[j] != 0 && !(spaces && s[j] == ' ')) return -1;
  if (spaces) while (k > 0 && s[k - 1] == ' ') k--;
  return (long)k;
}

/* Reads a string attribute (scalar, or first element) into *out (malloc'd), or NULL if absent /
** not a string; -1 when it holds a NUL byte before its end (fixed_len). */
int h5ad_attr_str(hid_t obj, const char *name, char **out) {
  *out = NULL;
  if (H5Aexists(obj, name) <= 0) { H5Eclear2(H5E_DEFAULT); return 0; }
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = -1, sp = -1, mt = -1;
  int rc = 0;
  if (a < 0) goto done;
  t = H5Aget_type(a);
  sp = H5Aget_space(a);
  if (t < 0 || sp < 0 || H5Tget_class(t) != H5T_STRING) goto done;
  hssize_t np = H5Sget_simple_extent_npoints(sp);
  if (np < 1) goto done;
  if (H5Tis_variable_str(t) > 0) {
    mt = h5ad_vlen_str_type(t);
    char **v = calloc((size_t)np, sizeof *v);
    if (v && H5Aread(a, mt, v) >= 0) {
      *out = v[0] ? strdup(v[0]) : strdup("");
      H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
    }
    free(v);
  } else {
    size_t sz = H5Tget_size(t);
    char *v = calloc((size_t)np * sz + 1, 1);
    mt = H5Tcopy(t);
    if (v && H5Aread(a, mt, v) >= 0) {
      long k = fixed_len(v, sz, 1);
      if (k < 0) {
        rc = -1;
      } else {
        v[k] = 0;
        *out = v;
        v = NULL;
      }
    }
    free(v);
  }
done:
  h5ad_close_id(&mt); h5ad_close_id(&sp); h5ad_close_id(&t); h5ad_close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return rc;
}

/* Reads a string-array attribute (e.g. column-order). Returns count, -1 (unreadable), or -2 (a
** string holding a NUL byte before its end); an absent attribute or a numeric empty array gives 0. */
long h5ad_attr_strs(hid_t obj, const char *name, char ***out) {
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
    mt = h5ad_vlen_str_type(t);
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
      res = (long)np;
      for (hssize_t i = 0; i < np && res >= 0; i++) {
        long k = fixed_len(raw + (size_t)i * sz, sz, 1);
        if (k < 0) res = -2;
        else v[i] = strndup(raw + (size_t)i * sz, (size_t)k);
      }
    }
    free(raw);
  }
  if (res > 0) for (long i = 0; i < res; i++) if (!v[i]) res = -1;
  if (res < 0) { for (hssize_t i = 0; i < np; i++) free(v[i]); free(v); v = NULL; }
  *out = v;
done:
  h5ad_close_id(&mt); h5ad_close_id(&sp); h5ad_close_id(&t); h5ad_close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return res;
}

void h5ad_free_strs(char **v, long n) {
  if (!v) return;
  for (long i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Reads an integer-array attribute (shape). Returns count or -1. */
int h5ad_attr_ints(hid_t obj, const char *name, int64_t *out, int max) {
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
  h5ad_close_id(&t); h5ad_close_id(&sp); h5ad_close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return res;
}

int h5ad_attr_true(hid_t obj, const char *name) {
  if (H5Aexists(obj, name) <= 0) { H5Eclear2(H5E_DEFAULT); return 0; }
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), sp = -1, t = -1;
  unsigned char v[16] = {0};
  int res = 0;
  if (a < 0) goto done;
  sp = H5Aget_space(a);
  t = H5Aget_type(a);
  H5T_class_t c = H5Tget_class(t);
  if (H5Sget_simple_extent_npoints(sp) != 1 || (c != H5T_INTEGER && c != H5T_ENUM) || H5Tget_size(t) > sizeof v) goto done;
  if (H5Aread(a, t, v) < 0) goto done;   /* in the file's own type: an enum needs no conversion */
  for (size_t k = 0; k < sizeof v; k++) res |= v[k] != 0;
done:
  h5ad_close_id(&t); h5ad_close_id(&sp); h5ad_close_id(&a);
  H5Eclear2(H5E_DEFAULT);
  return res;
}

/* Length of a 1-D dataset, or -1 if not 1-D. */
int64_t h5ad_ds_len(hid_t ds) {
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
int h5ad_ds_read(hid_t ds, hid_t mt, uint64_t start, uint64_t count, uint64_t ncols, void *buf) {
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

hid_t h5ad_vlen_str_type(hid_t file_type) {
  hid_t mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, H5T_VARIABLE);
  /* the file's character set: HDF5 converts no strings between ASCII and UTF-8, and R's
  ** hdf5r (loomR, Seurat) writes ASCII where h5py writes UTF-8 */
  H5T_cset_t cs = H5Tget_cset(file_type);
  H5Tset_cset(mt, cs == H5T_CSET_ASCII ? H5T_CSET_ASCII : H5T_CSET_UTF8);
  return mt;
}

/* loompy writes strings as ASCII with XML character references ('G&#232;ne' for 'Gène') and
** reads them back through html.unescape: the same here, in place (a reference is never
** shorter than its UTF-8 bytes), for numeric references and the five XML entities.  Returns
** the new length. */
static size_t xml_unescape(char *s, size_t k) {
  static const struct { const char *name; char c; } ent[] = {
      {"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
  size_t r = 0, w = 0;
  while (r < k) {
    if (s[r] != '&') { s[w++] = s[r++]; continue; }
    size_t i = r + 1;
    if (i < k && s[i] == '#') {
      int hex = i + 1 < k && (s[i + 1] == 'x' || s[i + 1] == 'X');
      size_t j = i + 1 + (size_t)hex, d0 = j;
      uint32_t cp = 0;
      while (j < k && j - d0 < 8 && (hex ? isxdigit((unsigned char)s[j]) : isdigit((unsigned char)s[j]))) {
        int dv = isdigit((unsigned char)s[j]) ? s[j] - '0' : (tolower((unsigned char)s[j]) - 'a' + 10);
        cp = cp * (hex ? 16 : 10) + (uint32_t)dv;
        j++;
      }
      if (j > d0 && j < k && s[j] == ';' && cp > 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF)) {
        if (cp < 0x80) s[w++] = (char)cp;
        else if (cp < 0x800) { s[w++] = (char)(0xC0 | cp >> 6); s[w++] = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
          s[w++] = (char)(0xE0 | cp >> 12); s[w++] = (char)(0x80 | ((cp >> 6) & 0x3F)); s[w++] = (char)(0x80 | (cp & 0x3F));
        } else {
          s[w++] = (char)(0xF0 | cp >> 18); s[w++] = (char)(0x80 | ((cp >> 12) & 0x3F));
          s[w++] = (char)(0x80 | ((cp >> 6) & 0x3F)); s[w++] = (char)(0x80 | (cp & 0x3F));
        }
        r = j + 1;
        continue;
      }
    } else {
      size_t e;
      for (e = 0; e < sizeof ent / sizeof *ent; e++) {
        size_t l = strlen(ent[e].name);
        if (k - i >= l && !memcmp(s + i, ent[e].name, l)) break;
      }
      if (e < sizeof ent / sizeof *ent) {
        s[w++] = ent[e].c;
        r = i + strlen(ent[e].name);
        continue;
      }
    }
    s[w++] = s[r++];   /* not a reference: as it is */
  }
  return w;
}

/* Reads strings [start, start+n) of a string dataset into cb (kind text) at
** positions off.. . */
int h5ad_read_strs(h5file *f, hid_t ds, const char *what, uint64_t start, size_t n, colbuf *cb, size_t off,
                   cv_err *e) {
  if (n == 0) return 0;
  hid_t t = H5Dget_type(ds), mt = -1;
  int rc = -1;
  if (t < 0) return h5ad_fail(e, f, what);
  if (H5Tis_variable_str(t) > 0) {
    mt = h5ad_vlen_str_type(t);
    char **v = calloc(n, sizeof *v);
    if (!v) { cv_fail(e, "out of memory"); goto done; }
    if (h5ad_ds_read(ds, mt, start, n, 0, v) < 0) { free(v); h5ad_fail(e, f, what); goto done; }
    rc = 0;
    int loom = f->kind && !strcmp(f->kind, "loom");
    for (size_t i = 0; i < n && rc == 0; i++) {
      char *s = v[i] ? v[i] : (char *)"";
      size_t k = strlen(s);
      if (loom && memchr(s, '&', k)) k = xml_unescape(s, k);
      rc = colbuf_text_set(cb, off + i, s, k, e);
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
    if (h5ad_ds_read(ds, mt, start, n, 0, v) < 0) { free(v); h5ad_fail(e, f, what); goto done; }
    H5T_str_t pad = H5Tget_strpad(t);
    rc = 0;
    int loom = f->kind && !strcmp(f->kind, "loom");
    for (size_t i = 0; i < n && rc == 0; i++) {
      char *s = v + i * sz;
      long kl = fixed_len(s, sz, pad == H5T_STR_SPACEPAD);
      if (kl < 0) {
        rc = cv_fail(e, "%s: %s: string %llu holds a NUL byte before its end (text cannot: the rest would be lost)",
                     f->path, what, (unsigned long long)(start + i));
        break;
      }
      size_t k = (size_t)kl;
      if (loom && memchr(s, '&', k)) k = xml_unescape(s, k);
      rc = colbuf_text_set(cb, off + i, s, k, e);
    }
    free(v);
  }
done:
  h5ad_close_id(&mt);
  h5ad_close_id(&t);
  return rc;
}
