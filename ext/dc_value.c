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

int dc_value_int_eq(sqlite3_value *v, int64_t *x) {
  switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: *x = sqlite3_value_int64(v); return 1;
    case SQLITE_FLOAT: return whole(sqlite3_value_double(v), x);
    case SQLITE_TEXT: {
      /* numeric affinity, as SQLite applies it: on a copy, so v keeps its type */
      sqlite3_value *d = sqlite3_value_dup(v);
      if (!d) return -1;
      int k = 0;
      switch (sqlite3_value_numeric_type(d)) {
        case SQLITE_INTEGER: *x = sqlite3_value_int64(d); k = 1; break;
        case SQLITE_FLOAT: k = whole(sqlite3_value_double(d), x); break;
        default: k = 0;   /* text that is no number sorts after every integer */
      }
      sqlite3_value_free(d);
      return k;
    }
    default: return 0;     /* NULL equals nothing; a blob sorts after every integer */
  }
}

int dc_value_int_arg(sqlite3_value *v, int64_t *x) {
  return dc_value_int_eq(v, x) == 1;
}
