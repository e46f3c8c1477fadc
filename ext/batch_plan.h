/*
** batch_plan.h — how dc_batch turns a list of cells into work: direct runs, the distinct
** chunks to fetch, groups that fit the memory budget, the output layout, and the row
** kernels that count and copy rows (mapped to a gene panel) on the pool.
**
** Pure C: no SQLite (ext/vtab_batch.c is the glue: it parses the arguments, maps cells to
** (tile, chunk, cell) through the reader, fetches chunks and decodes direct runs).
**
**   1. cells -> (tile, chunk, cell)                       (glue: the reader's tile index)
**   2. batch_find_direct: runs of requested cells that cover a whole chunk in order, not
**      cached, are decoded straight into the output later (no panel only)
**   3. batch_chunk_keys: the distinct chunks of the other rows, sorted; batch_groups: those
**      not cached split into groups whose decoded size fits the budget (cached ones join
**      group 0)
**   4. batch_layout: each row's offset in the output, indptr, and each direct run's base
**   batch_run_kernel: counts rows after the panel map, or copies them (sorted) [pool]
*/
#ifndef BATCH_PLAN_H
#define BATCH_PLAN_H
#include <stddef.h>
#include <stdint.h>
#include "dc_codec.h"   /* dc_chunk_info, dc_pool */
#include "dc_cache.h"   /* dc_chunkkey, dc_chunk_data */

/* Where a requested cell lives: tile, chunk of the tile, cell of the chunk. */
typedef struct batch_cellref { uint32_t tile, chunk, cell; } batch_cellref;

/* The header entry of chunk (tile, chunk) (never NULL for a chunk named by a cellref). */
typedef const dc_chunk_info *(*batch_info_fn)(void *ctx, uint32_t tile, uint32_t chunk);
/* Whether chunk (tile, chunk) is in the decoded-chunk cache now. */
typedef int (*batch_cached_fn)(void *ctx, uint32_t tile, uint32_t chunk);

/* One output row: its source row and its size after the panel map.  A row of a direct
** run has n_out -1, except the run's first, which holds -1 - (the run's nonzeros). */
typedef struct batch_row {
  const int32_t *idx, *val;   /* source row */
  uint32_t n_in;
  int64_t n_out;
} batch_row;

/* A direct run: rows row0 .. row0 + n_cells - 1 are chunk (tile, chunk), whole, in order;
** its nonzeros start at out_base of the output (set by batch_layout). */
typedef struct batch_run {
  uint32_t tile, chunk;
  uint64_t row0;
  int64_t out_base;
} batch_run;

/* What direct[i] says of row i: fetched from its decoded chunk (0), a row of a direct run, or
** empty without a chunk (a gene panel none of whose genes its tile holds; rows[i].n_out 0).
** Steps 3a and 4 read it; only direct-run rows are laid out from the runs. */
enum { BATCH_ROW_FETCH = 0, BATCH_ROW_DIRECT = 1, BATCH_ROW_EMPTY = 2 };

/* Step 2.  Marks direct[i] = BATCH_ROW_DIRECT for the rows of direct runs (direct and rows zeroed by the
** caller), sets their rows' n_out as described above, and writes the runs to runs (room
** for n / 2 + 1: a run has at least two rows); returns how many.  cached may be NULL (no
** cache). */
size_t batch_find_direct(const int64_t *ids, const batch_cellref *ref, int64_t n, batch_info_fn info, void *ictx,
                         batch_cached_fn cached, void *cctx, uint8_t *direct, batch_row *rows, batch_run *runs);

/* Step 3a.  The distinct chunks of the rows to fetch (direct[i] 0), sorted by (tile, chunk), in
** keys (room for n); rowkey[i] is the index in keys of row i's chunk (those rows only).
** Returns how many keys. */
size_t batch_chunk_keys(const batch_cellref *ref, const uint8_t *direct, int64_t n, dc_chunkkey *keys,
                        uint32_t *rowkey);

/* Placing (dc_batch's place argument): the rows grouped by their key, rowkey as
** batch_chunk_keys wrote it, BATCH_NO_KEY for a row without a chunk (an empty row: a gene
** panel none of whose genes its tile holds; not listed): rows[row0[q] .. row0[q + 1]) are
** the rows of key q, in row order (row0 has n_keys + 1 entries).  Returns -1, or the first
** row (in row order) that repeats a cell an earlier row already asked for (a cell has one
** place; empty rows are not checked); -2 when out of memory. */
#define BATCH_NO_KEY UINT32_MAX
int64_t batch_rows_by_key(const batch_cellref *ref, const uint32_t *rowkey, int64_t n, size_t n_keys,
                          uint64_t *row0, int64_t *rows);

/* Step 3b.  group[q] for each key: 0 for a chunk already held (chunks[q] != NULL), else
** consecutive groups of chunks whose decoded size (8 bytes a nonzero and a cell) stays
** within budget (a chunk larger than the budget is a group of its own).  Returns the
** number of groups (at least 1). */
uint32_t batch_groups(const dc_chunkkey *keys, size_t n_keys, dc_chunk_data *const *chunks, batch_info_fn info,
                      void *ictx, int64_t budget, uint32_t *group);

/* Step 4.  off[i] (rows not of a direct run; an empty row's n_out is 0), indptr[0..n] and
** runs[].out_base (runs in row order, as batch_find_direct wrote them); returns the output's
** nonzeros. */
int64_t batch_layout(int64_t n, const uint8_t *direct, const batch_row *rows, const batch_cellref *ref,
                     batch_info_fn info, void *ictx, batch_run *runs, int64_t *off, int64_t *indptr);

/* A gene panel's members as a bitmap: bit g of bits[g / 64] set when map[g] >= 0 (n_genes
** entries; bits has (n_genes + 63) / 64 words).  Returns the panel's size.  The count kernel
** tests membership there (a few KB, in the L1 cache) instead of in the map (4 bytes a gene). */
int64_t batch_panel_bits(const int32_t *map, int64_t n_genes, uint64_t *bits);

/* The row kernels over rows[which[0..n)] (which NULL: rows 0..n-1). */
typedef struct batch_kernel {
  batch_row *rows;
  const uint64_t *which;
  size_t n;
  const int32_t *map;         /* panel map (gene -> position, -1 dropped) or NULL */
  const uint64_t *bits;       /* with a map: its bitmap (batch_panel_bits) */
  const uint8_t *member;      /* batch_panel_inplace's membership: batch_panel_member's table */
  uint32_t member_mask;       /* its size - 1 */
  int64_t panel_size;         /* with a map: its positions (0 .. panel_size - 1) */
  int64_t n_genes;            /* bound of source gene indices (for the map) */
  int sorted;                 /* the map keeps gene order; else a row's mapped genes are
                              ** put in order by position (a scatter into a scratch of
                              ** panel_size values, or a sort of rows of few) */
  const int64_t *dst_off;     /* fill: destination offset of each row (by row number) */
  int32_t *dst_idx, *dst_val;
  int bad;                    /* count: 1 = a source gene index out of range; fill: 2 = out of memory */
} batch_kernel;

enum { BATCH_COUNT, BATCH_FILL };

/* Scratch of the kernels for a panel not in gene order (made at first use; free with
** batch_scratch_free; zero-initialise it). */
typedef struct batch_scratch { int32_t *sv; uint64_t *occ; } batch_scratch;
void batch_scratch_free(batch_scratch *sc);

/* The in-place filter's membership table: member[g] = 1 for a panel gene (map[g] >= 0), 0
** for every other g up to the returned mask, the table's size - 1 (a power of two - 1, at
** least n_genes - 1; member has room for batch_member_mask(n_genes) + 1 bytes). */
uint32_t batch_member_mask(int64_t n_genes);
uint32_t batch_panel_member(const int32_t *map, int64_t n_genes, uint8_t *member);

/* A placed row filtered to the panel in place: its n_in (gene index, value) pairs become
** its panel members' (position, value), in order of position, at its front (values are
** copied as 4-byte words: int32 or float32 alike).  Uses k's member, member_mask, map,
** panel_size and sorted.  Membership is one load per nonzero, with no branch: a gene index
** is taken modulo the table's size (a decoded row holds none of n_genes or more: the decoder
** checks them; whatever a row holds, nothing outside the tables is read, and no index of
** n_genes or more is kept).  Returns the members, or -2 out of memory. */
int64_t batch_panel_inplace(const batch_kernel *k, int32_t *idx, int32_t *val, uint32_t n_in, batch_scratch *sc);

/* Moves rows i = 0 .. n-1 of (idx, val), each cnt[i] entries at offset src[i], to follow one
** another from offset dst on (values of width bytes), in order: a batch laid out for its
** rows' sizes before a panel, packed to their sizes after it.  Each row moves towards the
** front: a src[i] below where row i goes, or a negative cnt, is -1 (nothing after it moved).
** Returns the offset after the last row. */
int64_t batch_compact(int64_t n, const int64_t *src, const int64_t *cnt, int32_t *idx, void *val, size_t width,
                      int64_t dst);
/* Runs the count (n_out of each row) or the fill (copy, mapped and sorted) on the pool
** (pool NULL: on the calling thread).  Check k->bad afterwards. */
void batch_run_kernel(dc_pool *pool, batch_kernel *k, int which);

/* The take: rows (no panel map) copied straight from their decoded chunks into a caller's
** arrays, values converted to the caller's kind on the way (one copy in all).  Row i goes
** to off[i].  Values are the stored counts, uint32 (0 .. 2^32-1); one that the kind cannot hold
** (int32 from 2^31 on, int16, int8, uint8 above their maximum) is an error: bad_pos is then the
** smallest output position of such a value and bad_val the value (bad_pos INT64_MAX: none). */
enum { BATCH_KIND_I32, BATCH_KIND_F32, BATCH_KIND_I16, BATCH_KIND_I8, BATCH_KIND_U8, BATCH_KIND_F64,
       BATCH_KIND_I64, BATCH_KIND_U32, BATCH_KIND_N };
typedef struct batch_take {
  const batch_row *rows;
  int64_t n;
  const int64_t *off;
  int32_t *dst_idx;           /* or NULL */
  void *dst_val;              /* or NULL */
  int kind;                   /* BATCH_KIND_* */
  int64_t bad_pos, bad_val;
} batch_take;
/* Runs the take on the pool (NULL: the calling thread); returns 0, or -1 when a value does
** not fit the kind (see bad_pos), -2 for an unknown kind. */
int batch_run_take(dc_pool *pool, batch_take *t);
#endif
