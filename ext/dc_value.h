/*
** dc_value.h — SQLite's comparison semantics for an INTEGER column, in one place.
**
** A virtual table that narrows its scan from a constraint on an INTEGER column (a cell or
** gene id) must know which integers the constraint's value can equal.  SQLite applies the
** column's numeric affinity to the value before comparing: the text '5', ' 5\v' and '5.0'
** equal the integer 5 (whatever the C library's locale), '5.5' and 'abc' equal no integer,
** NULL and blobs equal nothing.  These functions get that answer from SQLite itself
** (sqlite3_value_numeric_type on a copy of the value), never from strtod or a hand-written
** whitespace set.
*/
#ifndef DC_VALUE_H
#define DC_VALUE_H
#include "dc_ext.h"

/* v as a column with numeric affinity (INTEGER or REAL) sees it, SQLite's own conversion on a
** copy (v keeps its type): SQLITE_INTEGER with *i set, SQLITE_FLOAT with *f set, or
** SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL for a value that stays what it is; -1 on out of memory.
** `cells` (its terms on numeric columns) and `expression` (dc_value_int_eq) both use it. */
int dc_value_numeric(sqlite3_value *v, int64_t *i, double *f);

/* Which integer an INTEGER column must hold to equal v: 1 and *x set when it is exactly one
** integer; 0 when no integer equals v; -1 when unknown (out of memory: the caller must not
** narrow on this value). */
int dc_value_int_eq(sqlite3_value *v, int64_t *x);

/* An integer argument of a function (dc_config's value, say), read as SQLite would store it
** in an INTEGER column: 1 and *x set for an integer, or a real or text holding exactly one;
** 0 otherwise. */
int dc_value_int_arg(sqlite3_value *v, int64_t *x);
#endif
