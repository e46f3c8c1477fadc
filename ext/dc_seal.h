/*
** dc_seal.h — checksums that bind stored content to its place (format
** version 3, docs/format.md "Seals").
**
** A tile blob, an obs or genes block, and a category dictionary each carry
** in their row a 64-bit "seal": XXH3-64, seeded with the dataset's random id
** (dc_meta.dataset_id), over a tag naming what is sealed, the row's place
** (tile number, column and block, first cell, cell count, ...), the row's
** statistics, and the blob's own header, which holds the checksums of the
** whole payload.  A blob moved, swapped or copied to another row, a row
** copied from another dataset, or a statistic edited, no longer matches.
**
** The converter computes seals from the values it writes; readers recompute
** them from what they read.  Both go through the functions below, so the
** field order lives in one place.  Pure C (libxxhash); no SQLite.
*/
#ifndef DC_SEAL_H
#define DC_SEAL_H
#include <stddef.h>
#include <stdint.h>

/* bytes of an obs block's header (ext/obs), sealed with the block */
#define DC_SEAL_OBS_HEAD 24

/* A typed value of a row, as SQLite stores it. */
enum { DC_SV_NULL = 0, DC_SV_INT = 1, DC_SV_REAL = 2, DC_SV_TEXT = 3, DC_SV_BLOB = 4 };
typedef struct dc_sealval {
  int type;               /* DC_SV_* */
  int64_t i;
  double f;
  const void *p;          /* text or blob bytes */
  size_t n;
} dc_sealval;

/* A running seal.  dc_seal_begin returns 0, or -1 on out-of-memory (then
** every later call is a no-op and dc_seal_end returns -1). */
typedef struct dc_seal { void *st; } dc_seal;
int dc_seal_begin(dc_seal *s, uint64_t dataset_id, const char *tag);
void dc_seal_int(dc_seal *s, int64_t v);
void dc_seal_bytes(dc_seal *s, const void *p, size_t n);     /* length, then bytes */
void dc_seal_value(dc_seal *s, const dc_sealval *v);        /* type, then value */
int dc_seal_end(dc_seal *s, int64_t *out);                   /* 0 or -1 (out of memory) */

/* The seal of tile `tile` (tiles_data row): its place and counts, the blob's
** length and its header (the first hdr_len bytes: chunk table, checksums). */
int dc_seal_tile(uint64_t dataset_id, int64_t tile, int64_t first_cell, int64_t n_cells, int64_t nnz,
                 int64_t chunks, uint64_t blob_len, const uint8_t *head, size_t head_len, int64_t *out);

/* The seal of a block row of an obs column (table "cells") or genes column
** (table "genes"): the column (number, name, kind, categories), the block
** (number, first row, rows), its statistics (null count, min, max, present;
** the genes blocks have none: pass NULL values), the blob's length and its
** first min(blob_len, DC_SEAL_OBS_HEAD) bytes. */
typedef struct dc_blockplace {
  const char *table;      /* "cells" or "genes" */
  int64_t col;
  const char *col_name;
  int kind;               /* DC_OBS_* (ext/obs/dc_obs.h) */
  int64_t n_categories;   /* -1 when not a category column */
  int64_t block, first, n, null_count;
} dc_blockplace;
int dc_seal_block(uint64_t dataset_id, const dc_blockplace *pl, const dc_sealval *mn, const dc_sealval *mx,
                  const dc_sealval *present, uint64_t blob_len, const uint8_t *head, int64_t *out);

/* The seal of a column's dictionary (cells_columns.checksum): the column
** (pl's table, col, col_name, kind, n_categories), then the caller adds each
** value in code order with dc_seal_bytes and ends with dc_seal_end. */
int dc_seal_dict_begin(dc_seal *s, uint64_t dataset_id, const dc_blockplace *pl);

/* dc_meta.dataset_id: exactly 16 lowercase or uppercase hex digits. */
int dc_seal_parse_id(const char *text, size_t n, uint64_t *id);
/* A fresh random id (getrandom); 0 or -1 with errno set. */
int dc_seal_new_id(uint64_t *id);

#endif
