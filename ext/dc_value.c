/*
** dc_value.c — SQLite's comparison semantics for an INTEGER column (dc_value.h).
*/
#include "dc_value.h"

#include <math.h>

/* an integral double that an int64 holds exactly */
static int whole(double d, int64_t *x) {
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != floor(d)) return 0;
  *x = (int64_t)d;
  return 1;
}

int dc_value_numeric(sqlite3_value *v, int64_t *i, double *f) {
  int t = sqlite3_value_type(v);
  if (t == SQLITE_INTEGER) { *i = sqlite3_value_int64(v); return t; }
  if (t == SQLITE_FLOAT) { *f = sqlite3_value_double(v); return t; }
  if (t != SQLITE_TEXT) return t;   /* NULL and blobs take no affinity */
  sqlite3_value *d = sqlite3_value_dup(v);
  if (!d) return -1;
  t = sqlite3_value_numeric_type(d);
  if (t == SQLITE_INTEGER) *i = sqlite3_value_int64(d);
  else if (t == SQLITE_FLOAT) *f = sqlite3_value_double(d);
  sqlite3_value_free(d);
  return t;
}

int dc_value_int_eq(sqlite3_value *v, int64_t *x) {
  int64_t i = 0;
  double f = 0;
  switch (dc_value_numeric(v, &i, &f)) {
    case SQLITE_INTEGER: *x = i; return 1;
    case SQLITE_FLOAT: return whole(f, x);
    case -1: return -1;
    default: return 0;   /* NULL equals nothing; text that is no number and blobs sort after every integer */
  }
}

int dc_value_int_arg(sqlite3_value *v, int64_t *x) {
  return dc_value_int_eq(v, x) == 1;
}
