/*
** cells_store.c — the stored data of the `cells` table (SQLite glue; see cells_vtab.h):
** the blocks' statistics and the category dictionaries loaded from the shadow tables and
** validated, the tiles' first cells taken from the connection's tile index (reader.c); blocks read through a cursor's blob handle, checked
** against their seals, decoded and kept in the table's decoded-block cache.  Bad stored
** data gives SQLITE_CORRUPT_VTAB with a message naming the column and the block.
*/
#include "cells_vtab.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "dc_reader.h"
#include "dc_seal.h"


int cells_table_exists(sqlite3 *db, const char *zDb, const char *zTab) {
  return sqlite3_table_column_metadata(db, zDb, zTab, NULL, NULL, NULL, NULL, NULL, NULL) == SQLITE_OK;
}

static int mm_read(sqlite3_stmt *st, int i, int kind, cells_mm *out, int *is_null) {
  memset(out, 0, sizeof *out);
  int t = sqlite3_column_type(st, i);
  *is_null = t == SQLITE_NULL;
  if (t == SQLITE_NULL) return SQLITE_OK;
  if (kind == DC_OBS_TEXT) {
    if (t != SQLITE_TEXT) return SQLITE_CORRUPT_VTAB;
    const unsigned char *z = sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i);
    out->s = sqlite3_malloc64((sqlite3_uint64)n + 1);
    if (!out->s) return SQLITE_NOMEM;
    if (n) memcpy(out->s, z, (size_t)n);
    out->s[n] = 0;
    out->n = n;
    return SQLITE_OK;
  }
  if (t == SQLITE_INTEGER) { out->i = sqlite3_column_int64(st, i); out->f = (double)out->i; return SQLITE_OK; }
  if (t == SQLITE_FLOAT && kind == DC_OBS_REAL) {
    out->real = 1;
    out->f = sqlite3_column_double(st, i);
    if (isnan(out->f)) return SQLITE_CORRUPT_VTAB;
    return SQLITE_OK;
  }
  return SQLITE_CORRUPT_VTAB;
}

/* Frees what cells_load loaded besides the block cache and dictionaries: the blocks'
** statistics and boundaries (the tiles' first cells belong to the tile index). */
static void stats_free(cells_vtab *p) {
  if (p->bs) {
    for (int64_t i = 0; i < (int64_t)p->n_ocol * p->n_blocks; i++) {
      sqlite3_free(p->bs[i].mn.s); sqlite3_free(p->bs[i].mx.s); sqlite3_free(p->bs[i].present);
    }
  }
  sqlite3_free(p->bs); p->bs = NULL;
  sqlite3_free(p->blk_first); p->blk_first = NULL;
  p->tile_first = NULL;
  p->n_blocks = 0; p->n_tiles = 0; p->has_tiles = 0;
}

/* Loads the blocks' statistics and the tiles (once per table object). */
int cells_load(cells_vtab *p) {
  if (p->loaded) return SQLITE_OK;
  sqlite3_stmt *st = NULL;
  char *sql = NULL;
  int rc = SQLITE_OK;
  int64_t nb = -1;
  if (p->n_ocol == 0 || p->oc[0].col != 0 || strcmp(p->oc[0].name, "_index") != 0 || p->oc[0].kind != DC_OBS_TEXT) {
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: %s_columns has no text column '_index' as col 0", p->zName);
    goto done;
  }
  /* the columns' counts, which change when cells are added (the columns themselves are the
  ** table's declared schema: a different set needs a new connection) */
  sql = sqlite3_mprintf("SELECT col, name, kind, n_categories, null_count, bytes FROM \"%w\".\"%w_columns\" ORDER BY col",
                        p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  {
    int k = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      const char *nm = (const char *)sqlite3_column_text(st, 1);
      int kind = dc_obs_kind_from_name((const char *)sqlite3_column_text(st, 2));
      int64_t ncat = sqlite3_column_int64(st, 3);
      if (k >= p->n_ocol || sqlite3_column_int64(st, 0) != p->oc[k].col || !nm || strcmp(nm, p->oc[k].name) != 0 ||
          kind != p->oc[k].kind) {
        k = -1;
        break;
      }
      if (kind == DC_OBS_CATEGORY) {
        if (ncat < 0 || ncat > (int64_t)DC_OBS_MAX_CATEGORIES) {
          rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' has %lld categories", nm, (long long)ncat);
          goto done;
        }
        p->oc[k].n_categories = (uint32_t)ncat;
      }
      p->oc[k].null_count = sqlite3_column_int64(st, 4);
      p->oc[k].bytes = sqlite3_column_int64(st, 5);
      k++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
    if (k != p->n_ocol) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_SCHEMA, NULL, "cells: the obs columns of %s.%s changed since this connection opened it: "
                   "open the dataset again", p->zDb, p->zName);
      goto done;
    }
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  st = NULL;
  sqlite3_free(sql);
  /* blocks per column: all columns have the same count and boundaries */
  sql = sqlite3_mprintf("SELECT col, count(*) FROM \"%w\".\"%w_blocks\" GROUP BY col", p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  int ncol_seen = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t col = sqlite3_column_int64(st, 0), cnt = sqlite3_column_int64(st, 1);
    int found = 0;
    for (int k = 0; k < p->n_ocol; k++) if (p->oc[k].col == col) found = 1;
    if (!found) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: %s_blocks has blocks of column %lld, which %s_columns lacks",
                   p->zName, (long long)col, p->zName);
      goto done;
    }
    if (nb >= 0 && cnt != nb) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: columns have different numbers of blocks (%lld and %lld)",
                   (long long)nb, (long long)cnt);
      goto done;
    }
    nb = cnt;
    ncol_seen++;
  }
  if (rc != SQLITE_DONE) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  sqlite3_finalize(st); st = NULL;
  sqlite3_free(sql); sql = NULL;
  if (nb < 0) nb = 0;
  if (nb > 0 && ncol_seen != p->n_ocol) {
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: %d of the %d columns have no blocks", p->n_ocol - ncol_seen, p->n_ocol);
    goto done;
  }
  if (nb > ((int64_t)1 << 32)) { rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: %lld blocks", (long long)nb); goto done; }
  p->n_blocks = nb;
  p->blk_first = sqlite3_malloc64((sqlite3_uint64)(nb + 1) * sizeof(int64_t));
  p->bs = sqlite3_malloc64((sqlite3_uint64)(nb ? nb : 1) * (sqlite3_uint64)p->n_ocol * sizeof(cells_bstat));
  if (!p->blk_first || !p->bs) { rc = SQLITE_NOMEM; goto done; }
  memset(p->bs, 0, (size_t)(nb ? nb : 1) * (size_t)p->n_ocol * sizeof(cells_bstat));
  p->blk_first[0] = 0;

  {
    char *msg = NULL;
    rc = dc_dataset_seal(p->db, p->zDb, "cells", &p->sealed, &p->dataset_id, &msg);
    if (rc) {
      rc = dc_err(&p->base.zErrMsg, rc, NULL, "%s", msg ? msg : "cells: cannot read dc_meta");
      sqlite3_free(msg);
      goto done;
    }
  }
  /* not the checksum: it follows the data blob in the row, and reading it would read every
  ** column's data (a remote dataset would fetch all of them); block_seal_check reads it */
  sql = sqlite3_mprintf("SELECT id, col, block, first_cell, n_cells, null_count, min, max, present "
                        "FROM \"%w\".\"%w_blocks\" ORDER BY col, block", p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  int k = -1;
  int64_t b = 0, cur_col = -1;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0), col = sqlite3_column_int64(st, 1);
    int64_t blk = sqlite3_column_int64(st, 2), first = sqlite3_column_int64(st, 3);
    int64_t n = sqlite3_column_int64(st, 4), nulls = sqlite3_column_int64(st, 5);
    if (col != cur_col) {
      k = -1;
      for (int j = 0; j < p->n_ocol; j++) if (p->oc[j].col == col) k = j;
      cur_col = col;
      b = 0;
    }
    const char *cname = k >= 0 ? p->oc[k].name : "?";
    if (k < 0 || blk != b || b >= nb) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s': block %lld is out of sequence", cname, (long long)blk);
      goto done;
    }
    if (id != (int64_t)((uint64_t)col << 32 | (uint64_t)blk) || col < 0 || col > 0x7fffffff) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: id %lld is not col*2^32+block",
                   cname, (long long)blk, (long long)id);
      goto done;
    }
    if (n <= 0 || n > (int64_t)DC_OBS_MAX_N || nulls < 0 || nulls > n) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: bad n_cells %lld or null_count %lld",
                   cname, (long long)blk, (long long)n, (long long)nulls);
      goto done;
    }
    if (k == 0) {
      if (first != p->blk_first[b]) {
        rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: first_cell %lld where %lld is expected",
                     cname, (long long)blk, (long long)first, (long long)p->blk_first[b]);
        goto done;
      }
      p->blk_first[b + 1] = first + n;
    } else if (first != p->blk_first[b] || first + n != p->blk_first[b + 1]) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: cells %lld..%lld differ from column '_index'",
                   cname, (long long)blk, (long long)first, (long long)(first + n));
      goto done;
    }
    cells_bstat *s = &p->bs[(int64_t)k * nb + b];
    s->null_count = nulls;
    int mn_null, mx_null;
    int kind = p->oc[k].kind;
    int r1 = mm_read(st, 6, kind, &s->mn, &mn_null);
    int r2 = mm_read(st, 7, kind, &s->mx, &mx_null);
    if (r1 == SQLITE_NOMEM || r2 == SQLITE_NOMEM) { rc = SQLITE_NOMEM; goto done; }
    if (r1 || r2 || mn_null != mx_null || mn_null != (nulls == n)) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: bad min/max", cname, (long long)blk);
      goto done;
    }
    s->has = !mn_null;
    if (kind == DC_OBS_CATEGORY && s->has) {
      if (s->mn.real || s->mx.real || s->mn.i < 0 || s->mx.i < s->mn.i || s->mx.i >= (int64_t)p->oc[k].n_categories) {
        rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: min/max codes out of range", cname, (long long)blk);
        goto done;
      }
      if (sqlite3_column_type(st, 8) == SQLITE_BLOB) {
        int pl = sqlite3_column_bytes(st, 8);
        if (pl > ((int64_t)p->oc[k].n_categories + 7) / 8) {
          rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: present bitmap too long", cname, (long long)blk);
          goto done;
        }
        s->present = sqlite3_malloc(pl > 0 ? pl : 1);
        if (!s->present) { rc = SQLITE_NOMEM; goto done; }
        if (pl) memcpy(s->present, sqlite3_column_blob(st, 8), (size_t)pl);
        s->present_len = pl;
      }
    }
    if (!s->present && sqlite3_column_type(st, 8) != SQLITE_NULL) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: a present bitmap where none belongs "
                   "(only a category block with values has one)", cname, (long long)blk);
      goto done;
    }
    b++;
  }
  if (rc != SQLITE_DONE) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  rc = SQLITE_OK;
  sqlite3_finalize(st); st = NULL;
  sqlite3_free(sql); sql = NULL;
  p->n_cells = p->blk_first[nb];

  /* tiles: a dataset without them has lost its count matrix (a `tile` of NULL
  ** would hide that) */
  if (!cells_table_exists(p->db, p->zDb, "tiles_data")) {
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: table %s.tiles_data is missing (dropped?): the dataset has lost "
                 "its count matrix", p->zDb);
    goto done;
  }
  /* the tiles' first cells: the connection's tile index of this schema (reader.c; loaded
  ** once per data version for every table of the connection, and validated there) */
  if (!p->rd && (rc = dc_reader_open(p->db, p->conn, p->zDb, "cells", &p->rd, NULL)) != SQLITE_OK) goto done;
  if ((rc = dc_reader_begin(p->rd, &p->base.zErrMsg)) != SQLITE_OK) goto done;
  if (p->rd->n_cells != p->n_cells) {
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: tiles cover %lld cells, the obs columns %lld",
                   (long long)p->rd->n_cells, (long long)p->n_cells);
    goto done;
  }
  p->tile_first = p->rd->tile_first;
  p->n_tiles = p->rd->n_tiles;
  p->has_tiles = 1;
  if (cells_bcache_init(&p->cache, p->n_ocol, nb)) { rc = SQLITE_NOMEM; goto done; }
  p->loaded = 1;
done:
  sqlite3_finalize(st);
  sqlite3_free(sql);
  if (rc && !p->loaded) stats_free(p);   /* leave nothing half loaded */
  return rc;
}

/* Loads the dictionary of category column k. */
int cells_dict_load(cells_vtab *p, int k) {
  ocol *c = &p->oc[k];
  if (c->dict_loaded) return SQLITE_OK;
  sqlite3_stmt *st = NULL;
  int rc;
  uint64_t cap = 1024, used = 0;
  char *buf = NULL;
  uint32_t *off = NULL;
  if (!p->loaded) return SQLITE_ERROR;   /* cells_load first: it knows whether the data is sealed */
  int64_t want_seal = 0;
  if (p->sealed) {
    char *q = sqlite3_mprintf("SELECT checksum FROM \"%w\".\"%w_columns\" WHERE col = ?1", p->zDb, p->zName);
    if (!q) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v2(p->db, q, -1, &st, NULL);
    sqlite3_free(q);
    if (rc) return dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db));
    sqlite3_bind_int64(st, 1, c->col);
    rc = sqlite3_step(st);
    int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER;
    if (ok) want_seal = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (!ok) return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s': %s_columns has no checksum (an integer) for it",
                            c->name, p->zName);
  }
  dc_seal ds = {NULL};
  dc_blockplace dpl = {"cells", c->col, c->name, c->kind, (int64_t)c->n_categories, 0, 0, 0, 0};
  if (p->sealed && dc_seal_dict_begin(&ds, p->dataset_id, &dpl)) return SQLITE_NOMEM;
  char *sql = sqlite3_mprintf("SELECT code, value FROM \"%w\".\"%w_dict\" WHERE col = ?1 ORDER BY code", p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  sqlite3_bind_int64(st, 1, c->col);
  buf = sqlite3_malloc64(cap);
  off = sqlite3_malloc64(((sqlite3_uint64)c->n_categories + 1) * sizeof *off);
  if (!buf || !off) { rc = SQLITE_NOMEM; goto done; }
  off[0] = 0;
  uint32_t code = 0;
  int numeric = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (sqlite3_column_int64(st, 0) != (int64_t)code || code >= c->n_categories) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: dictionary of column '%s': code %lld where %u is expected (of %u)",
                   c->name, (long long)sqlite3_column_int64(st, 0), code, c->n_categories);
      goto done;
    }
    const unsigned char *z = sqlite3_column_text(st, 1);
    int n = sqlite3_column_bytes(st, 1);
    if (!z && sqlite3_column_type(st, 1) != SQLITE_NULL) { rc = SQLITE_NOMEM; goto done; }
    if (used + (uint64_t)n + 1 > cap) {
      while (used + (uint64_t)n + 1 > cap) cap *= 2;
      if (cap > 0xffffffffu) { rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: dictionary of column '%s' is over 4 GiB", c->name); goto done; }
      char *q = sqlite3_realloc64(buf, cap);
      if (!q) { rc = SQLITE_NOMEM; goto done; }
      buf = q;
    }
    if (n) memcpy(buf + used, z, (size_t)n);
    if (p->sealed) dc_seal_bytes(&ds, z, (size_t)n);
    if (cells_maybe_numeric((const char *)z, n)) numeric = 1;
    used += (uint64_t)n;
    buf[used] = 0;   /* a terminator past each value (not counted) */
    off[++code] = (uint32_t)used;
    used++;
    off[code] = (uint32_t)(used - 1);
  }
  if (rc != SQLITE_DONE) { rc = dc_err(&p->base.zErrMsg, rc, NULL, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  if (code != c->n_categories) {
    rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: dictionary of column '%s' has %u of its %u values", c->name, code, c->n_categories);
    goto done;
  }
  rc = SQLITE_OK;
  if (p->sealed) {
    int64_t got = 0;
    if (dc_seal_end(&ds, &got)) { rc = SQLITE_NOMEM; goto done; }
    if (got != want_seal) {
      rc = dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s': checksum mismatch: its dictionary (%u values in "
                   "%s_dict) or its %s_columns row was changed", c->name, c->n_categories, p->zName, p->zName);
      goto done;
    }
  }
  c->dict.n = c->n_categories;
  c->dict.buf = buf;
  c->dict.off = off;
  c->dict_numeric = numeric;
  c->dict_loaded = 1;
  buf = NULL;
  off = NULL;
done:
  if (ds.st) { int64_t unused; dc_seal_end(&ds, &unused); }
  sqlite3_finalize(st);
  sqlite3_free(sql);
  sqlite3_free(buf);
  sqlite3_free(off);
  return rc;
}

/* the cache's budget: a quarter of the connection's cache_mb (dc_config) */
static int64_t cache_budget(const cells_vtab *p) {
  return p->conn ? p->conn->cache_bytes / 4 : (int64_t)64 << 20;
}

/* Forgets what cells_load loaded and every cached block (the data changed under the
** table: another connection or this one wrote to the dataset).  Blocks that a cursor
** still references are freed by their last release. */
void cells_unload(cells_vtab *p) {
  if (!p->loaded) return;
  cells_bcache_clear(&p->cache);
  for (int k = 0; k < p->n_ocol; k++) {
    ocol *oc = &p->oc[k];
    sqlite3_free((char *)oc->dict.buf);
    sqlite3_free((uint32_t *)oc->dict.off);
    memset(&oc->dict, 0, sizeof oc->dict);
    oc->dict_loaded = 0;
    oc->dict_numeric = 0;
  }
  stats_free(p);
  p->loaded = 0;
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

/* Block b of stored column k, decoded: from the table's cache, or read
** through the cursor's blob handle, decoded, checked, and cached. */
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
  cells_dblock *d = cells_bcache_get(&p->cache, k, b);
  if (d) {
    cells_dblock_release(cc->d);
    cc->d = d;
    *out = d;
    return SQLITE_OK;
  }
  if (!cc->dec) {
    cc->dec = dc_obs_decoder_new();
    if (!cc->dec) return SQLITE_NOMEM;
  }
  if ((rc = blob_to(c, k, b)) != SQLITE_OK) return rc;
  int len = sqlite3_blob_bytes(c->blob);
  if ((size_t)len > c->buf_cap) {
    size_t cap = (size_t)len + (size_t)len / 4 + 64;
    uint8_t *q = sqlite3_realloc64(c->buf, cap);
    if (!q) return SQLITE_NOMEM;
    c->buf = q;
    c->buf_cap = cap;
  }
  rc = len ? sqlite3_blob_read(c->blob, c->buf, len, 0) : SQLITE_OK;
  if (rc) return dc_err(&p->base.zErrMsg, rc, NULL, "cells: column '%s' block %lld: %s", oc->name, (long long)b, sqlite3_errmsg(p->db));
  if ((rc = block_seal_check(p, k, b, c->buf, (uint64_t)len)) != SQLITE_OK) return rc;
  dc_obs_expect ex;
  ex.kind = oc->kind;
  ex.n = (uint32_t)(p->blk_first[b + 1] - p->blk_first[b]);
  ex.n_categories = oc->n_categories;
  dc_error err;
  dc_obs_block blk;
  int drc = dc_obs_decode(cc->dec, c->buf, (size_t)len, &ex, &blk, &err);
  if (drc == DC_ENOMEM) return SQLITE_NOMEM;
  if (drc) return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: %s", oc->name, (long long)b, err.msg);
  const cells_bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
  if ((int64_t)blk.null_count != bs->null_count)
    return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: %u NULLs where the block row says %lld",
                   oc->name, (long long)b, blk.null_count, (long long)bs->null_count);
  if (oc->kind == DC_OBS_CATEGORY && ex.n_categories == 0 && ex.n != blk.null_count)
    return dc_err(&p->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: codes without categories", oc->name, (long long)b);
  d = cells_bcache_put(&p->cache, k, b, &blk, cache_budget(p));
  if (!d) return SQLITE_NOMEM;
  cells_dblock_release(cc->d);
  cc->d = d;
  *out = d;
  return SQLITE_OK;
}

/* Inside a statement's read transaction: reloads what cells_load loaded if the data changed
** since (without a data version, every time); c's blocks in use are let go first. */
int cells_refresh(cells_vtab *p, cells_cursor *c) {
  unsigned int dv = 0;
  int have = sqlite3_file_control(p->db, p->zDb, SQLITE_FCNTL_DATA_VERSION, &dv) == SQLITE_OK;
  if (p->loaded && (!have || dv != p->data_version)) {
    for (int k = 0; k < p->n_ocol; k++) { cells_dblock_release(c->cc[k].d); c->cc[k].d = NULL; }
    cells_unload(p);
  }
  int rc = cells_load(p);
  if (rc == SQLITE_OK) p->data_version = dv;
  return rc;
}

