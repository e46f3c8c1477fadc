/*
** dc_agg.h — count statistics per (group, gene) over the chunks of tiles:
** the core of dc_aggregate (ext/vtab_aggregate.c).  Pure C: no SQLite, no
** HDF5; it uses the codec's public API (dc_codec.h) to decode chunks.
**
** For every selected cell (a cell whose group is >= 0) and every output gene
** it accumulates, per group:
**   n_cells                 cells of the group
**   sum[g][j]               sum of the counts of gene j
**   n_expr[g][j]            cells with a nonzero count of gene j
**   sum_log1p[g][j]         (optional) sum of log1p(count / cell total * scale),
**                           the cell total being the sum of ALL the cell's counts
**                           (every gene of the dataset, not only the panel)
** from which the caller derives means including zeros (sum / n_cells), the
** fraction expressing (n_expr / n_cells) and the mean of log1p-normalised
** counts (sum_log1p / n_cells).  Sums and counts are exact (uint64).
**
** Output genes: every gene of the dataset (j = gene id), or a panel: a map
** gene id -> position in the panel, or -1 for a gene left out.
**
** Work: one job per chunk.  dc_agg_run decodes each job's chunk (plain bytes
** read by the caller: no callback, no I/O) and accumulates it on the pool,
** decode and accumulation of one chunk on the same thread while the chunk is
** in cache.  Every thread that runs jobs at once takes its own accumulator
** set ("slot", dc_agg_opts.slots of them, at least dc_pool_size), so no two
** threads write the same memory; dc_agg_finish adds the slots up.  Memory:
** slots x n_groups x n_out x 16 bytes (24 with log1p) plus one decoded chunk
** per slot; nothing per cell.  Buffers are kept by dc_agg_reset, so a caller
** that keeps one dc_agg reuses memory that is already mapped.
*/
#ifndef DC_AGG_H
#define DC_AGG_H
#include <stddef.h>
#include <stdint.h>
#include "dc_codec.h"

typedef struct dc_agg_opts {
  uint32_t n_genes;        /* genes of the dataset: decoded indices are < n_genes      */
  const int32_t *panel;    /* NULL = every gene; else n_genes entries: output position
                              (0 .. n_out-1) or -1 (the array must outlive the runs)   */
  uint32_t n_out;          /* output genes (n_genes without a panel)                    */
  int log1p;               /* 1: also accumulate sum_log1p                              */
  double scale;            /* the counts-per-`scale` target of log1p (e.g. 1e4)         */
  int slots;               /* accumulator sets; >= the threads of the pool used         */
} dc_agg_opts;

typedef struct dc_agg dc_agg;

/* A new aggregator with no group (DC_EARG / DC_ENOMEM in err on NULL). */
dc_agg *dc_agg_new(const dc_agg_opts *o, dc_error *err);
void dc_agg_free(dc_agg *a);
/* Starts over with new options (zeroes the counts, keeps buffers that fit). */
int dc_agg_reset(dc_agg *a, const dc_agg_opts *o, dc_error *err);
/* Makes groups 0 .. n_groups-1 exist (new ones zero); never shrinks.  Not
** while a run is in progress. */
int dc_agg_set_groups(dc_agg *a, uint32_t n_groups, dc_error *err);
uint32_t dc_agg_groups(const dc_agg *a);
/* Bytes of accumulators per group (all slots). */
uint64_t dc_agg_group_bytes(const dc_agg_opts *o);

/* One chunk: either encoded (buf != NULL: chunk `chunk` of the parsed tile
** hdr, whose bytes buf/len hold at least the header, shared section and that
** chunk's payload) or already decoded (buf == NULL: n_cells rows of indptr
** (indptr[0] == 0) / indices / values).  group[c] is the group of cell c of
** the chunk, or -1 to leave the cell out. */
typedef struct dc_agg_job {
  const uint8_t *buf;
  size_t len;
  const dc_tile_hdr *hdr;
  uint32_t chunk;
  uint32_t n_cells;
  const int64_t *indptr;
  const int32_t *indices;
  const int32_t *values;
  const int32_t *group;
  int rc;                  /* out: DC_OK or a DC_E* code */
  dc_error err;            /* out */
} dc_agg_job;

/* Decodes and accumulates every job across the pool (p may be NULL: serial).
** Returns DC_OK or the rc of the first failed job (in job order); every
** job's rc/err is filled.  A group out of range, a gene index >= n_genes or
** a chunk with more genes than n_genes is DC_ECORRUPT/DC_EARG, never a write
** out of bounds.  After a failure the counts are unspecified (reset). */
int dc_agg_run(dc_agg *a, dc_pool *p, dc_agg_job *jobs, size_t n_jobs);

/* The totals (valid until the next call that changes the aggregator).
** Entry k = g * n_out + j (group-major): acc[2k] is the sum of the counts,
** acc[2k+1] the cells expressing (count > 0). */
typedef struct dc_agg_result {
  uint32_t n_groups, n_out;
  const uint64_t *n_cells;     /* n_groups entries */
  const uint64_t *acc;         /* 2 x n_groups x n_out, interleaved (sum, n_expr) */
  const double *sum_log1p;     /* n_groups x n_out, or NULL without log1p */
} dc_agg_result;
/* Adds the slots up into the result (idempotent; more runs may follow). */
int dc_agg_finish(dc_agg *a, dc_agg_result *out, dc_error *err);

#endif
