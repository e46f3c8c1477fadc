/*
** reader_obs.c — the obs statistics of the dataset object (dc_obsstats.h): loaded from the
** obs table's shadow tables (<table>_columns, <table>_blocks; <table>_dict per column on first
** use) into the connection's tile index of the schema (reader.c's dc_index), once per data
** version, and validated; every `cells` table object and dc_batch's obs values take them from
** there.  Bad stored data gives SQLITE_CORRUPT_VTAB with a message naming the column and the
** block.  SQLite glue; querying thread only.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reader_int.h"
#include "dc_obsstats.h"
#include "dc_seal.h"

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


/* Loads and validates the statistics of obs table s->table (the reader r has begun: its tile
** index is current). */
static int obs_load(dc_reader *r, dc_obsstats *s, char **pzErr) {
  sqlite3_stmt *st = NULL;
  char *sql = NULL;
  int rc = SQLITE_OK;
  int64_t nb = -1;
  /* the stored columns and their counts (which change when cells are added); a table that
  ** declared its columns at connect time checks them against these (cells_store.c) */
  sql = sqlite3_mprintf("SELECT col, name, kind, n_categories, null_count, bytes FROM \"%w\".\"%w_columns\" ORDER BY col",
                        s->schema, s->table);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  {
    int cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      if (s->n_col == cap) {
        int ncap = cap ? cap * 2 : 16;
        dc_obscol *q = sqlite3_realloc64(s->col, (sqlite3_uint64)ncap * sizeof *q);
        if (!q) { rc = SQLITE_NOMEM; goto done; }
        s->col = q;
        cap = ncap;
      }
      dc_obscol *c = &s->col[s->n_col];
      memset(c, 0, sizeof *c);
      const char *nm = (const char *)sqlite3_column_text(st, 1);
      c->name = sqlite3_mprintf("%s", nm ? nm : "");
      if (!c->name) { rc = SQLITE_NOMEM; goto done; }
      s->n_col++;
      c->col = sqlite3_column_int64(st, 0);
      c->kind = dc_obs_kind_from_name((const char *)sqlite3_column_text(st, 2));
      int64_t ncat = sqlite3_column_int64(st, 3);
      if (c->kind == DC_OBS_CATEGORY) {
        if (ncat < 0 || ncat > (int64_t)DC_OBS_MAX_CATEGORIES) {
          rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' has %lld categories", c->name, (long long)ncat);
          goto done;
        }
        c->n_categories = (uint32_t)ncat;
      }
      c->null_count = sqlite3_column_int64(st, 4);
      c->bytes = sqlite3_column_int64(st, 5);
    }
    if (rc != SQLITE_DONE) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
    rc = SQLITE_OK;
  }
  if (s->n_col == 0 || s->col[0].col != 0 || strcmp(s->col[0].name, "_index") != 0 || s->col[0].kind != DC_OBS_TEXT) {
    rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: %s_columns has no text column '_index' as col 0", s->table);
    goto done;
  }
  sqlite3_finalize(st);
  st = NULL;
  sqlite3_free(sql);
  /* blocks per column: all columns have the same count and boundaries */
  sql = sqlite3_mprintf("SELECT col, count(*) FROM \"%w\".\"%w_blocks\" GROUP BY col", s->schema, s->table);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  int ncol_seen = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t col = sqlite3_column_int64(st, 0), cnt = sqlite3_column_int64(st, 1);
    int found = 0;
    for (int k = 0; k < s->n_col; k++) if (s->col[k].col == col) found = 1;
    if (!found) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: %s_blocks has blocks of column %lld, which %s_columns lacks",
                   s->table, (long long)col, s->table);
      goto done;
    }
    if (nb >= 0 && cnt != nb) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: columns have different numbers of blocks (%lld and %lld)",
                   (long long)nb, (long long)cnt);
      goto done;
    }
    nb = cnt;
    ncol_seen++;
  }
  if (rc != SQLITE_DONE) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  sqlite3_finalize(st); st = NULL;
  sqlite3_free(sql); sql = NULL;
  if (nb < 0) nb = 0;
  if (nb > 0 && ncol_seen != s->n_col) {
    rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: %d of the %d columns have no blocks", s->n_col - ncol_seen, s->n_col);
    goto done;
  }
  if (nb > ((int64_t)1 << 32)) { rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: %lld blocks", (long long)nb); goto done; }
  s->n_blocks = nb;
  s->blk_first = sqlite3_malloc64((sqlite3_uint64)(nb + 1) * sizeof(int64_t));
  s->bs = sqlite3_malloc64((sqlite3_uint64)(nb ? nb : 1) * (sqlite3_uint64)s->n_col * sizeof(cells_bstat));
  if (!s->blk_first || !s->bs) { rc = SQLITE_NOMEM; goto done; }
  memset(s->bs, 0, (size_t)(nb ? nb : 1) * (size_t)s->n_col * sizeof(cells_bstat));
  s->blk_first[0] = 0;

  s->sealed = r->sealed;            /* the seal key: read with the tile index (dc_dataset_seal) */
  s->dataset_id = r->dataset_id;
  /* not the checksum: it follows the data blob in the row, and reading it would read every
  ** column's data (a remote dataset would fetch all of them); block_seal_check reads it */
  sql = sqlite3_mprintf("SELECT id, col, block, first_cell, n_cells, null_count, min, max, present "
                        "FROM \"%w\".\"%w_blocks\" ORDER BY col, block", s->schema, s->table);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  int k = -1;
  int64_t b = 0, cur_col = -1;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0), col = sqlite3_column_int64(st, 1);
    int64_t blk = sqlite3_column_int64(st, 2), first = sqlite3_column_int64(st, 3);
    int64_t n = sqlite3_column_int64(st, 4), nulls = sqlite3_column_int64(st, 5);
    if (col != cur_col) {
      k = -1;
      for (int j = 0; j < s->n_col; j++) if (s->col[j].col == col) k = j;
      cur_col = col;
      b = 0;
    }
    const char *cname = k >= 0 ? s->col[k].name : "?";
    if (k < 0 || blk != b || b >= nb) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s': block %lld is out of sequence", cname, (long long)blk);
      goto done;
    }
    if (id != (int64_t)((uint64_t)col << 32 | (uint64_t)blk) || col < 0 || col > 0x7fffffff) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: id %lld is not col*2^32+block",
                   cname, (long long)blk, (long long)id);
      goto done;
    }
    if (n <= 0 || n > (int64_t)DC_OBS_MAX_N || nulls < 0 || nulls > n) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: bad n_cells %lld or null_count %lld",
                   cname, (long long)blk, (long long)n, (long long)nulls);
      goto done;
    }
    if (k == 0) {
      if (first != s->blk_first[b]) {
        rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: first_cell %lld where %lld is expected",
                     cname, (long long)blk, (long long)first, (long long)s->blk_first[b]);
        goto done;
      }
      s->blk_first[b + 1] = first + n;
    } else if (first != s->blk_first[b] || first + n != s->blk_first[b + 1]) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: cells %lld..%lld differ from column '_index'",
                   cname, (long long)blk, (long long)first, (long long)(first + n));
      goto done;
    }
    cells_bstat *bst = &s->bs[(int64_t)k * nb + b];
    bst->null_count = nulls;
    int mn_null, mx_null;
    int kind = s->col[k].kind;
    int r1 = mm_read(st, 6, kind, &bst->mn, &mn_null);
    int r2 = mm_read(st, 7, kind, &bst->mx, &mx_null);
    if (r1 == SQLITE_NOMEM || r2 == SQLITE_NOMEM) { rc = SQLITE_NOMEM; goto done; }
    if (r1 || r2 || mn_null != mx_null || mn_null != (nulls == n)) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: bad min/max", cname, (long long)blk);
      goto done;
    }
    bst->has = !mn_null;
    if (kind == DC_OBS_CATEGORY && bst->has) {
      if (bst->mn.real || bst->mx.real || bst->mn.i < 0 || bst->mx.i < bst->mn.i || bst->mx.i >= (int64_t)s->col[k].n_categories) {
        rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: min/max codes out of range", cname, (long long)blk);
        goto done;
      }
      if (sqlite3_column_type(st, 8) == SQLITE_BLOB) {
        int pl = sqlite3_column_bytes(st, 8);
        if (pl > ((int64_t)s->col[k].n_categories + 7) / 8) {
          rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: present bitmap too long", cname, (long long)blk);
          goto done;
        }
        bst->present = sqlite3_malloc(pl > 0 ? pl : 1);
        if (!bst->present) { rc = SQLITE_NOMEM; goto done; }
        if (pl) memcpy(bst->present, sqlite3_column_blob(st, 8), (size_t)pl);
        bst->present_len = pl;
      }
    }
    if (!bst->present && sqlite3_column_type(st, 8) != SQLITE_NULL) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s' block %lld: a present bitmap where none belongs "
                   "(only a category block with values has one)", cname, (long long)blk);
      goto done;
    }
    b++;
  }
  if (rc != SQLITE_DONE) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  rc = SQLITE_OK;
  sqlite3_finalize(st); st = NULL;
  sqlite3_free(sql); sql = NULL;
  s->n_cells = s->blk_first[nb];

  /* the tile index covers the same cells (cells' tile column, dc_batch's obs values) */
  if (r->n_cells != s->n_cells) {
    rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: tiles cover %lld cells, the obs columns %lld",
                   (long long)r->n_cells, (long long)s->n_cells);
    goto done;
  }
  if (cells_bcache_init(&s->cache, s->n_col, nb)) { rc = SQLITE_NOMEM; goto done; }
done:
  sqlite3_finalize(st);
  sqlite3_free(sql);
  return rc;
}


int dc_obsstats_dict(dc_obsstats *s, int k, char **pzErr) {
  dc_obscol *c = &s->col[k];
  if (c->dict_loaded) return SQLITE_OK;
  sqlite3_stmt *st = NULL;
  int rc;
  uint64_t cap = 1024, used = 0;
  char *buf = NULL;
  uint32_t *off = NULL;
  int64_t want_seal = 0;
  if (s->sealed) {
    char *q = sqlite3_mprintf("SELECT checksum FROM \"%w\".\"%w_columns\" WHERE col = ?1", s->schema, s->table);
    if (!q) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v2(s->db, q, -1, &st, NULL);
    sqlite3_free(q);
    if (rc) return dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db));
    sqlite3_bind_int64(st, 1, c->col);
    rc = sqlite3_step(st);
    int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER;
    if (ok) want_seal = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (!ok) return dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s': %s_columns has no checksum (an integer) for it",
                            c->name, s->table);
  }
  dc_seal ds = {NULL};
  dc_blockplace dpl = {"cells", c->col, c->name, c->kind, (int64_t)c->n_categories, 0, 0, 0, 0};
  if (s->sealed && dc_seal_dict_begin(&ds, s->dataset_id, &dpl)) return SQLITE_NOMEM;
  char *sql = sqlite3_mprintf("SELECT code, value FROM \"%w\".\"%w_dict\" WHERE col = ?1 ORDER BY code", s->schema, s->table);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  sqlite3_bind_int64(st, 1, c->col);
  buf = sqlite3_malloc64(cap);
  off = sqlite3_malloc64(((sqlite3_uint64)c->n_categories + 1) * sizeof *off);
  if (!buf || !off) { rc = SQLITE_NOMEM; goto done; }
  off[0] = 0;
  uint32_t code = 0;
  int numeric = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (sqlite3_column_int64(st, 0) != (int64_t)code || code >= c->n_categories) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: dictionary of column '%s': code %lld where %u is expected (of %u)",
                   c->name, (long long)sqlite3_column_int64(st, 0), code, c->n_categories);
      goto done;
    }
    const unsigned char *z = sqlite3_column_text(st, 1);
    int n = sqlite3_column_bytes(st, 1);
    if (!z && sqlite3_column_type(st, 1) != SQLITE_NULL) { rc = SQLITE_NOMEM; goto done; }
    if (used + (uint64_t)n + 1 > cap) {
      while (used + (uint64_t)n + 1 > cap) cap *= 2;
      if (cap > 0xffffffffu) { rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: dictionary of column '%s' is over 4 GiB", c->name); goto done; }
      char *q = sqlite3_realloc64(buf, cap);
      if (!q) { rc = SQLITE_NOMEM; goto done; }
      buf = q;
    }
    if (n) memcpy(buf + used, z, (size_t)n);
    if (s->sealed) dc_seal_bytes(&ds, z, (size_t)n);
    if (cells_maybe_numeric((const char *)z, n)) numeric = 1;
    used += (uint64_t)n;
    buf[used] = 0;   /* a terminator past each value (not counted) */
    off[++code] = (uint32_t)used;
    used++;
    off[code] = (uint32_t)(used - 1);
  }
  if (rc != SQLITE_DONE) { rc = dc_err(pzErr, rc, NULL, "cells: %s", sqlite3_errmsg(s->db)); goto done; }
  if (code != c->n_categories) {
    rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: dictionary of column '%s' has %u of its %u values", c->name, code, c->n_categories);
    goto done;
  }
  rc = SQLITE_OK;
  if (s->sealed) {
    int64_t got = 0;
    if (dc_seal_end(&ds, &got)) { rc = SQLITE_NOMEM; goto done; }
    if (got != want_seal) {
      rc = dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "cells: column '%s': checksum mismatch: its dictionary (%u values in "
                   "%s_dict) or its %s_columns row was changed", c->name, c->n_categories, s->table, s->table);
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


static void obs_free(dc_obsstats *s) {
  cells_bcache_clear(&s->cache);   /* blocks a cursor still holds live on until released */
  for (int k = 0; k < s->n_col; k++) {
    sqlite3_free(s->col[k].name);
    sqlite3_free((char *)s->col[k].dict.buf);
    sqlite3_free((uint32_t *)s->col[k].dict.off);
  }
  sqlite3_free(s->col);
  if (s->bs) {
    for (int64_t i = 0; i < (int64_t)s->n_col * s->n_blocks; i++) {
      sqlite3_free(s->bs[i].mn.s); sqlite3_free(s->bs[i].mx.s); sqlite3_free(s->bs[i].present);
    }
  }
  sqlite3_free(s->bs);
  sqlite3_free(s->blk_first);
  sqlite3_free(s->schema);
  sqlite3_free(s->table);
  sqlite3_free(s);
}

void dc_obsstats_free_list(dc_obsstats *s) {
  while (s) {
    dc_obsstats *next = s->next;
    obs_free(s);
    s = next;
  }
}

int dc_reader_obs(dc_reader *r, const char *table, dc_obsstats **out, char **pzErr) {
  *out = NULL;
  dc_index *ix = r->ix;
  if (!ix) return dc_err(pzErr, SQLITE_ERROR, NULL, "%s: obs statistics asked before the tile index was read", r->what);
  for (dc_obsstats *s = ix->obs; s; s = s->next) {
    if (!strcmp(s->table, table)) { *out = s; return SQLITE_OK; }
  }
  dc_obsstats *s = sqlite3_malloc64(sizeof *s);
  if (!s) return SQLITE_NOMEM;
  memset(s, 0, sizeof *s);
  s->db = r->db;
  s->schema = sqlite3_mprintf("%s", r->schema);
  s->table = sqlite3_mprintf("%s", table);
  int rc = !s->schema || !s->table ? SQLITE_NOMEM : obs_load(r, s, pzErr);
  if (rc != SQLITE_OK) { obs_free(s); return rc; }   /* nothing half loaded is kept */
  s->gen = r->conn ? dc_conn_namespace(r->conn) : ix->ns;
  if (r->conn) r->conn->obs_loads++;
  s->next = ix->obs;
  ix->obs = s;
  *out = s;
  return SQLITE_OK;
}
