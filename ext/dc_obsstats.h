/*
** dc_obsstats.h — the obs statistics of a dataset schema: part of the connection's dataset
** object (the dc_index of reader.c, one per connection, schema and data version), loaded by
** reader_obs.c on first use and dropped with the index when the data version changes.
**
** For one obs table (`cells`: shadow tables <table>_columns, <table>_dict, <table>_blocks) it
** holds the stored columns and their counts, each block's boundaries and statistics (null
** count, min, max, present bitmap, seal once read), the category dictionaries (loaded on
** first use) and the decoded-block cache (cells_blocks.h), so that every table object and
** every function of the connection that needs obs metadata (`cells`, dc_batch's obs values
** through it) shares one copy, loaded once per data version.  All of it is validated at load
** (SQLITE_CORRUPT_VTAB naming the column and the block).  Querying thread only.
*/
#ifndef DC_OBSSTATS_H
#define DC_OBSSTATS_H
#include "dc_ext.h"
#include <stdint.h>
#include "dc_obs.h"
#include "cells_filter.h"
#include "cells_blocks.h"

/* One stored column (k = 0 is the obs index, '_index'). */
typedef struct dc_obscol {
  char *name;
  int64_t col;            /* <table>_columns.col */
  int kind;               /* DC_OBS_*, 0 for a kind this build does not know */
  uint32_t n_categories;
  int64_t null_count;
  int64_t bytes;
  /* category dictionary, loaded on first use (dict.buf and dict.off sqlite3_malloc'd) */
  int dict_loaded;
  cells_dict dict;
  int dict_numeric;       /* some value could read as a number */
} dc_obscol;

typedef struct dc_obsstats dc_obsstats;
struct dc_obsstats {
  struct dc_obsstats *next;   /* the index's list (one entry per obs table) */
  sqlite3 *db;
  char *schema, *table;
  uint64_t gen;           /* fresh per load: what was taken from an older load is stale */
  int n_col;
  dc_obscol *col;         /* [n_col], in col order */
  int sealed;             /* format version >= 3: rows carry seals (dc_seal.h) */
  uint64_t dataset_id;    /* the seals' key */
  int64_t n_cells;
  int64_t n_blocks;
  int64_t *blk_first;     /* [n_blocks + 1] */
  cells_bstat *bs;        /* [n_col * n_blocks], column major */
  cells_bcache cache;     /* decoded blocks */
};

/* The obs statistics of obs table `table` of the reader's dataset object: dc_reader_obs in
** dc_reader.h (the reader has begun).  Loads and checks the dictionary of category column k
** (once per load); messages start "cells: ". */
int dc_obsstats_dict(dc_obsstats *s, int k, char **pzErr);

#endif
