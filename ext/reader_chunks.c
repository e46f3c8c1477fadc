/*
** reader_chunks.c — a reader's chunks (see dc_reader.h): tile headers read and checked (and
** their seals), the bytes of the chunks asked for read through the reader's one blob handle,
** decoded on the pool, checked, and put in the connection's decoded-chunk cache.
**
** Reading a set of chunks (dc_reader_fetch):
**   1. cached chunks are taken from the connection's decoded-chunk cache;
**   2. for each tile with missing chunks, a buffer the size of the tile blob
**      is allocated (untouched pages cost nothing), and only the header +
**      shared section and the byte ranges of the missing chunks are read into
**      it with the one sqlite3_blob handle of the reader (reopened per tile),
**      adjacent chunks in one read;
**   3. all missing chunks of all tiles are decoded at once on the pool
**      (dc_pool_decode), each into its own dc_chunk_data, then checked and
**      put in the cache.
** Everything that touches SQLite happens on the calling thread, before the
** pool starts; the pool threads get byte buffers only.
*/
#include <stdlib.h>
#include <string.h>
#include "reader_int.h"
#include "dc_format.h"
#include "dc_seal.h"
#include "dc_search.h"
#include "tile_check.h"

#define HEAD_PROBE 4096

/* Moves the blob handle to tile's row. */
static int blob_at(dc_reader *r, uint32_t tile, char **pzErr) {
  int rc;
  if (r->blob && r->blob_row == (int64_t)tile) return SQLITE_OK;
  if (r->blob) {
    rc = sqlite3_blob_reopen(r->blob, tile);
    if (rc != SQLITE_OK) { sqlite3_blob_close(r->blob); r->blob = NULL; }
  } else {
    rc = sqlite3_blob_open(r->db, r->schema, DC_TILES_DATA, "data", tile, 0, &r->blob);
    if (rc != SQLITE_OK) { sqlite3_blob_close(r->blob); r->blob = NULL; }
  }
  if (rc != SQLITE_OK) {
    const char *d = rd_io_detail(rc);
    dc_err(pzErr, 0, NULL, "%s: cannot read tile %u: %s%s%s", r->what, tile, sqlite3_errmsg(r->db), *d ? ": " : "", d);
    return rc == SQLITE_ERROR ? SQLITE_CORRUPT_VTAB : rc;
  }
  r->blob_row = tile;
  return SQLITE_OK;
}

static int blob_read(dc_reader *r, uint32_t tile, void *buf, uint64_t n, uint64_t off, char **pzErr) {
  int rc = sqlite3_blob_read(r->blob, buf, (int)n, (int)off);
  if (rc != SQLITE_OK) {
    const char *d = rd_io_detail(rc);
    dc_err(pzErr, 0, NULL, "%s: reading tile %u (%llu bytes at %llu): %s%s%s", r->what, tile, (unsigned long long)n,
            (unsigned long long)off, sqlite3_errmsg(r->db), *d ? ": " : "", d);
    return rc;
  }
  return SQLITE_OK;
}

uint32_t dc_reader_chunk_of(const dc_tilehead *h, uint32_t cell) {
  int64_t k;
  DC_LAST_LE(k, h->hdr.n_chunks, i, h->hdr.chunk[i].first_cell, cell);
  return (uint32_t)k;
}

/* tiles_data.checksum of one tile: loaded with the index (from its covering index), else read
** now, with the tile's head */
static int tile_checksum(dc_reader *r, uint32_t tile, int64_t *out, char **pzErr) {
  const dc_tileinfo *ti = &r->tiles[tile];
  if (ti->seal_state == 1) { *out = ti->seal; return SQLITE_OK; }
  if (ti->seal_state == 2) {
    dc_err(pzErr, 0, NULL, "%s: " DC_TILES_DATA " row of tile %u has no checksum (an integer)", r->what, tile);
    return SQLITE_CORRUPT_VTAB;
  }
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT checksum FROM \"%w\"." DC_TILES_DATA " WHERE tile = ?1", r->schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, tile);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
      *out = sqlite3_column_int64(st, 0);
      sqlite3_finalize(st);
      return SQLITE_OK;
    }
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
      sqlite3_finalize(st);
      dc_err(pzErr, 0, NULL, "%s: " DC_TILES_DATA " row of tile %u has no checksum (an integer)", r->what, tile);
      return SQLITE_CORRUPT_VTAB;
    }
  }
  const char *d = rd_io_detail(rc);
  dc_err(pzErr, 0, NULL, "%s: reading the checksum of tile %u: %s%s%s", r->what, tile, sqlite3_errmsg(r->db), *d ? ": " : "", d);
  sqlite3_finalize(st);
  return rc;
}

int dc_reader_head(dc_reader *r, uint32_t tile, const dc_tilehead **out, char **pzErr) {
  if (tile >= r->n_tiles) { dc_err(pzErr, 0, NULL, "%s: no tile %u", r->what, tile); return SQLITE_ERROR; }
  if (r->heads[tile]) { *out = r->heads[tile]; return SQLITE_OK; }
  int rc = blob_at(r, tile, pzErr);
  if (rc != SQLITE_OK) return rc;
  uint64_t len = (uint64_t)sqlite3_blob_bytes(r->blob);
  dc_tilehead *h = sqlite3_malloc64(sizeof *h);
  uint8_t *buf = NULL;
  int announced = 0;
  if (!h) return SQLITE_NOMEM;
  memset(h, 0, sizeof *h);
  dc_error err;
  memset(&err, 0, sizeof err);
  uint64_t have = len < HEAD_PROBE ? len : HEAD_PROBE;
  buf = sqlite3_malloc64(have ? have : 1);
  if (!buf) { rc = SQLITE_NOMEM; goto fail; }
  /* a sealed tile's checksum read from the table (not loaded from the index) follows its blob:
  ** reading it walks every page of the tile, so over dchttp the whole blob is announced (its
  ** blocks requested at once, not one by one) */
  announced = r->sealed && r->tiles[tile].seal_state == 0 && dc_vfs_expect(r->db, r->schema, (int64_t)len) > 0;
  if ((rc = blob_read(r, tile, buf, have, 0, pzErr)) != SQLITE_OK) goto fail;
  for (;;) {
    size_t need = dc_tile_header_need(buf, (size_t)have);
    if (need == 0) break;
    if (need <= have || need > len || need > DC_MAX_PREFIX) {
      dc_err(pzErr, 0, NULL, "%s: tile %u: corrupt header (needs %llu bytes, blob has %llu)", r->what, tile, (unsigned long long)need,
              (unsigned long long)len);
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
    uint8_t *nb = sqlite3_realloc64(buf, need);
    if (!nb) { rc = SQLITE_NOMEM; goto fail; }
    buf = nb;
    if ((rc = blob_read(r, tile, buf + have, need - have, have, pzErr)) != SQLITE_OK) goto fail;
    have = need;
  }
  if (dc_tile_parse(buf, (size_t)len, &h->hdr, &err) != DC_OK) {
    dc_err(pzErr, 0, NULL, "%s: tile %u: corrupt %s", r->what, tile, err.msg[0] ? err.msg : "tile header");
    rc = err.code == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  const dc_tileinfo *ti = &r->tiles[tile];
  if (!dc_tilehead_agrees(&h->hdr, ti->n_cells, ti->nnz, ti->chunks, r->n_genes)) {
    dc_err(pzErr, 0, NULL, "%s: tile %u: header (%u cells, %llu nonzeros, %u chunks, %u genes) disagrees with "
            DC_TILES_DATA " (%u cells, %llu nonzeros, %u chunks, %lld genes)", r->what, tile, h->hdr.n_cells,
            (unsigned long long)h->hdr.nnz, h->hdr.n_chunks, h->hdr.n_genes, ti->n_cells,
            (unsigned long long)ti->nnz, ti->chunks, (long long)r->n_genes);
    rc = SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  if (r->sealed) {
    int64_t seal = 0, want = 0;
    rc = tile_checksum(r, tile, &want, pzErr);
    if (announced) dc_vfs_expect(r->db, r->schema, 0);
    announced = 0;
    if (rc != SQLITE_OK) goto fail;
    if (dc_seal_tile(r->dataset_id, tile, ti->first_cell, ti->n_cells, (int64_t)ti->nnz, ti->chunks, len, buf,
                     (size_t)h->hdr.hdr_len, &seal)) { rc = SQLITE_NOMEM; goto fail; }
    if (seal != want) {
      dc_err(pzErr, 0, NULL, "%s: tile %u: checksum mismatch: its blob and " DC_TILES_DATA " row (cells %lld..%lld, %llu nonzeros) "
              "were not written together for tile %u of this dataset (moved, swapped, copied or edited)", r->what, tile,
              (long long)ti->first_cell, (long long)(ti->first_cell + ti->n_cells - 1), (unsigned long long)ti->nnz, tile);
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
  }
  /* chunks must tile the cells in order (the gather relies on it) */
  uint64_t prefix = 0;
  int64_t bad = dc_tilehead_chunks(&h->hdr, len, &prefix);
  if (bad >= 0) {
    dc_err(pzErr, 0, NULL, "%s: tile %u chunk %u: corrupt chunk table", r->what, tile, (uint32_t)bad);
    rc = SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  if (bad == -2) {
    dc_err(pzErr, 0, NULL, "%s: tile %u: corrupt chunk table (cells or nonzeros do not add up)", r->what, tile);
    rc = SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  h->blob_len = len;
  h->prefix_len = prefix;
  if (prefix > have) {
    uint8_t *nb = sqlite3_realloc64(buf, prefix);
    if (!nb) { rc = SQLITE_NOMEM; goto fail; }
    buf = nb;
    if ((rc = blob_read(r, tile, buf + have, prefix - have, have, pzErr)) != SQLITE_OK) goto fail;
  }
  h->prefix = buf;
  {                        /* keep the chunk table's used part only (dc_reader.h) */
    dc_tilehead *small = sqlite3_realloc64(h, DC_TILEHEAD_SIZE(h->hdr.n_chunks));
    if (small) h = small;
  }
  r->heads[tile] = h;
  *out = h;
  return SQLITE_OK;
fail:
  if (announced) dc_vfs_expect(r->db, r->schema, 0);
  sqlite3_free(buf);
  sqlite3_free(h);
  return rc;
}

/* The genes tile `tile` holds: *set = a bitmap of its n_genes bits, or NULL when any may occur. */
static int tile_genes(dc_reader *r, uint32_t tile, const uint8_t **set, uint32_t *n_bits, char **pzErr) {
  const dc_tilehead *ch;
  *set = NULL;
  int rc = dc_reader_head(r, tile, &ch, pzErr);
  if (rc != SQLITE_OK) return rc;
  dc_tilehead *h = r->heads[tile];
  *n_bits = h->hdr.n_genes;
  if (!h->genes_read) {
    dc_error err;
    memset(&err, 0, sizeof err);
    int drc = dc_tile_gene_set(h->prefix, (size_t)h->prefix_len, &h->hdr, &h->genes, &err);
    if (drc != DC_OK)
      return dc_err(pzErr, drc == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT_VTAB, NULL, "%s: tile %u: %s", r->what, tile,
                    err.msg);
    h->genes_read = 1;
  }
  *set = h->genes;
  return SQLITE_OK;
}

int dc_reader_tile_may_hold(dc_reader *r, uint32_t tile, const int32_t *genes, int64_t n, int *may, char **pzErr) {
  const uint8_t *set;
  uint32_t nb;
  *may = 1;
  int rc = tile_genes(r, tile, &set, &nb, pzErr);
  if (rc != SQLITE_OK) return rc;
  *may = 0;
  for (int64_t i = 0; i < n && !*may; i++) {
    uint32_t g = (uint32_t)genes[i];
    *may = genes[i] >= 0 && g < nb && (!set || (set[g / 8] >> (g % 8) & 1));
  }
  return SQLITE_OK;
}

/* A tile-sized buffer holding the prefix and the payloads of the given
** chunks (sorted, distinct) of one tile; the rest is never touched. */
static int read_chunks(dc_reader *r, uint32_t tile, const dc_tilehead *h, const uint32_t *chunks, size_t n,
                       uint8_t **out, char **pzErr) {
  int rc = blob_at(r, tile, pzErr);
  if (rc != SQLITE_OK) return rc;
  if ((uint64_t)sqlite3_blob_bytes(r->blob) != h->blob_len) {
    dc_err(pzErr, 0, NULL, "%s: tile %u changed size while being read", r->what, tile);
    return SQLITE_CORRUPT_VTAB;
  }
  uint8_t *buf = rcbuf_new(r->conn->bufpool, h->blob_len);   /* recycled: no page faults */
  if (!buf) return SQLITE_NOMEM;
  memcpy(buf, h->prefix, h->prefix_len);
  /* a blob read at an offset walks the pages before it: every page up to the last chunk's end is
  ** read, so over dchttp that much is announced (requested at once, not block by block) */
  uint64_t last = 0;
  for (size_t k = 0; k < n; k++) {
    uint64_t e = h->hdr.chunk[chunks[k]].offset + h->hdr.chunk[chunks[k]].length;
    if (e > last) last = e;
  }
  int announced = last > h->prefix_len && dc_vfs_expect(r->db, r->schema, (int64_t)(last - h->prefix_len)) > 0;
  size_t i = 0;
  while (i < n) {
    uint64_t off = h->hdr.chunk[chunks[i]].offset;
    uint64_t end = off + h->hdr.chunk[chunks[i]].length;
    size_t j = i + 1;
    while (j < n && h->hdr.chunk[chunks[j]].offset == end) { end += h->hdr.chunk[chunks[j]].length; j++; }
    if (end > off && (rc = blob_read(r, tile, buf + off, end - off, off, pzErr)) != SQLITE_OK) break;
    i = j;
  }
  if (announced) dc_vfs_expect(r->db, r->schema, 0);
  if (rc != SQLITE_OK) { rcbuf_unref(buf); return rc; }
  *out = buf;
  return SQLITE_OK;
}

static int decode_error(dc_reader *r, const dc_job *j, const dc_chunkkey *k, char **pzErr) {
  dc_err(pzErr, 0, NULL, "%s: tile %u chunk %u: %s", r->what, k->tile, k->chunk,
          j->err.msg[0] ? j->err.msg : dc_strerror(j->rc));
  return j->rc == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT_VTAB;
}

static int cmp_key(const void *a, const void *b) {
  const dc_chunkkey *x = a, *y = b;
  if (x->tile != y->tile) return x->tile < y->tile ? -1 : 1;
  return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* Reads the tiles of keys (sorted by tile, chunk) into per-tile buffers. */
typedef dc_tilebytes tilebuf;

static int read_tiles(dc_reader *r, const dc_chunkkey *keys, size_t n, tilebuf **out_tb, size_t *out_ntb,
                      char **pzErr) {
  size_t ntb = 0, cap = 0;
  tilebuf *tb = NULL;
  uint32_t *chunks = NULL;
  int rc = SQLITE_OK;
  size_t i = 0;
  chunks = sqlite3_malloc64((n ? n : 1) * sizeof *chunks);
  if (!chunks) return SQLITE_NOMEM;
  while (i < n) {
    size_t j = i;
    while (j < n && keys[j].tile == keys[i].tile) { chunks[j - i] = keys[j].chunk; j++; }
    const dc_tilehead *h;
    if ((rc = dc_reader_head(r, keys[i].tile, &h, pzErr)) != SQLITE_OK) break;
    if (ntb == cap) {
      cap = cap ? 2 * cap : 16;
      tilebuf *nt = sqlite3_realloc64(tb, cap * sizeof *tb);
      if (!nt) { rc = SQLITE_NOMEM; break; }
      tb = nt;
    }
    tb[ntb].tile = keys[i].tile;
    if ((rc = read_chunks(r, keys[i].tile, h, chunks, j - i, &tb[ntb].buf, pzErr)) != SQLITE_OK) break;
    ntb++;
    i = j;
  }
  sqlite3_free(chunks);
  if (rc != SQLITE_OK) {
    for (size_t k = 0; k < ntb; k++) rcbuf_unref(tb[k].buf);
    sqlite3_free(tb);
    return rc;
  }
  *out_tb = tb;
  *out_ntb = ntb;
  return SQLITE_OK;
}

static void free_tiles(tilebuf *tb, size_t ntb) {
  for (size_t k = 0; k < ntb; k++) rcbuf_unref(tb[k].buf);
  sqlite3_free(tb);
}

static const uint8_t *tile_buf(const tilebuf *tb, size_t ntb, uint32_t tile) {
  size_t lo = 0, hi = ntb;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (tb[mid].tile < tile) lo = mid + 1; else hi = mid;
  }
  return lo < ntb && tb[lo].tile == tile ? tb[lo].buf : NULL;
}

/* Pointer p moved by -k elements without forming it through array
** arithmetic: the decoder adds k back before writing. */
#define SHIFT_BACK(T, p, k) ((T *)((uintptr_t)(p) - (uintptr_t)(k) * sizeof(T)))

typedef struct missrec { dc_chunkkey key; size_t slot; } missrec;
static int cmp_miss(const void *a, const void *b) { return cmp_key(a, b); }

/* Whether miss k (key i of the caller) is decoded in part: want says few of its cells, and
** the cache (if it keeps anything) has not seen it asked for in part lately. */
static int in_part(dc_reader *r, struct dc_cache *cache, const dc_want *w, const dc_chunkkey *key,
                   const dc_chunk_info *ci) {
  if (!w || (uint64_t)w->n * 4 > ci->n_cells || r->heads[key->tile]->hdr.codec != DC_CODEC_RANS) return 0;
  return !(cache && dc_cache_recall(cache, r->ns, key->tile, key->chunk));
}

int dc_reader_fetch(dc_reader *r, const dc_chunkkey *keys, size_t n, dc_chunk_data **out, int lookup,
                    const dc_want *want, char **pzErr) {
  int rc = SQLITE_OK;
  struct dc_cache *cache = dc_conn_cache(r->conn);
  missrec *mr = NULL;
  dc_chunkkey *miss = NULL;
  dc_chunk_data **dec = NULL;
  size_t n_miss = 0, ntb = 0, n_part = 0;
  dc_job *jobs = NULL;
  tilebuf *tb = NULL;
  uint8_t *part = NULL;           /* per miss: decoded in part */
  uint32_t **cnt = NULL;          /* per miss in part: its cells' nonzeros */
  dc_place *pl = NULL;
  void **ptrs = NULL;             /* per miss in part: n_cells row addresses, as many value addresses, a keep byte per cell */
  dc_pool *pool = NULL;
  for (size_t i = 0; i < n; i++) out[i] = NULL;
  if (n == 0) return SQLITE_OK;
  mr = sqlite3_malloc64(n * sizeof *mr);
  miss = sqlite3_malloc64(n * sizeof *miss);
  if (!mr || !miss) { rc = SQLITE_NOMEM; goto done; }
  for (size_t i = 0; i < n; i++) {
    if (keys[i].tile >= r->n_tiles) {
      dc_err(pzErr, 0, NULL, "%s: no tile %u", r->what, keys[i].tile);
      rc = SQLITE_ERROR;
      goto done;
    }
    if (cache && lookup) out[i] = dc_cache_get(cache, r->ns, keys[i].tile, keys[i].chunk);
    if (!out[i]) { mr[n_miss].key = keys[i]; mr[n_miss].slot = i; n_miss++; }
  }
  if (n_miss == 0) goto done;
  qsort(mr, n_miss, sizeof *mr, cmp_miss);       /* key is the first member */
  for (size_t k = 0; k < n_miss; k++) miss[k] = mr[k].key;
  if ((rc = read_tiles(r, miss, n_miss, &tb, &ntb, pzErr)) != SQLITE_OK) goto done;
  jobs = sqlite3_malloc64(n_miss * sizeof *jobs);
  dec = sqlite3_malloc64(n_miss * sizeof *dec);
  part = sqlite3_malloc64(n_miss);
  if (!jobs || !dec || !part) { rc = SQLITE_NOMEM; goto done; }
  memset(jobs, 0, n_miss * sizeof *jobs);
  memset(dec, 0, n_miss * sizeof *dec);
  memset(part, 0, n_miss);
  for (size_t k = 0; k < n_miss; k++) {
    const dc_tilehead *h = r->heads[miss[k].tile];
    if (miss[k].chunk >= h->hdr.n_chunks) {
      dc_err(pzErr, 0, NULL, "%s: tile %u has no chunk %u", r->what, miss[k].tile, miss[k].chunk);
      rc = SQLITE_ERROR;
      goto done;
    }
    if (want) {
      part[k] = (uint8_t)in_part(r, cache, &want[mr[k].slot], &miss[k], &h->hdr.chunk[miss[k].chunk]);
      n_part += part[k];
    }
    jobs[k].buf = tile_buf(tb, ntb, miss[k].tile);
    jobs[k].len = (size_t)h->blob_len;
    jobs[k].hdr = &h->hdr;
    jobs[k].chunk = miss[k].chunk;
  }
  if (!(pool = dc_conn_pool(r->conn))) { rc = SQLITE_NOMEM; goto done; }
  if (n_part) {
    /* the chunks decoded in part: first each cell's nonzeros (nothing decoded), so that the
    ** wanted rows get their room */
    dc_job *cj = sqlite3_malloc64(n_part * sizeof *cj);
    size_t *ck = sqlite3_malloc64(n_part * sizeof *ck);
    cnt = sqlite3_malloc64(n_miss * sizeof *cnt);
    pl = sqlite3_malloc64(n_miss * sizeof *pl);
    ptrs = sqlite3_malloc64(n_miss * sizeof *ptrs);
    if (!cj || !ck || !cnt || !pl || !ptrs) { sqlite3_free(cj); sqlite3_free(ck); rc = SQLITE_NOMEM; goto done; }
    memset(cnt, 0, n_miss * sizeof *cnt);
    memset(ptrs, 0, n_miss * sizeof *ptrs);
    size_t q = 0;
    for (size_t k = 0; k < n_miss && rc == SQLITE_OK; k++) {
      if (!part[k]) continue;
      const dc_chunk_info *ci = &r->heads[miss[k].tile]->hdr.chunk[miss[k].chunk];
      cnt[k] = sqlite3_malloc64(((uint64_t)ci->n_cells + 1) * sizeof **cnt);
      /* the rows' places, then one keep byte per cell */
      ptrs[k] = sqlite3_malloc64(((uint64_t)ci->n_cells + 1) * (2 * sizeof(void *) + 1));
      if (!cnt[k] || !ptrs[k]) { rc = SQLITE_NOMEM; break; }
      cj[q] = jobs[k];
      cj[q].cell_nnz = cnt[k];
      ck[q++] = k;
    }
    if (rc == SQLITE_OK && dc_pool_decode(pool, cj, q) != DC_OK) {
      rc = SQLITE_ERROR;
      for (size_t j = 0; j < q; j++)
        if (cj[j].rc != DC_OK) { rc = decode_error(r, &cj[j], &miss[ck[j]], pzErr); break; }
    }
    sqlite3_free(cj);
    sqlite3_free(ck);
    if (rc != SQLITE_OK) goto done;
  }
  if (cache) {   /* evicted chunks' buffers are then reused for these (no fresh pages) */
    int64_t incoming = 0;
    for (size_t k = 0; k < n_miss; k++) {
      const dc_chunk_info *ci = &r->heads[miss[k].tile]->hdr.chunk[miss[k].chunk];
      if (!part[k]) incoming += (int64_t)dc_chunk_size(ci->n_cells, ci->nnz);
    }
    if (incoming) dc_cache_make_room(cache, incoming);
  }
  for (size_t k = 0; k < n_miss; k++) {
    const dc_chunk_info *ci = &r->heads[miss[k].tile]->hdr.chunk[miss[k].chunk];
    if (part[k]) {
      /* the wanted cells' rows, in cell order; every other row empty */
      const dc_want *w = &want[mr[k].slot];
      void **base = ptrs[k];
      int32_t **ix = (int32_t **)base;
      void **val = base + ci->n_cells;
      uint8_t *keep = (uint8_t *)(base + 2 * (size_t)ci->n_cells);
      memset(keep, 0, ci->n_cells);
      for (uint32_t j = 0; j < w->n; j++)
        if (w->cells[j] < ci->n_cells) keep[w->cells[j]] = 1;
      int64_t total = dc_part_nnz(cnt[k], keep, ci->n_cells, ci->nnz);
      if (total < 0) {
        dc_err(pzErr, 0, NULL, "%s: tile %u chunk %u: its cells' counts exceed its nonzeros", r->what, miss[k].tile,
               miss[k].chunk);
        rc = SQLITE_CORRUPT_VTAB;
        goto done;
      }
      if (!(dec[k] = dc_chunk_new(r->conn->bufpool, ci->n_cells, (uint64_t)total))) { rc = SQLITE_NOMEM; goto done; }
      dc_part_rows(cnt[k], keep, ci->n_cells, dec[k]->indices, dec[k]->values, dec[k]->indptr, ix, val);
      pl[k] = (dc_place){ (int32_t *const *)ix, (void *const *)val, 0, NULL, NULL, NULL };
      jobs[k].place = &pl[k];
      continue;
    }
    dec[k] = dc_chunk_new(r->conn->bufpool, ci->n_cells, ci->nnz);
    if (!dec[k]) { rc = SQLITE_NOMEM; goto done; }
    dec[k]->indptr[0] = (int64_t)ci->nnz_before;
    jobs[k].out.indptr = SHIFT_BACK(int64_t, dec[k]->indptr, ci->first_cell);
    jobs[k].out.indices = SHIFT_BACK(int32_t, dec[k]->indices, ci->nnz_before);
    jobs[k].out.values = SHIFT_BACK(int32_t, dec[k]->values, ci->nnz_before);
    jobs[k].out.values_f32 = 0;
  }
  if (dc_pool_decode(pool, jobs, n_miss) != DC_OK) {
    rc = SQLITE_ERROR;
    for (size_t k = 0; k < n_miss; k++)
      if (jobs[k].rc != DC_OK) { rc = decode_error(r, &jobs[k], &miss[k], pzErr); break; }
    goto done;
  }
  /* rebase indptr to the chunk and check it (a chunk in part: its rows were laid out above,
  ** from counts the decoder checked) */
  for (size_t k = 0; k < n_miss; k++) {
    dc_chunk_data *d = dec[k];
    if (!part[k] && !dc_indptr_rebase(d->indptr, d->n_cells, d->nnz)) {
      dc_err(pzErr, 0, NULL, "%s: tile %u chunk %u: decoded row offsets are inconsistent", r->what, miss[k].tile,
              miss[k].chunk);
      rc = SQLITE_CORRUPT_VTAB;
      goto done;
    }
  }
  for (size_t k = 0; k < n_miss; k++) {
    if (cache && !part[k]) dc_cache_put(cache, r->ns, miss[k].tile, miss[k].chunk, dec[k]);
    out[mr[k].slot] = dec[k];
    dec[k] = NULL;
  }
done:
  if (dec) for (size_t k = 0; k < n_miss; k++) dc_chunk_release(dec[k]);
  if (cnt) for (size_t k = 0; k < n_miss; k++) sqlite3_free(cnt[k]);
  if (ptrs) for (size_t k = 0; k < n_miss; k++) sqlite3_free(ptrs[k]);
  sqlite3_free(cnt);
  sqlite3_free(ptrs);
  sqlite3_free(pl);
  sqlite3_free(part);
  sqlite3_free(dec);
  free_tiles(tb, ntb);
  sqlite3_free(jobs);
  sqlite3_free(miss);
  sqlite3_free(mr);
  if (rc != SQLITE_OK) {
    for (size_t i = 0; i < n; i++) { dc_chunk_release(out[i]); out[i] = NULL; }
  }
  return rc;
}

int dc_reader_decode_into(dc_reader *r, const dc_direct *dj, size_t n, char **pzErr) {
  int rc = SQLITE_OK;
  dc_chunkkey *keys = NULL;
  dc_job *jobs = NULL;
  int64_t **scratch = NULL;
  tilebuf *tb = NULL;
  size_t ntb = 0;
  if (n == 0) return SQLITE_OK;
  keys = sqlite3_malloc64(n * sizeof *keys);
  jobs = sqlite3_malloc64(n * sizeof *jobs);
  scratch = sqlite3_malloc64(n * sizeof *scratch);
  if (!keys || !jobs || !scratch) { rc = SQLITE_NOMEM; goto done; }
  memset(jobs, 0, n * sizeof *jobs);
  memset(scratch, 0, n * sizeof *scratch);
  for (size_t i = 0; i < n; i++) { keys[i].tile = dj[i].tile; keys[i].chunk = dj[i].chunk; }
  qsort(keys, n, sizeof *keys, cmp_key);
  {
    /* distinct keys for the reads */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) if (m == 0 || cmp_key(&keys[m - 1], &keys[i])) keys[m++] = keys[i];
    if ((rc = read_tiles(r, keys, m, &tb, &ntb, pzErr)) != SQLITE_OK) goto done;
  }
  for (size_t k = 0; k < n; k++) {
    const dc_tilehead *h = r->heads[dj[k].tile];
    const dc_chunk_info *ci = &h->hdr.chunk[dj[k].chunk];
    scratch[k] = sqlite3_malloc64(((uint64_t)ci->n_cells + 1) * sizeof(int64_t));
    if (!scratch[k]) { rc = SQLITE_NOMEM; goto done; }
    scratch[k][0] = (int64_t)ci->nnz_before;
    jobs[k].buf = tile_buf(tb, ntb, dj[k].tile);
    jobs[k].len = (size_t)h->blob_len;
    jobs[k].hdr = &h->hdr;
    jobs[k].chunk = dj[k].chunk;
    jobs[k].out.indptr = SHIFT_BACK(int64_t, scratch[k], ci->first_cell);
    jobs[k].out.indices = SHIFT_BACK(int32_t, dj[k].indices_out + dj[k].out_base, ci->nnz_before);
    jobs[k].out.values = SHIFT_BACK(int32_t, dj[k].values_out + dj[k].out_base, ci->nnz_before);
  }
  {
    dc_pool *pool = dc_conn_pool(r->conn);
    if (!pool) { rc = SQLITE_NOMEM; goto done; }
    if (dc_pool_decode(pool, jobs, n) != DC_OK) {
      rc = SQLITE_ERROR;
      for (size_t k = 0; k < n; k++) {
        if (jobs[k].rc != DC_OK) {
          dc_chunkkey key = { dj[k].tile, dj[k].chunk };
          rc = decode_error(r, &jobs[k], &key, pzErr);
          break;
        }
      }
      goto done;
    }
  }
  for (size_t k = 0; k < n; k++) {
    const dc_chunk_info *ci = &r->heads[dj[k].tile]->hdr.chunk[dj[k].chunk];
    int64_t base = scratch[k][0], prev = 0;
    for (uint32_t c = 1; c <= ci->n_cells; c++) {
      int64_t v = scratch[k][c] - base;
      if (v < prev || (uint64_t)v > ci->nnz) {
        dc_err(pzErr, 0, NULL, "%s: tile %u chunk %u: decoded row offsets are inconsistent", r->what, dj[k].tile,
                dj[k].chunk);
        rc = SQLITE_CORRUPT_VTAB;
        goto done;
      }
      dj[k].indptr_out[dj[k].row0 + c] = dj[k].out_base + v;
      prev = v;
    }
    if ((uint64_t)prev != ci->nnz) {
      dc_err(pzErr, 0, NULL, "%s: tile %u chunk %u: decoded row offsets are inconsistent", r->what, dj[k].tile,
              dj[k].chunk);
      rc = SQLITE_CORRUPT_VTAB;
      goto done;
    }
  }
done:
  if (scratch) for (size_t k = 0; k < n; k++) sqlite3_free(scratch[k]);
  sqlite3_free(scratch);
  free_tiles(tb, ntb);
  sqlite3_free(jobs);
  sqlite3_free(keys);
  return rc;
}

int dc_reader_read(dc_reader *r, const dc_chunkkey *keys, size_t n, dc_tilebytes **out, size_t *n_out,
                   char **pzErr) {
  *out = NULL;
  *n_out = 0;
  if (n == 0) return SQLITE_OK;
  return read_tiles(r, keys, n, out, n_out, pzErr);
}

void dc_reader_read_free(dc_tilebytes *tb, size_t n) { free_tiles(tb, n); }
