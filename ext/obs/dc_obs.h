/*
** dc_obs.h — one block of one obs column: encoder and decoder (public API).
**
** Pure C (zstd and xxhash only): no SQLite, no HDF5.  The byte format is
** written down in docs/format.md section 3.  Layout as zstd's lib/: common
** helpers in obs_common.c, the encoder in obs_encode.c, the decoder in
** obs_decode.c.
**
** A writer holds one block of values of one column in memory (the dataset
** uses 65,536 cells per block), fills a dc_obs_values and calls
** dc_obs_encode(); it gets the blob for cells_blocks.data and the statistics
** for the other columns of that row (null_count, min, max, present).
**
** Kinds and how NULL is given:
**   category  int32 codes 0 .. n_categories-1, -1 = NULL
**   int       int64 values; `valid` (1 byte per value, nonzero = not NULL) or
**             NULL when no value is NULL
**   real      double; NaN = NULL (every NaN, whatever its payload)
**   bool      int8 0 or 1, -1 = NULL
**   text      pointer + byte length per value (UTF-8), pointer NULL = NULL
**
** Errors: functions return DC_OK or a DC_E* code of dc_codec.h and fill the
** dc_error with a message naming the reason (decoding: DC_ECORRUPT for bad
** stored bytes, DC_EUNSUPPORTED for an unknown version or method).  Nothing
** ever asserts or aborts on data.
*/
#ifndef DC_OBS_H
#define DC_OBS_H

#include <stddef.h>
#include <stdint.h>
#include "dc_codec.h"   /* dc_error, DC_OK, DC_E* */

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DC_OBS_CATEGORY = 1,
  DC_OBS_INT = 2,
  DC_OBS_REAL = 3,
  DC_OBS_BOOL = 4,
  DC_OBS_TEXT = 5
};
/* "category", "int", "real", "bool", "text" (the cells_columns.kind values),
** or NULL for an unknown kind; and back (0 if unknown). */
const char *dc_obs_kind_name(int kind);
int dc_obs_kind_from_name(const char *name);

/* Largest number of values in one block (bounds what a decoder allocates). */
#define DC_OBS_MAX_N (1u << 24)
/* Largest payload of a text block in bytes (lengths and text). */
#define DC_OBS_MAX_TEXT (1u << 30)
/* Largest number of categories of a column (codes fit int32). */
#define DC_OBS_MAX_CATEGORIES 0x7ffffffeu
/* Default zstd level of dc_obs_encode (level <= 0 picks it). */
#define DC_OBS_DEFAULT_LEVEL 9

/* One block of values, as the encoder takes it.  Set `kind`, `n` and the
** array of that kind; the others are ignored. */
typedef struct dc_obs_values {
  int kind;                    /* DC_OBS_*                                   */
  uint32_t n;                  /* number of values, 0 .. DC_OBS_MAX_N        */
  const int32_t *codes;        /* category: codes, -1 = NULL                 */
  uint32_t n_categories;       /* category: codes must be < n_categories     */
  const int64_t *i64;          /* int                                        */
  const uint8_t *valid;        /* int: NULL = all valid; else 0 = NULL       */
  const double *f64;           /* real: NaN = NULL                           */
  const int8_t *b8;            /* bool: 0, 1, -1 = NULL                      */
  const char *const *text;     /* text: pointers, NULL = NULL                */
  const uint32_t *text_len;    /* text: byte lengths (NULL: strlen of each)  */
} dc_obs_values;

/* Statistics of one block: what cells_blocks stores beside the data. */
typedef struct dc_obs_stats {
  uint32_t n;
  uint32_t null_count;
  int has_minmax;              /* 0 when every value is NULL (min/max NULL)  */
  int64_t min_i, max_i;        /* category (codes), int, bool (0/1)          */
  double min_f, max_f;         /* real                                       */
  const char *min_s, *max_s;   /* text: point into the caller's values       */
  uint32_t min_len, max_len;   /*   (memcmp order, shorter first on a tie)   */
  /* category: bitmap of the codes present, bit c of byte c/8, trimmed after
  ** the byte of the largest code present (so present_len <= (n_categories+7)/8).
  ** NULL with present_len 0 when every value is NULL, or when the bitmap
  ** would be longer than DC_OBS_PRESENT_MAX bytes: store NULL then ("not
  ** recorded": a reader must assume any code may be present).  Allocated
  ** with malloc(); dc_obs_stats_clear() frees it. */
  uint8_t *present;
  size_t present_len;
} dc_obs_stats;
#define DC_OBS_PRESENT_MAX 8192

void dc_obs_stats_clear(dc_obs_stats *st);

/* Encodes one block.  level: zstd level (<= 0: DC_OBS_DEFAULT_LEVEL).
** *out is allocated with malloc() and owned by the caller.  `st` may be
** NULL; if given it is filled (call dc_obs_stats_clear on it afterwards,
** also after an error).  Fails with DC_EARG on a bad argument (a category
** code out of range, a bool not in {0,1,-1}, text that is not UTF-8, ...),
** naming the value. */
int dc_obs_encode(const dc_obs_values *v, int level, uint8_t **out,
                  size_t *out_len, dc_obs_stats *st, dc_error *err);

/* Computes the statistics alone (no encoding). */
int dc_obs_stats_compute(const dc_obs_values *v, dc_obs_stats *st,
                         dc_error *err);

/* A decoded block.  Arrays are owned by the decoder that filled it and stay
** valid until its next decode or its free (dc_obs_decode), or lie in the
** caller's memory (dc_obs_decode_to).  Only the arrays of the block's kind
** are set. */
typedef struct dc_obs_block {
  int kind;
  uint32_t n;
  uint32_t null_count;
  const int32_t *codes;        /* category: n codes, -1 = NULL               */
  const int64_t *i64;          /* int: n values (0 where NULL); bool: 0/1    */
  const uint8_t *valid;        /* int, bool, text: n bytes, 1 = not NULL     */
  const double *f64;           /* real: n values, NaN = NULL                 */
  const char *text;            /* text: bytes of value i are                 */
  const uint64_t *text_off;    /*   text[text_off[i] .. text_off[i+1])       */
} dc_obs_block;

/* What the reader knows from cells_columns / cells_blocks, checked against
** the blob.  n_categories = 0 skips the code range check (category). */
typedef struct dc_obs_expect {
  int kind;                    /* required                                  */
  uint32_t n;                  /* required: n_cells of the block            */
  uint32_t n_categories;       /* category: codes must be < this            */
} dc_obs_expect;

typedef struct dc_obs_decoder dc_obs_decoder;
dc_obs_decoder *dc_obs_decoder_new(void);     /* NULL on out-of-memory */
void dc_obs_decoder_free(dc_obs_decoder *d);

/* Decodes one block blob.  Every length, the checksum and every value
** (category range, NaN as a non-NULL real, text offsets) are checked;
** DC_ECORRUPT names the reason.  On error *out is zeroed. */
int dc_obs_decode(dc_obs_decoder *d, const uint8_t *buf, size_t len,
                  const dc_obs_expect *expect, dc_obs_block *out,
                  dc_error *err);

/* The same, with the block's arrays in memory the caller gives (a cache entry, say, so that
** nothing is copied after the decode): alloc(arg, bytes) is called at most once per decode,
** after the payload's lengths are checked, with bytes = dc_obs_block_bytes(kind, n, text
** bytes), and returns memory aligned to 8 bytes, or NULL (the decode then fails with
** DC_ENOMEM).  The arrays are laid out in it in this order:
**   category: codes (n x 4 bytes);
**   int, bool: i64 (n x 8), valid (n);
**   real: f64 (n x 8);
**   text: text_off ((n + 1) x 8), valid (n), the text's bytes.
** The memory is the caller's, also when the decode fails after the call.  The decoder keeps
** its own scratch (the decompressed payload) for the next decode. */
typedef void *(*dc_obs_alloc)(void *arg, size_t bytes);
int dc_obs_decode_to(dc_obs_decoder *d, const uint8_t *buf, size_t len,
                     const dc_obs_expect *expect, dc_obs_alloc alloc, void *arg,
                     dc_obs_block *out, dc_error *err);
/* The bytes of a decoded block's arrays, laid out as above (text_len: text only). */
size_t dc_obs_block_bytes(int kind, uint32_t n, uint64_t text_len);
/* The bytes of block src's arrays (for text, text_off[n] is its text's length). */
size_t dc_obs_block_size(const dc_obs_block *src);
/* Copies block src's arrays into dst (dc_obs_block_size(src) bytes, aligned to 8), laid out
** as dc_obs_decode_to lays them out, and sets *out to a block that views them. */
void dc_obs_block_copy(const dc_obs_block *src, void *dst, dc_obs_block *out);

/* Reads the header fields without decoding: kind, n, null_count. */
int dc_obs_peek(const uint8_t *buf, size_t len, int *kind, uint32_t *n,
                uint32_t *null_count, dc_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DC_OBS_H */
