/*
** cv_dtype.h — the numpy dtype names the converter knows for numbers, in one table
** (cv_dtype.c): integer or float, bytes, signedness, the integers' range, the HDF5 file and
** memory types, the name of an HDF5 type, and which of them a number column keeps in the files
** (dc_meta obs_dtypes, var_dtypes; the genes and cells tables store int64 / float64).
** convert records the names (h5ad_frame.c, convert_cols.c, export_genes.c), annotate checks
** --schema against them, verify checks dc_meta, export writes X and the frames in them.
** Prefix cv_dtype.
*/
#ifndef CV_DTYPE_H
#define CV_DTYPE_H
#include <hdf5.h>
#include <stdint.h>

/* The table's rows (cv_dtype.code), for a switch on the C type of a value. */
enum { CV_INT8, CV_INT16, CV_INT32, CV_INT64, CV_UINT8, CV_UINT16, CV_UINT32, CV_UINT64,
       CV_FLOAT16, CV_FLOAT32, CV_FLOAT64, CV_N_DTYPES };

typedef struct cv_dtype {
  int code;            /* CV_INT8 ..: its row */
  const char *name;    /* numpy's: "int8" .. "uint64", "float16" .. "float64" */
  int is_float;
  int size;            /* bytes */
  int is_signed;       /* the signed integers (floats have a sign bit, but are not counted here) */
  int64_t lo;          /* integers: the smallest value */
  uint64_t hi;         /* integers: the largest */
  int mant, emax;      /* floats: mantissa bits, largest exponent (IEEE binary16/32/64) */
  double max;          /* the largest finite value */
  int kept;            /* a number column of its kind keeps it in the files (obs_dtypes, var_dtypes) */
} cv_dtype;

/* The dtype of numpy name `name`, or NULL if it is none of the table's. */
const cv_dtype *cv_dtype_find(const char *name);
/* The row `code` (CV_INT8 ..). */
const cv_dtype *cv_dtype_at(int code);
/* The dtype of an HDF5 integer or float type (by class, size and sign), or NULL. */
const cv_dtype *cv_dtype_of(hid_t t);
/* Its little-endian HDF5 file type (float16: IEEE binary16, built once; never close it). */
hid_t cv_dtype_file(const cv_dtype *d);
/* Its native memory type (float16: the file type; cv_dtype_half() gives its bits). */
hid_t cv_dtype_mem(const cv_dtype *d);
/* Whether d holds the count v exactly: an integer up to its largest; a float whose mantissa
** has room for v's bits, below its largest finite value (inline: export asks for every count). */
static inline int cv_dtype_holds(const cv_dtype *d, uint64_t v) {
  if (!d->is_float) return v <= d->hi;
  if (v == 0) return 1;
  int bits = 64 - __builtin_clzll(v);             /* v < 2^bits */
  if (bits > d->emax + 1) return 0;               /* beyond the largest finite value */
  int drop = bits - (d->mant + 1);                /* the low bits the mantissa has no room for */
  return drop <= 0 || (v & ((UINT64_C(1) << drop) - 1)) == 0;
}
/* The IEEE binary16 bits of a count float16 holds (cv_dtype_holds). */
uint16_t cv_dtype_half(uint32_t v);
/* The name a number column of kind real (else int) keeps in the files: name if the table
** keeps it for that kind (int8 .. int32, uint8 .. uint32; float16, float32), else NULL. */
const char *cv_dtype_kept(const char *name, int real);
/* The names cv_dtype_kept keeps for kind real (else int), as `sep` separated text, each
** between `quote`s ("int8, int16, ..." or "'int8', 'int16', ..." for SQL); sqlite3_malloc()ed. */
char *cv_dtype_kept_list(int real, const char *quote, const char *sep);
/* Every name of the table, so (x_dtype's: verify's message). */
char *cv_dtype_list(const char *quote, const char *sep);
/* The dtype that holds every value of both: equal names stay; integers of one signedness
** take the wider; mixed signedness int64; any float: float32 if both are float16 or float32,
** else float64.  NULL if either is NULL or unknown. */
const char *cv_dtype_unite(const char *a, const char *b);

/* The types dc_meta obs_cat_dtypes and var_cat_dtypes (annotate --schema categories_dtype)
** name for the categories of a categorical whose categories were numbers or booleans (the
** labels are their text: "3", "18446744073709551615", "1.5", "True"): the table's names but
** float16 (pandas has no float16 index), and "bool".  The input's exact type ("int16",
** "uint32", "float32"); datasets written before that say "int64" for every integer type but
** uint64 (or, earlier still, for uint64 too) and "float64" for every float. */
/* Whether `name` is one of them. */
int cv_cat_dtype_known(const char *name);
/* Their names as `sep` separated text, each between `quote`s (for SQL: "'int8', 'int16', ...";
** for a message: "int8, int16, ..."); sqlite3_malloc()ed. */
char *cv_cat_dtype_list(const char *quote, const char *sep);
/* The dtype a label of a category of type `dtype` is read in by cv_cat_label: int64 for the
** signed integers, uint64 for the unsigned, float64 for the floats; NULL for bool or unknown. */
const cv_dtype *cv_cat_dtype_wide(const char *dtype);
/* Label `label` read as a category of type `dtype` (one cv_cat_dtype_known knows) into *out:
** an int64_t (signed integers), uint64_t (unsigned) or double (floats), 8 bytes, or an int8_t
** 0/1 (bool).  Returns 1 when the whole label is one and in the type's range (uint*: no sign;
** float32: within its largest finite value, or inf / nan), else 0 (an unknown dtype too). */
int cv_cat_label(const char *dtype, const char *label, void *out);
/* The categories' type of a column whose categories are of type a in one input (dataset) and b
** in another (append, merge, convert of several inputs), where one holds both; NULL (the
** categories are then strings) where either is NULL or unknown, one is bool and the other not,
** one is an integer type and the other a float (labels "3" and "3.0" would name one number
** twice), or one is uint64 and the other signed (no type holds both).  Equal names stay;
** floats: float64 unless both are float32; integers of one signedness: the wider; a signed and
** an unsigned one: the narrowest signed type that holds both (int8 and uint8: int16). */
const char *cv_cat_dtype_unite(const char *a, const char *b);

#endif
