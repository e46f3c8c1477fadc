/*
** cells_store.c — the stored data of the `cells` table (SQLite glue; see cells_vtab.h):
** the obs statistics (blocks' statistics, category dictionaries, decoded-block cache) and the
** tiles' first cells taken from the connection's dataset object of the schema (reader.c,
** reader_obs.c: loaded and validated there once per data version); blocks read through a
** cursor's blob handle, checked against their seals, decoded and kept in the statistics'
** decoded-block cache.  Bad stored
** data gives SQLITE_CORRUPT_VTAB with a message naming the column and the block.
*/
#include "cells_vtab.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "dc_reader.h"
#include "dc_format.h"
#include "dc_seal.h"


int cells_table_exists(sqlite3 *db, const char *zDb, const char *zTab) {
  return sqlite3_table_column_metadata(db, zDb, zTab, NULL, NULL, NULL, NULL, NULL, NULL) == SQLITE_OK;
}

/* The view of obs statistics st (the tile index is rd's, begun already). */
static void view(cells_vtab *p, dc_obsstats *st) {
  p->st = st;
  p->st_gen = st->gen;
  p->cs = st->col;
  for (int k = 0; k < p->n_ocol; k++) {
    p->oc[k].n_categories = st->col[k].n_categories;
    p->oc[k].null_count = st->col[k].null_count;
    p->oc[k].bytes = st->col[k].bytes;
  }
  p->sealed = st->sealed;
  p->dataset_id = st->dataset_id;
  p->n_cells = st->n_cells;
  p->n_blocks = st->n_blocks;
  p->blk_first = st->blk_first;
  p->bs = st->bs;
  p->cache = &st->cache;
  p->tile_first = p->rd->tile_first;
  p->n_tiles = p->rd->n_tiles;
  p->has_tiles = 1;
  p->loaded = 1;
}

/* Forgets the view (what it viewed belongs to the dataset object). */
static void unview(cells_vtab *p) {
  p->loaded = 0;
  p->st = NULL;
  p->st_gen = 0;
  p->cs = NULL;
  p->blk_first = NULL;
  p->bs = NULL;
  p->cache = NULL;
  p->tile_first = NULL;
  p->n_blocks = 0; p->n_tiles = 0; p->has_tiles = 0; p->n_cells = 0;
}

/* Takes the obs statistics of this table from the dataset object p->rd began with (loaded
** there on first use), the columns checked against the declared ones. */
static int take(cells_vtab *p) {
  dc_obsstats *st = NULL;
  int rc = dc_reader_obs(p->rd, p->zName, &st, &p->base.zErrMsg);
  if (rc) return rc;
  /* the columns themselves are the table's declared schema: a different set needs a new
  ** connection (their counts change when cells are added) */
  int same = st->n_col == p->n_ocol;
  for (int k = 0; k < p->n_ocol && same; k++)
    same = st->col[k].col == p->oc[k].col && st->col[k].kind == p->oc[k].kind && !strcmp(st->col[k].name, p->oc[k].name);
  if (!same)
    return dc_err(&p->base.zErrMsg, SQLITE_SCHEMA, NULL, "cells: the obs columns of %s.%s changed since this connection "
                  "opened it: open the dataset again", p->zDb, p->zName);
  view(p, st);
  return SQLITE_OK;
}

int cells_load(cells_vtab *p) {
  if (p->loaded) return SQLITE_OK;
  int rc;
  /* tiles: a dataset without them has lost its count matrix (a `tile` of NULL
  ** would hide that) */
  if (!cells_table_exists(p->db, p->zDb, DC_TILES_DATA))
    return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: table %s." DC_TILES_DATA " is missing (dropped?): the dataset "
                  "has lost its count matrix", p->zDb);
  /* the connection's dataset object of this schema (reader.c; the tile index and the obs
  ** statistics are loaded there once per data version for every table, and validated) */
  if (!p->rd && (rc = dc_reader_open(p->db, p->conn, p->zDb, "cells", &p->rd, NULL)) != SQLITE_OK) return rc;
  if ((rc = dc_reader_begin(p->rd, &p->base.zErrMsg)) != SQLITE_OK) return rc;
  return take(p);
}

int cells_dict_load(cells_vtab *p, int k) {
  if (!p->loaded) return SQLITE_ERROR;   /* cells_load first */
  return dc_obsstats_dict(p->st, k, &p->base.zErrMsg);
}

/* the cache's budget: a quarter of the connection's cache_mb (dc_config) */
static int64_t cache_budget(const cells_vtab *p) {
  return p->conn ? p->conn->cache_bytes / 4 : (int64_t)64 << 20;
}

/* Moves the cursor's blob handle to block b of stored column k. */
static int blob_to(cells_cursor *c, int k, int64_t b) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  ocol *oc = &p->oc[k];
  sqlite3_int64 rowid = (sqlite3_int64)((uint64_t)oc->col << 32 | (uint64_t)b);
  int rc;
  if (c->blob) {
    rc = sqlite3_blob_reopen(c->blob, rowid);
    if (rc) { sqlite3_blob_close(c->blob); c->blob = NULL; }
  } else {
    rc = sqlite3_blob_open(p->db, p->zDb, p->zBlocks, "data", rowid, 0, &c->blob);
    if (rc) c->blob = NULL;
  }
  if (rc == SQLITE_NOMEM) return rc;
  if (rc) return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: cannot read its data (%s)",
                         oc->name, (long long)b, sqlite3_errmsg(p->db));
  return SQLITE_OK;
}

/* Checks the seal of block b of stored column k (format version 3): its
** row's place and statistics with the first bytes of its blob (head, of a
** blob of blob_len bytes).  Statistics are used only once checked. */
static int block_seal_check(cells_vtab *p, int k, int64_t b, const uint8_t *head, uint64_t blob_len) {
  cells_bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
  if (!p->sealed || bs->verified) return SQLITE_OK;
  const ocol *oc = &p->oc[k];
  if (!bs->seal_read) {
    sqlite3_stmt *st = NULL;
    char *q = sqlite3_mprintf("SELECT checksum FROM \"%w\".\"%w_blocks\" WHERE id = ?1", p->zDb, p->zName);
    if (!q) return SQLITE_NOMEM;
    int rc = sqlite3_prepare_v2(p->db, q, -1, &st, NULL);
    sqlite3_free(q);
    if (rc == SQLITE_OK) {
      sqlite3_bind_int64(st, 1, (int64_t)((uint64_t)oc->col << 32 | (uint64_t)b));
      rc = sqlite3_step(st);
      if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        bs->seal = sqlite3_column_int64(st, 0);
        bs->seal_read = 1;
        rc = SQLITE_OK;
      } else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
        sqlite3_finalize(st);
        return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: no checksum (an integer)",
                       oc->name, (long long)b);
      }
    }
    if (rc != SQLITE_OK) {
      rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: column '%s' block %lld: reading its checksum: %s", oc->name, (long long)b,
                   sqlite3_errmsg(p->db));
      sqlite3_finalize(st);
      return rc;
    }
    sqlite3_finalize(st);
  }
  dc_blockplace pl = {"cells", oc->col, oc->name, oc->kind, oc->kind == DC_OBS_CATEGORY ? (int64_t)oc->n_categories : -1,
                      b, p->blk_first[b], p->blk_first[b + 1] - p->blk_first[b], bs->null_count};
  dc_sealval v[3];
  memset(v, 0, sizeof v);
  if (bs->has) {
    const cells_mm *m[2] = {&bs->mn, &bs->mx};
    for (int j = 0; j < 2; j++) {
      if (oc->kind == DC_OBS_TEXT) { v[j].type = DC_SV_TEXT; v[j].p = m[j]->s; v[j].n = (size_t)m[j]->n; }
      else if (m[j]->real) { v[j].type = DC_SV_REAL; v[j].f = m[j]->f; }
      else { v[j].type = DC_SV_INT; v[j].i = m[j]->i; }
    }
  }
  if (bs->present) { v[2].type = DC_SV_BLOB; v[2].p = bs->present; v[2].n = (size_t)bs->present_len; }
  int64_t seal = 0;
  if (dc_seal_block(p->dataset_id, &pl, &v[0], &v[1], &v[2], blob_len, head, &seal)) return SQLITE_NOMEM;
  if (seal != bs->seal)
    return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL,
                   "cells: column '%s' block %lld: checksum mismatch: its data, its statistics (null count, min, max, "
                   "present) and its place (column %lld, cells %lld..%lld) were not written together "
                   "(moved, swapped, copied or edited)", oc->name, (long long)b, (long long)oc->col,
                   (long long)p->blk_first[b], (long long)p->blk_first[b + 1] - 1);
  bs->verified = 1;
  return SQLITE_OK;
}

/* The same, reading only the head of the blob (before its statistics prune). */
int cells_block_seal_verify(cells_cursor *c, int k, int64_t b) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  if (!p->sealed || p->bs[(int64_t)k * p->n_blocks + b].verified) return SQLITE_OK;
  int rc = blob_to(c, k, b);
  if (rc) return rc;
  uint8_t head[DC_SEAL_OBS_HEAD];
  int len = sqlite3_blob_bytes(c->blob);
  int n = len < DC_SEAL_OBS_HEAD ? len : DC_SEAL_OBS_HEAD;
  rc = n ? sqlite3_blob_read(c->blob, head, n, 0) : SQLITE_OK;
  if (rc) return dc_err(&p->base.zErrMsg, rc, NULL, "cells: column '%s' block %lld: %s", p->oc[k].name, (long long)b, sqlite3_errmsg(p->db));
  return block_seal_check(p, k, b, head, (uint64_t)len);
}

/* dc_obs_decode_to's allocator: a new cache entry for the block (cells_dblock_new). */
typedef struct entry_sink {
  int k;
  int64_t b;
  cells_dblock *d;
} entry_sink;
static void *entry_alloc(void *arg, size_t bytes) {
  entry_sink *s = arg;
  s->d = cells_dblock_new(s->k, s->b, bytes);
  return s->d ? cells_dblock_arrays(s->d) : NULL;
}

/* Block b of stored column k, decoded: from the table's cache, or read
** through the cursor's blob handle (into the cache's scratch), decoded by the
** cache's decoder into a new cache entry, checked, and cached. */
int cells_col_block(cells_cursor *c, int k, int64_t b, cells_dblock **out) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  colcache *cc = &c->cc[k];
  ocol *oc = &p->oc[k];
  if (cc->d && cc->d->b == b) { *out = cc->d; return SQLITE_OK; }
  int rc;
  if (oc->kind == DC_OBS_CATEGORY) {
    rc = cells_dict_load(p, k);
    if (rc) return rc;
  }
  cells_dblock *d = cells_bcache_get(p->cache, k, b);
  if (d) {
    cells_dblock_release(cc->d);
    cc->d = d;
    *out = d;
    return SQLITE_OK;
  }
  /* the stored bytes in the cache's scratch, decoded by its decoder: both kept per connection */
  dc_obs_decoder *dec = cells_bcache_decoder(p->cache);
  if (!dec) return SQLITE_NOMEM;
  if ((rc = blob_to(c, k, b)) != SQLITE_OK) return rc;
  int len = sqlite3_blob_bytes(c->blob);
  uint8_t *buf = cells_bcache_scratch(p->cache, (size_t)len);
  if (!buf) return SQLITE_NOMEM;
  rc = len ? sqlite3_blob_read(c->blob, buf, len, 0) : SQLITE_OK;
  if (rc) return dc_err(&p->base.zErrMsg, rc, NULL, "cells: column '%s' block %lld: %s", oc->name, (long long)b, sqlite3_errmsg(p->db));
  if ((rc = block_seal_check(p, k, b, buf, (uint64_t)len)) != SQLITE_OK) return rc;
  dc_obs_expect ex;
  ex.kind = oc->kind;
  ex.n = (uint32_t)(p->blk_first[b + 1] - p->blk_first[b]);
  ex.n_categories = oc->n_categories;
  dc_error err;
  dc_obs_block blk;
  entry_sink es = {k, b, NULL};   /* decoded straight into a new cache entry */
  int drc = dc_obs_decode_to(dec, buf, (size_t)len, &ex, entry_alloc, &es, &blk, &err);
  const cells_bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
  if (drc == DC_ENOMEM) rc = SQLITE_NOMEM;
  else if (drc)
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: %s", oc->name, (long long)b, err.msg);
  else if ((int64_t)blk.null_count != bs->null_count)
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: %u NULLs where the block row says %lld",
                oc->name, (long long)b, blk.null_count, (long long)bs->null_count);
  else if (oc->kind == DC_OBS_CATEGORY && ex.n_categories == 0 && ex.n != blk.null_count)
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: codes without categories", oc->name, (long long)b);
  if (rc) {
    cells_dblock_release(es.d);
    return rc;
  }
  es.d->blk = blk;
  d = cells_bcache_add(p->cache, es.d, cache_budget(p));
  cells_dblock_release(cc->d);
  cc->d = d;
  *out = d;
  return SQLITE_OK;
}

/* Inside a statement's read transaction: the dataset object is made current (the tile index
** and the obs statistics are loaded again there if the data changed; without a data version,
** every time) and viewed again; c's blocks in use of an older load are let go. */
int cells_refresh(cells_vtab *p, cells_cursor *c) {
  int rc;
  if (p->loaded) {
    rc = dc_reader_begin(p->rd, &p->base.zErrMsg);
    if (rc == SQLITE_OK) rc = take(p);
    if (rc) unview(p);
  } else {
    rc = cells_load(p);
  }
  if (c && c->gen != p->st_gen) {
    for (int k = 0; k < p->n_ocol; k++) { cells_dblock_release(c->cc[k].d); c->cc[k].d = NULL; }
    c->gen = p->st_gen;
  }
  return rc;
}
