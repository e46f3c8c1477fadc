/*
** cv_dtype.c — the numpy dtype names the converter knows for numbers and what each is (see
** cv_dtype.h): one table, read by convert, annotate, verify, merge and export.
*/
#include "cv_dtype.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <sqlite3.h>
#include <string.h>

/* code, name, float, bytes, signed, lo, hi, mantissa bits, largest exponent, largest value, kept */
static const cv_dtype T[CV_N_DTYPES] = {
    {CV_INT8, "int8", 0, 1, 1, INT8_MIN, INT8_MAX, 0, 0, INT8_MAX, 1},
    {CV_INT16, "int16", 0, 2, 1, INT16_MIN, INT16_MAX, 0, 0, INT16_MAX, 1},
    {CV_INT32, "int32", 0, 4, 1, INT32_MIN, INT32_MAX, 0, 0, INT32_MAX, 1},
    {CV_INT64, "int64", 0, 8, 1, INT64_MIN, INT64_MAX, 0, 0, (double)INT64_MAX, 0},
    {CV_UINT8, "uint8", 0, 1, 0, 0, UINT8_MAX, 0, 0, UINT8_MAX, 1},
    {CV_UINT16, "uint16", 0, 2, 0, 0, UINT16_MAX, 0, 0, UINT16_MAX, 1},
    {CV_UINT32, "uint32", 0, 4, 0, 0, UINT32_MAX, 0, 0, UINT32_MAX, 1},
    {CV_UINT64, "uint64", 0, 8, 0, 0, UINT64_MAX, 0, 0, (double)UINT64_MAX, 0},
    {CV_FLOAT16, "float16", 1, 2, 0, 0, 0, 10, 15, 65504.0, 1},
    {CV_FLOAT32, "float32", 1, 4, 0, 0, 0, 23, 127, FLT_MAX, 1},
    {CV_FLOAT64, "float64", 1, 8, 0, 0, 0, 52, 1023, DBL_MAX, 0},
};

const cv_dtype *cv_dtype_find(const char *name) {
  for (int i = 0; name && i < CV_N_DTYPES; i++)
    if (!strcmp(T[i].name, name)) return &T[i];
  return NULL;
}

const cv_dtype *cv_dtype_at(int code) { return code >= 0 && code < CV_N_DTYPES ? &T[code] : NULL; }

const cv_dtype *cv_dtype_of(hid_t t) {
  if (t < 0) return NULL;
  H5T_class_t c = H5Tget_class(t);
  if (c != H5T_INTEGER && c != H5T_FLOAT) return NULL;
  int fl = c == H5T_FLOAT, sz = (int)H5Tget_size(t), sg = !fl && H5Tget_sign(t) == H5T_SGN_2;
  for (int i = 0; i < CV_N_DTYPES; i++)
    if (T[i].is_float == fl && T[i].size == sz && T[i].is_signed == sg) return &T[i];
  return NULL;
}

/* IEEE binary16, little-endian: HDF5 1.10 has no predefined one.  A sign bit (15), 5 bits of
** exponent (10..14, bias 15) and 10 of mantissa; numpy (h5py) reads it as float16.  Locked, so
** no H5Tclose frees it; made again if its id is no longer valid. */
static hid_t half_type(void) {
  static hid_t h = -1;
  if (h >= 0 && H5Iis_valid(h) > 0) return h;
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0) return -1;
  if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0 || H5Tlock(t) < 0) {
    H5Tclose(t);
    return -1;
  }
  return h = t;
}

hid_t cv_dtype_file(const cv_dtype *d) {
  switch (d ? d->code : -1) {
    case CV_INT8: return H5T_STD_I8LE;
    case CV_INT16: return H5T_STD_I16LE;
    case CV_INT32: return H5T_STD_I32LE;
    case CV_INT64: return H5T_STD_I64LE;
    case CV_UINT8: return H5T_STD_U8LE;
    case CV_UINT16: return H5T_STD_U16LE;
    case CV_UINT32: return H5T_STD_U32LE;
    case CV_UINT64: return H5T_STD_U64LE;
    case CV_FLOAT16: return half_type();
    case CV_FLOAT32: return H5T_IEEE_F32LE;
    case CV_FLOAT64: return H5T_IEEE_F64LE;
    default: return -1;
  }
}

hid_t cv_dtype_mem(const cv_dtype *d) {
  switch (d ? d->code : -1) {
    case CV_INT8: return H5T_NATIVE_INT8;
    case CV_INT16: return H5T_NATIVE_INT16;
    case CV_INT32: return H5T_NATIVE_INT32;
    case CV_INT64: return H5T_NATIVE_INT64;
    case CV_UINT8: return H5T_NATIVE_UINT8;
    case CV_UINT16: return H5T_NATIVE_UINT16;
    case CV_UINT32: return H5T_NATIVE_UINT32;
    case CV_UINT64: return H5T_NATIVE_UINT64;
    case CV_FLOAT16: return half_type();
    case CV_FLOAT32: return H5T_NATIVE_FLOAT;
    case CV_FLOAT64: return H5T_NATIVE_DOUBLE;
    default: return -1;
  }
}

uint16_t cv_dtype_half(uint32_t v) {
  if (v == 0) return 0;
  int top = 31 - __builtin_clz(v);                /* 2^top <= v: the exponent */
  uint32_t m = top >= 10 ? v >> (top - 10) : v << (10 - top);
  return (uint16_t)(((uint32_t)(top + 15) << 10) | (m & 0x3ff));
}

const char *cv_dtype_kept(const char *name, int real) {
  const cv_dtype *d = cv_dtype_find(name);
  return d && d->kept && d->is_float == !!real ? d->name : NULL;
}

/* The names of the table's rows `keep` takes (every row: keep NULL), then `extra` (unless
** NULL), each between quotes, `sep` between them; sqlite3_malloc()ed. */
static char *names_where(int (*keep)(const cv_dtype *, int), int arg, const char *extra, const char *quote,
                         const char *sep) {
  sqlite3_str *s = sqlite3_str_new(NULL);
  int n = 0;
  for (int i = 0; i < CV_N_DTYPES; i++)
    if (!keep || keep(&T[i], arg)) sqlite3_str_appendf(s, "%s%s%s%s", n++ ? sep : "", quote, T[i].name, quote);
  if (extra) sqlite3_str_appendf(s, "%s%s%s%s", n ? sep : "", quote, extra, quote);
  return sqlite3_str_finish(s);
}

static int kept_of_kind(const cv_dtype *d, int real) { return d->kept && d->is_float == !!real; }

char *cv_dtype_kept_list(int real, const char *quote, const char *sep) {
  return names_where(kept_of_kind, real, NULL, quote, sep);
}

char *cv_dtype_list(const char *quote, const char *sep) { return names_where(NULL, 0, NULL, quote, sep); }

const char *cv_dtype_unite(const char *a, const char *b) {
  const cv_dtype *x = cv_dtype_find(a), *y = cv_dtype_find(b);
  if (!x || !y) return NULL;
  if (x == y) return x->name;
  if (x->is_float || y->is_float) {
    if (x->is_float && y->is_float && x->code != CV_FLOAT64 && y->code != CV_FLOAT64) return "float32";
    return "float64";
  }
  if (x->is_signed == y->is_signed) return x->size >= y->size ? x->name : y->name;
  return "int64";
}

int cv_cat_dtype_known(const char *name) {
  if (name && !strcmp(name, "bool")) return 1;
  const cv_dtype *d = cv_dtype_find(name);
  return d && d->code != CV_FLOAT16;
}

static int cat_known(const cv_dtype *d, int unused) { (void)unused; return cv_cat_dtype_known(d->name); }

char *cv_cat_dtype_list(const char *quote, const char *sep) { return names_where(cat_known, 0, "bool", quote, sep); }

const cv_dtype *cv_cat_dtype_wide(const char *dtype) {
  const cv_dtype *d = cv_cat_dtype_known(dtype) ? cv_dtype_find(dtype) : NULL;
  return !d ? NULL : &T[d->is_float ? CV_FLOAT64 : d->is_signed ? CV_INT64 : CV_UINT64];
}

int cv_cat_label(const char *dtype, const char *label, void *out) {
  char *end = NULL;
  if (!dtype || !label) return 0;
  if (!strcmp(dtype, "bool")) {
    int t = !strcmp(label, "True");
    if (!t && strcmp(label, "False")) return 0;
    *(int8_t *)out = (int8_t)t;
    return 1;
  }
  const cv_dtype *d = cv_cat_dtype_known(dtype) ? cv_dtype_find(dtype) : NULL;
  if (!d || !*label) return 0;
  errno = 0;
  if (d->is_float) {
    double v = strtod(label, &end);
    errno = 0;                                    /* a denormal's ERANGE: its value all the same */
    if (isfinite(v) && fabs(v) > d->max) return 0;  /* float32: beyond its largest finite value */
    *(double *)out = v;
  } else if (d->is_signed) {
    long long v = strtoll(label, &end, 10);
    if (errno || v < d->lo || v > (long long)d->hi) return 0;
    *(int64_t *)out = v;
  } else {
    if (strchr(label, '-')) return 0;             /* strtoull takes "-1" as 2^64-1 */
    unsigned long long v = strtoull(label, &end, 10);
    if (errno || v > d->hi) return 0;
    *(uint64_t *)out = v;
  }
  return end && !*end;
}

const char *cv_cat_dtype_unite(const char *a, const char *b) {
  if (!cv_cat_dtype_known(a) || !cv_cat_dtype_known(b)) return NULL;
  if (!strcmp(a, b)) return a;
  const cv_dtype *x = cv_dtype_find(a), *y = cv_dtype_find(b);   /* NULL: bool */
  if (!x || !y || x->is_float != y->is_float) return NULL;
  if (x->is_float || x->is_signed == y->is_signed) return cv_dtype_unite(a, b);
  const cv_dtype *u = x->is_signed ? y : x, *s = x->is_signed ? x : y;
  if (u->size == 8) return NULL;
  int size = 2 * u->size > s->size ? 2 * u->size : s->size;
  for (int i = 0; i < CV_N_DTYPES; i++)
    if (!T[i].is_float && T[i].is_signed && T[i].size == size) return T[i].name;
  return NULL;
}
