/*
** cells_values.c — stored obs values of given cells for dc_batch (dc_cells_values, dc_ext.h):
** through the schema's `cells` table object (connected on first use), its blocks decoded and
** cached as for a query; categories as codes, bools as 0/1/-1, reals as float64, ints as
** int64 (float64 with NaN when the batch holds a NULL).  SQLite glue of the `cells` module
** (cells_vtab.h).
*/
#include "cells_vtab.h"
#include <math.h>
#include <string.h>
#include "dc_search.h"

static cells_vtab *find_tab(dc_conn *conn, const char *zDb) {
  for (cells_vtab *p = conn->cells_tabs; p; p = p->next_tab)
    if (sqlite3_stricmp(p->zDb, zDb) == 0 && sqlite3_stricmp(p->zName, "cells") == 0) return p;
  return NULL;
}

int dc_cells_values(dc_conn *conn, sqlite3 *db, const char *zDb, const int64_t *cols, int m,
                    const int64_t *ids, int64_t n, void *out, int64_t *fmt, char **pzErr) {
  cells_vtab *p = find_tab(conn, zDb);
  if (!p) {   /* not used yet on this connection: let SQLite connect it */
    char *sql = sqlite3_mprintf("SELECT 1 FROM \"%w\".cells LIMIT 0", zDb);
    sqlite3_stmt *st = NULL;
    if (!sql) return SQLITE_NOMEM;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    sqlite3_free(sql);
    if (rc == SQLITE_OK) rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
    if (rc != SQLITE_OK) *pzErr = sqlite3_mprintf("dc_batch: obs: cannot read the cells table of schema %s: %s", zDb,
                                                  sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) return rc;
    p = find_tab(conn, zDb);
    if (!p) {
      *pzErr = sqlite3_mprintf("dc_batch: obs: schema %s has no deltacells cells table", zDb);
      return SQLITE_ERROR;
    }
  }
  sqlite3_vtab_cursor *cur = NULL;
  int rc = cells_open(&p->base, &cur);
  if (rc) {
    if (p->base.zErrMsg) { *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg); }
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = NULL;
    return rc;
  }
  cur->pVtab = &p->base;
  cells_cursor *c = (cells_cursor *)cur;
  if ((rc = cells_refresh(p, c)) != SQLITE_OK) {   /* the data may have changed since the last query */
    if (p->base.zErrMsg) *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg);
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = NULL;
  }
  for (int j = 0; j < m && rc == SQLITE_OK; j++) {
    int k = -1;
    for (int q = 0; q < p->n_ocol; q++) if (p->oc[q].col == cols[j]) { k = q; break; }
    if (k < 0 || p->oc[k].kind == DC_OBS_TEXT) {
      *pzErr = sqlite3_mprintf("dc_batch: obs: column %lld is %s", (long long)cols[j],
                               k < 0 ? "not a stored obs column" : "text (read it from the cells table)");
      rc = SQLITE_ERROR;
      break;
    }
    int kind = p->oc[k].kind;
    int64_t *oi = (int64_t *)out + (size_t)j * (size_t)n;
    double *of = (double *)out + (size_t)j * (size_t)n;
    int64_t b = -1, lo = 0, hi = 0, nulls = 0;
    const dc_obs_block *blk = NULL;
    cells_dblock *d = NULL;
    fmt[j] = kind == DC_OBS_REAL;
    for (int pass = 0; pass < 2 && rc == SQLITE_OK; pass++) {
      if (pass == 1) {   /* ints: as float64 with NaN when the batch holds a NULL */
        if (kind != DC_OBS_INT || nulls == 0) break;
        fmt[j] = 1;
      }
      for (int64_t i = 0; i < n; i++) {
        int64_t cell = ids[i];
        if (cell < 0 || cell >= p->n_cells) {
          *pzErr = sqlite3_mprintf("dc_batch: obs: no cell %lld", (long long)cell);
          rc = SQLITE_ERROR;
          break;
        }
        if (b < 0 || cell < lo || cell >= hi) {
          b = dc_last_le(p->blk_first, p->n_blocks, cell);
          lo = p->blk_first[b];
          hi = p->blk_first[b + 1];
          if ((rc = cells_col_block(c, k, b, &d)) != SQLITE_OK) {
            if (p->base.zErrMsg) *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg);
            sqlite3_free(p->base.zErrMsg);
            p->base.zErrMsg = NULL;
            break;
          }
          blk = &d->blk;
        }
        uint32_t r = (uint32_t)(cell - lo);
        switch (kind) {
          case DC_OBS_CATEGORY: oi[i] = blk->codes[r]; break;
          case DC_OBS_BOOL: oi[i] = blk->valid[r] ? blk->i64[r] : -1; break;
          case DC_OBS_REAL: of[i] = blk->f64[r]; break;
          default:
            if (fmt[j]) of[i] = blk->valid[r] ? (double)blk->i64[r] : NAN;
            else { oi[i] = blk->i64[r]; nulls += !blk->valid[r]; }
            break;
        }
      }
    }
  }
  cells_close(cur);
  return rc;
}
