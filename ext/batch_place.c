/*
** batch_place.c — reading a placing request of dc_batch (its place argument; see vtab_batch.c's
** header and batch_ticket.h): where each requested cell is, the raw bytes of its chunks, read
** on the querying thread through the reader, and each cell's nonzeros from the chunks'
** per-cell counts, counted on the pool with nothing decoded.  deltacells_ticket_place
** (batch_ticket.c) decodes them later.  Glue over the reader and the pure planner
** (batch_plan.c); also where dc_batch's cells are located (batch_locate).
*/
#include <string.h>
#include "batch_ticket.h"

int batch_locate(dc_reader *r, const int64_t *ids, int64_t n, batch_cellref *ref, char **pzErr) {
  for (int64_t i = 0; i < n; i++) {
    int64_t t = dc_reader_tile_of(r, ids[i]);
    const dc_tilehead *h;
    int rc;
    if (t < 0) return dc_err(pzErr, SQLITE_CORRUPT_VTAB, NULL, "dc_batch: cell %lld has no tile", (long long)ids[i]);
    if ((rc = dc_reader_head(r, (uint32_t)t, &h, pzErr)) != SQLITE_OK) return rc;
    uint32_t rel = (uint32_t)(ids[i] - r->tiles[t].first_cell);
    uint32_t ch = dc_reader_chunk_of(h, rel);
    ref[i] = (batch_cellref){(uint32_t)t, ch, rel - h->hdr.chunk[ch].first_cell};
  }
  return SQLITE_OK;
}

int batch_mark_empty(dc_reader *r, const batch_cellref *ref, int64_t n, const int32_t *genes, int64_t n_genes,
                     uint8_t *direct, char **pzErr) {
  int8_t *may = sqlite3_malloc64(r->n_tiles ? r->n_tiles : 1);   /* per tile: -1 not asked yet */
  if (!may) return SQLITE_NOMEM;
  memset(may, -1, r->n_tiles ? r->n_tiles : 1);
  int rc = SQLITE_OK;
  for (int64_t i = 0; i < n && rc == SQLITE_OK; i++) {
    uint32_t t = ref[i].tile;
    if (may[t] < 0) {
      int m = 1;
      rc = dc_reader_tile_may_hold(r, t, genes, n_genes, &m, pzErr);
      may[t] = (int8_t)m;
    }
    if (rc == SQLITE_OK && !may[t]) direct[i] = BATCH_ROW_EMPTY;
  }
  sqlite3_free(may);
  return rc;
}

int batch_place_read(dc_reader *r, dc_conn *conn, dc_pool *pool, const int64_t *ids, int64_t n, const int32_t *genes,
                     int64_t n_genes, batch_place **out, char **pzErr) {
  uint64_t nn = (uint64_t)(n ? n : 1);
  int rc = SQLITE_OK;
  batch_cellref *ref = NULL;
  uint32_t *rowkey = NULL, *cnt = NULL;
  uint64_t *cnt0 = NULL;
  uint8_t *nodirect = NULL;
  dc_job *jobs = NULL;
  *out = NULL;
  batch_place *p = sqlite3_malloc64(sizeof *p);
  if (!p) return SQLITE_NOMEM;
  memset(p, 0, sizeof *p);
  p->n_ref = 1;
  p->conn = conn;
  p->n = n;
  ref = sqlite3_malloc64(nn * sizeof *ref);
  p->keys = sqlite3_malloc64(nn * sizeof *p->keys);
  p->rows = sqlite3_malloc64(nn * sizeof *p->rows);
  p->row_cell = sqlite3_malloc64(nn * sizeof *p->row_cell);
  p->nnz = sqlite3_malloc64(nn * sizeof *p->nnz);
  rowkey = sqlite3_malloc64(nn * sizeof *rowkey);
  nodirect = sqlite3_malloc64(nn);
  if (!ref || !p->keys || !p->rows || !p->row_cell || !p->nnz || !rowkey || !nodirect) { rc = SQLITE_NOMEM; goto fail; }
  memset(nodirect, 0, nn);
  if ((rc = batch_locate(r, ids, n, ref, pzErr)) != SQLITE_OK) goto fail;
  /* a gene panel: no chunk read and nothing placed for the rows of tiles without its genes */
  if (genes && (rc = batch_mark_empty(r, ref, n, genes, n_genes, nodirect, pzErr)) != SQLITE_OK) goto fail;
  for (int64_t i = 0; i < n; i++) {
    if (!nodirect[i] && r->heads[ref[i].tile]->hdr.codec != DC_CODEC_RANS) goto not_placeable;
    p->row_cell[i] = ref[i].cell;
    rowkey[i] = BATCH_NO_KEY;
  }
  p->n_keys = batch_chunk_keys(ref, nodirect, n, p->keys, rowkey);
  {
    /* what this result holds until it is placed: the tiles' bytes (the output is the
    ** caller's), within batch_mb; refused before anything is read */
    double held = 0;
    uint32_t n_tiles = 0;
    for (size_t q = 0; q < p->n_keys; q++)
      if (q == 0 || p->keys[q].tile != p->keys[q - 1].tile) {
        held += (double)r->heads[p->keys[q].tile]->blob_len;
        n_tiles++;
      }
    if (held > (double)conn->batch_bytes) {
      rc = dc_err(pzErr, SQLITE_TOOBIG, NULL, "dc_batch: placing these %lld cells would hold %.1f MB of tile bytes (%u tiles), "
                  "over dc_config('batch_mb') = %lld: ask for fewer cells, or raise batch_mb", (long long)n,
                  held / 1048576.0, n_tiles, (long long)(conn->batch_bytes >> 20));
      goto fail;
    }
  }
  p->row0 = sqlite3_malloc64((p->n_keys + 1) * sizeof *p->row0);
  if (!p->row0) { rc = SQLITE_NOMEM; goto fail; }
  int64_t rep = batch_rows_by_key(ref, rowkey, n, p->n_keys, p->row0, p->rows);
  if (rep == -2) { rc = SQLITE_NOMEM; goto fail; }
  if (rep >= 0) goto not_placeable;
  if ((rc = dc_reader_read(r, p->keys, p->n_keys, &p->tb, &p->n_tb, pzErr)) != SQLITE_OK) goto fail;
  p->heads = sqlite3_malloc64((p->n_tb ? p->n_tb : 1) * sizeof *p->heads);
  p->key_tb = sqlite3_malloc64((p->n_keys ? p->n_keys : 1) * sizeof *p->key_tb);
  cnt0 = sqlite3_malloc64((p->n_keys + 1) * sizeof *cnt0);
  jobs = sqlite3_malloc64((p->n_keys ? p->n_keys : 1) * sizeof *jobs);
  if (!p->heads || !p->key_tb || !cnt0 || !jobs) { rc = SQLITE_NOMEM; goto fail; }
  memset(p->heads, 0, (p->n_tb ? p->n_tb : 1) * sizeof *p->heads);
  for (size_t k = 0; k < p->n_tb; k++) {
    /* the header only (the tile buffer holds the prefix bytes the decoder reads) */
    const dc_tilehead *h = r->heads[p->tb[k].tile];
    size_t sz = DC_TILEHEAD_SIZE(h->hdr.n_chunks);
    if (!(p->heads[k] = sqlite3_malloc64(sz))) { rc = SQLITE_NOMEM; goto fail; }
    memcpy(p->heads[k], h, sz);
    p->heads[k]->prefix = NULL;
    p->heads[k]->genes = NULL;
  }
  cnt0[0] = 0;
  for (size_t q = 0, k = 0; q < p->n_keys; q++) {
    while (p->tb[k].tile != p->keys[q].tile) k++;     /* both sorted by tile */
    p->key_tb[q] = (uint32_t)k;
    cnt0[q + 1] = cnt0[q] + p->heads[k]->hdr.chunk[p->keys[q].chunk].n_cells;
  }
  cnt = sqlite3_malloc64((cnt0[p->n_keys] ? cnt0[p->n_keys] : 1) * sizeof *cnt);
  if (!cnt) { rc = SQLITE_NOMEM; goto fail; }
  memset(jobs, 0, (p->n_keys ? p->n_keys : 1) * sizeof *jobs);
  for (size_t q = 0; q < p->n_keys; q++) {
    const dc_tilehead *h = p->heads[p->key_tb[q]];
    jobs[q].buf = p->tb[p->key_tb[q]].buf;
    jobs[q].len = (size_t)h->blob_len;
    jobs[q].hdr = &h->hdr;
    jobs[q].chunk = p->keys[q].chunk;
    jobs[q].rc = -1;
    jobs[q].cell_nnz = cnt + cnt0[q];
  }
  if (dc_pool_decode(pool, jobs, p->n_keys) != DC_OK) {
    for (size_t q = 0; q < p->n_keys; q++)
      if (jobs[q].rc != DC_OK) {
        rc = dc_err(pzErr, jobs[q].rc == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT_VTAB, NULL,
                    "dc_batch: tile %u chunk %u: %s", p->keys[q].tile, p->keys[q].chunk,
                    jobs[q].err.msg[0] ? jobs[q].err.msg : dc_strerror(jobs[q].rc));
        break;
      }
    goto fail;
  }
  for (int64_t i = 0; i < n; i++) {
    p->nnz[i] = rowkey[i] == BATCH_NO_KEY ? 0 : cnt[cnt0[rowkey[i]] + p->row_cell[i]];
    p->total += p->nnz[i];
  }
  *out = p;
  p = NULL;
  goto done;
not_placeable:
  rc = SQLITE_OK;
fail:
  batch_place_unref(p);
done:
  sqlite3_free(ref);
  sqlite3_free(rowkey);
  sqlite3_free(nodirect);
  sqlite3_free(cnt0);
  sqlite3_free(cnt);
  sqlite3_free(jobs);
  return rc;
}

int batch_place_panel(batch_place *p, const int32_t *map, int64_t size, int sorted, int64_t n_genes) {
  p->pmap = sqlite3_malloc64((uint64_t)(n_genes ? n_genes : 1) * sizeof *p->pmap);
  p->pin = sqlite3_malloc64((uint64_t)batch_member_mask(n_genes) + 1);
  if (!p->pmap || !p->pin) {
    sqlite3_free(p->pmap);
    sqlite3_free(p->pin);
    p->pmap = NULL;
    p->pin = NULL;
    return SQLITE_NOMEM;
  }
  memcpy(p->pmap, map, (size_t)n_genes * sizeof *map);
  p->pmask = batch_panel_member(map, n_genes, p->pin);
  p->psize = size;
  p->pgenes = n_genes;
  p->psorted = sorted;
  return SQLITE_OK;
}
