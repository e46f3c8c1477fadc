/*
** reader.c — reading tiles of one dataset schema and decoding chunks (see
** dc_reader.h).
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
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "dc_reader.h"
#include "dc_format.h"
#include "dc_seal.h"
#include "dc_search.h"

#define HEAD_PROBE 4096
#define MAX_PREFIX ((uint64_t)1 << 30)

static void set_err(char **pzErr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (pzErr) { sqlite3_free(*pzErr); *pzErr = m; } else sqlite3_free(m);
}

/* the remote VFS's reason for an I/O error (ext/vfs_http.c), or "" */
static const char *io_detail(int rc) {
  const char *d = (rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_CANTOPEN ? dc_vfs_last_error() : "";
  return d && *d ? d : "";
}

/* ------------------------------------------------------ the shared index
** One tile index per connection, schema and data version (a dc_index), shared by every
** reader of that schema (dc_batch, expression, expression_long, dc_aggregate*, tiles): the
** first reader that begins a statement after the data changed loads it, the others join it.
** A dc_slot per (schema, file) holds the current index; it lives while readers of that
** schema exist (DETACH frees the schema's tables and so its readers and its slot).  Readers
** hold a reference to the index they began with, so a reload never frees an index a reader
** still uses.  All of it runs on the querying thread, under the connection's mutex. */
struct dc_index {
  int n_ref;
  unsigned int data_version;
  uint64_t ns;
  int64_t n_cells, n_genes;
  uint32_t n_tiles;
  int sealed;
  uint64_t dataset_id;
  dc_tileinfo *tiles;
  dc_tilehead **heads;
  int gm_loaded;
  uint32_t gm_mask;
  int64_t *gm_slot;
  char **gm_name;
};

struct dc_slot {
  struct dc_slot *next;
  char *schema, *file;
  int n_readers;
  dc_index *ix;            /* the current index (one reference), or NULL */
};

static void free_arrays(dc_tileinfo *tiles, dc_tilehead **heads, uint32_t n_tiles, int64_t *gm_slot,
                        char **gm_name, int64_t n_genes) {
  if (heads) {
    for (uint32_t i = 0; i < n_tiles; i++) {
      if (heads[i]) { free(heads[i]->prefix); free(heads[i]); }
    }
  }
  sqlite3_free(heads);
  sqlite3_free(tiles);
  if (gm_name) {
    for (int64_t i = 0; i < n_genes; i++) sqlite3_free(gm_name[i]);
  }
  sqlite3_free(gm_name);
  sqlite3_free(gm_slot);
}

static void index_unref(dc_index *ix) {
  if (!ix || --ix->n_ref > 0) return;
  free_arrays(ix->tiles, ix->heads, ix->n_tiles, ix->gm_slot, ix->gm_name, ix->n_genes);
  sqlite3_free(ix);
}

/* the reader's view of ix (its fields are the reader's, for the modules that read them) */
static void view(dc_reader *r, dc_index *ix) {
  r->ix = ix;
  ix->n_ref++;
  r->ns = ix->ns;
  r->n_cells = ix->n_cells;
  r->n_genes = ix->n_genes;
  r->n_tiles = ix->n_tiles;
  r->sealed = ix->sealed;
  r->dataset_id = ix->dataset_id;
  r->tiles = ix->tiles;
  r->heads = ix->heads;
  r->gm_loaded = ix->gm_loaded;
  r->gm_mask = ix->gm_mask;
  r->gm_slot = ix->gm_slot;
  r->gm_name = ix->gm_name;
  r->data_version = ix->data_version;
  r->loaded = 1;
}

/* Drops the reader's index: its reference to a shared one, or the arrays of a load that
** failed half way (not shared yet). */
static void free_index(dc_reader *r) {
  if (r->ix) index_unref(r->ix);
  else free_arrays(r->tiles, r->heads, r->n_tiles, r->gm_slot, r->gm_name, r->n_genes);
  r->ix = NULL;
  r->heads = NULL; r->tiles = NULL; r->n_tiles = 0;
  r->gm_name = NULL; r->gm_slot = NULL; r->gm_loaded = 0;
  r->loaded = 0;
}

/* Makes the arrays the reader just loaded a shared index (the slot's current one when the
** data version is known). */
static int share_index(dc_reader *r, int have_version, unsigned int dv) {
  dc_index *ix = sqlite3_malloc64(sizeof *ix);
  if (!ix) return SQLITE_NOMEM;
  memset(ix, 0, sizeof *ix);
  ix->data_version = have_version ? dv : 0;
  ix->ns = r->ns;
  ix->n_cells = r->n_cells;
  ix->n_genes = r->n_genes;
  ix->n_tiles = r->n_tiles;
  ix->sealed = r->sealed;
  ix->dataset_id = r->dataset_id;
  ix->tiles = r->tiles;
  ix->heads = r->heads;
  view(r, ix);             /* the reader's reference */
  if (have_version && r->slot) {
    index_unref(r->slot->ix);
    r->slot->ix = ix;
    ix->n_ref++;           /* the slot's */
  }
  return SQLITE_OK;
}

static struct dc_slot **slot_list(dc_conn *conn) { return (struct dc_slot **)&conn->index_slots; }

static int slot_join(dc_reader *r) {
  const char *file = sqlite3_db_filename(r->db, r->schema);
  if (!file) file = "";
  struct dc_slot **pp = slot_list(r->conn);
  for (struct dc_slot *sl = *pp; sl; sl = sl->next) {
    if (!strcmp(sl->schema, r->schema) && !strcmp(sl->file, file)) {
      sl->n_readers++;
      r->slot = sl;
      return SQLITE_OK;
    }
  }
  struct dc_slot *sl = sqlite3_malloc64(sizeof *sl);
  if (!sl) return SQLITE_NOMEM;
  memset(sl, 0, sizeof *sl);
  sl->schema = sqlite3_mprintf("%s", r->schema);
  sl->file = sqlite3_mprintf("%s", file);
  if (!sl->schema || !sl->file) {
    sqlite3_free(sl->schema); sqlite3_free(sl->file); sqlite3_free(sl);
    return SQLITE_NOMEM;
  }
  sl->n_readers = 1;
  sl->next = *pp;
  *pp = sl;
  r->slot = sl;
  return SQLITE_OK;
}

static void slot_leave(dc_reader *r) {
  struct dc_slot *sl = r->slot;
  r->slot = NULL;
  if (!sl || --sl->n_readers > 0) return;
  for (struct dc_slot **pp = slot_list(r->conn); *pp; pp = &(*pp)->next) {
    if (*pp == sl) { *pp = sl->next; break; }
  }
  index_unref(sl->ix);
  sqlite3_free(sl->schema);
  sqlite3_free(sl->file);
  sqlite3_free(sl);
}

int dc_reader_open(sqlite3 *db, dc_conn *conn, const char *schema, const char *what,
                   dc_reader **out, char **pzErr) {
  (void)pzErr;
  dc_reader *r = sqlite3_malloc64(sizeof *r);
  if (!r) return SQLITE_NOMEM;
  memset(r, 0, sizeof *r);
  r->db = db;
  r->conn = conn;
  r->schema = sqlite3_mprintf("%s", schema);
  r->what = sqlite3_mprintf("%s", what);
  if (!r->schema || !r->what || (conn && slot_join(r) != SQLITE_OK)) { dc_reader_free(r); return SQLITE_NOMEM; }
  *out = r;
  return SQLITE_OK;
}

void dc_reader_free(dc_reader *r) {
  if (!r) return;
  dc_reader_end(r);
  free_index(r);
  slot_leave(r);
  sqlite3_free(r->schema);
  sqlite3_free(r->what);
  sqlite3_free(r);
}

static int meta_int(dc_reader *r, const char *key, int64_t *v, char **pzErr) {
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT value FROM \"%w\".dc_meta WHERE key = ?1", r->schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    set_err(pzErr, "%s: not a deltacells dataset (schema %s): %s", r->what, r->schema, sqlite3_errmsg(r->db));
    return rc;
  }
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
    *v = sqlite3_column_int64(st, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
    set_err(pzErr, "%s: dc_meta.%s is missing or not an integer (schema %s)", r->what, key, r->schema);
    rc = SQLITE_CORRUPT_VTAB;
  } else {
    set_err(pzErr, "%s: reading dc_meta: %s", r->what, sqlite3_errmsg(r->db));
  }
  sqlite3_finalize(st);
  return rc;
}

int dc_dataset_seal(sqlite3 *db, const char *schema, const char *what, int *sealed, uint64_t *id,
                    char **pzErr) {
  sqlite3_stmt *st = NULL;
  *sealed = 0;
  *id = 0;
  char *sql = sqlite3_mprintf("SELECT (SELECT value FROM \"%w\".dc_meta WHERE key = 'format_version'),"
                              " (SELECT value FROM \"%w\".dc_meta WHERE key = 'dataset_id')", schema, schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    set_err(pzErr, "%s: not a deltacells dataset (schema %s): %s", what, schema, sqlite3_errmsg(db));
    return rc;
  }
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    set_err(pzErr, "%s: reading dc_meta: %s", what, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  }
  rc = SQLITE_OK;
  if (sqlite3_column_type(st, 0) != SQLITE_INTEGER) {
    set_err(pzErr, "%s: dc_meta.format_version is missing or not an integer (schema %s)", what, schema);
    rc = SQLITE_CORRUPT_VTAB;
  } else {
    int64_t version = sqlite3_column_int64(st, 0);
    if (version < DC_FORMAT_MIN || version > DC_FORMAT_VERSION) {
      set_err(pzErr, "%s: the dataset has format_version %lld; this extension reads versions %d..%d%s", what,
              (long long)version, DC_FORMAT_MIN, DC_FORMAT_VERSION,
              version > DC_FORMAT_VERSION ? " (a newer deltacells wrote it: upgrade deltacells)" : "");
      rc = SQLITE_ERROR;
    } else if (version >= DC_FORMAT_SEALED) {
      int is_text = sqlite3_column_type(st, 1) == SQLITE_TEXT;
      const char *t = is_text ? (const char *)sqlite3_column_text(st, 1) : NULL;
      if (!is_text || dc_seal_parse_id(t, (size_t)sqlite3_column_bytes(st, 1), id) != 0) {
        set_err(pzErr, "%s: dc_meta.dataset_id is missing or not 16 hex digits (schema %s, format_version %lld): "
                "the checksums cannot be checked", what, schema, (long long)version);
        rc = SQLITE_CORRUPT_VTAB;
      } else {
        *sealed = 1;
      }
    }
  }
  sqlite3_finalize(st);
  return rc;
}

/* The cache namespace of the tile index just loaded: a fresh one per load.  Every reader of
** the schema shares the index (and so its namespace) until the data changes; a reload never
** finds a chunk of the old data.  (A digest of the tiles_data rows would let two schemas of
** the same file share chunks too, but the checksums are no longer read at load: without them
** equal rows do not prove equal tiles.) */
static uint64_t index_namespace(const dc_reader *r) { return dc_conn_namespace(r->conn); }

static int load_index(dc_reader *r, char **pzErr) {
  int64_t version = 0, n_cells = 0, n_genes = 0, n_tiles = 0;
  int rc;
  free_index(r);
  if ((rc = meta_int(r, "format_version", &version, pzErr)) != SQLITE_OK) return rc;
  if (version < DC_FORMAT_MIN || version > DC_FORMAT_VERSION) {
    set_err(pzErr, "%s: the dataset has format_version %lld; this extension reads versions %d..%d%s", r->what,
            (long long)version, DC_FORMAT_MIN, DC_FORMAT_VERSION,
            version > DC_FORMAT_VERSION ? " (a newer deltacells wrote it: upgrade deltacells)" : "");
    return SQLITE_ERROR;
  }
  if ((rc = meta_int(r, "n_cells", &n_cells, pzErr)) != SQLITE_OK) return rc;
  if ((rc = meta_int(r, "n_genes", &n_genes, pzErr)) != SQLITE_OK) return rc;
  if ((rc = meta_int(r, "n_tiles", &n_tiles, pzErr)) != SQLITE_OK) return rc;
  if ((rc = dc_dataset_seal(r->db, r->schema, r->what, &r->sealed, &r->dataset_id, pzErr)) != SQLITE_OK) return rc;
  if (n_cells < 0 || n_genes < 0 || n_genes > INT32_MAX || n_tiles < 0 || n_tiles > 100000000) {
    set_err(pzErr, "%s: dc_meta has impossible sizes (n_cells %lld, n_genes %lld, n_tiles %lld)", r->what,
            (long long)n_cells, (long long)n_genes, (long long)n_tiles);
    return SQLITE_CORRUPT_VTAB;
  }
  r->tiles = sqlite3_malloc64((uint64_t)(n_tiles ? n_tiles : 1) * sizeof *r->tiles);
  r->heads = sqlite3_malloc64((uint64_t)(n_tiles ? n_tiles : 1) * sizeof *r->heads);
  if (!r->tiles || !r->heads) return SQLITE_NOMEM;
  memset(r->heads, 0, (uint64_t)(n_tiles ? n_tiles : 1) * sizeof *r->heads);

  sqlite3_stmt *st = NULL;
  /* not the checksum: it follows the data blob in the row, and reading it walks every page of
  ** every tile (a remote dataset would fetch them all); dc_reader_head reads it per tile */
  char *sql = sqlite3_mprintf("SELECT tile, first_cell, n_cells, nnz, chunks FROM \"%w\".tiles_data ORDER BY tile",
                              r->schema);
  if (!sql) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    set_err(pzErr, "%s: cannot read tiles_data (schema %s): %s", r->what, r->schema, sqlite3_errmsg(r->db));
    return rc;
  }
  int64_t next_cell = 0, i = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t tile = sqlite3_column_int64(st, 0), first = sqlite3_column_int64(st, 1);
    int64_t nc = sqlite3_column_int64(st, 2), nnz = sqlite3_column_int64(st, 3);
    int64_t ch = sqlite3_column_int64(st, 4);
    if (i >= n_tiles) {
      set_err(pzErr, "%s: tiles_data holds more tiles than dc_meta.n_tiles says (%lld)", r->what, (long long)n_tiles);
      sqlite3_finalize(st);
      return SQLITE_CORRUPT_VTAB;
    }
    if (tile != i || first != next_cell || nc < 0 || nc > UINT32_MAX || nnz < 0 || ch < 0 ||
        ch > DC_MAX_CHUNKS) {
      set_err(pzErr, "%s: tiles_data row of tile %lld is inconsistent (expected tile %lld starting at cell %lld)",
              r->what, (long long)tile, (long long)i, (long long)next_cell);
      sqlite3_finalize(st);
      return SQLITE_CORRUPT_VTAB;
    }
    r->tiles[i].first_cell = first;
    r->tiles[i].n_cells = (uint32_t)nc;
    r->tiles[i].nnz = (uint64_t)nnz;
    r->tiles[i].chunks = (uint32_t)ch;
    r->tiles[i].seal = 0;
    next_cell += nc;
    i++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    set_err(pzErr, "%s: reading tiles_data: %s", r->what, sqlite3_errmsg(r->db));
    return rc;
  }
  if (i != n_tiles || next_cell != n_cells) {
    set_err(pzErr, "%s: tiles_data holds %lld tiles and %lld cells but dc_meta says %lld and %lld", r->what,
            (long long)i, (long long)next_cell, (long long)n_tiles, (long long)n_cells);
    return SQLITE_CORRUPT_VTAB;
  }
  r->n_tiles = (uint32_t)n_tiles;
  r->n_cells = n_cells;
  r->n_genes = n_genes;
  r->loaded = 1;
  r->ns = index_namespace(r);
  return SQLITE_OK;
}

int dc_reader_begin(dc_reader *r, char **pzErr) {
  unsigned int dv = 0;
  /* inside the statement's read transaction on this schema: the version is current */
  int have = sqlite3_file_control(r->db, r->schema, SQLITE_FCNTL_DATA_VERSION, &dv) == SQLITE_OK;
  if (r->loaded && have && dv == r->data_version) return SQLITE_OK;
  /* another reader of this schema loaded the index of this version already: join it */
  dc_index *cur = r->slot ? r->slot->ix : NULL;
  if (have && cur && cur->data_version == dv) {
    free_index(r);
    view(r, cur);
    return SQLITE_OK;
  }
  int rc = load_index(r, pzErr);
  if (rc == SQLITE_OK && r->conn) r->conn->index_loads++;
  if (rc == SQLITE_OK) rc = share_index(r, have, dv);
  if (rc != SQLITE_OK) { free_index(r); return rc; }
  if (!have) r->loaded = 0;   /* cannot tell: reload next time */
  return rc;
}

void dc_reader_end(dc_reader *r) {
  if (r->blob) { sqlite3_blob_close(r->blob); r->blob = NULL; }
}

int64_t dc_reader_tile_of(const dc_reader *r, int64_t cell) {
  if (cell < 0 || cell >= r->n_cells || r->n_tiles == 0) return -1;
  int64_t t;
  DC_LAST_LE(t, r->n_tiles, i, r->tiles[i].first_cell, cell);
  return t;
}

/* Moves the blob handle to tile's row. */
static int blob_at(dc_reader *r, uint32_t tile, char **pzErr) {
  int rc;
  if (r->blob && r->blob_row == (int64_t)tile) return SQLITE_OK;
  if (r->blob) {
    rc = sqlite3_blob_reopen(r->blob, tile);
    if (rc != SQLITE_OK) { sqlite3_blob_close(r->blob); r->blob = NULL; }
  } else {
    rc = sqlite3_blob_open(r->db, r->schema, "tiles_data", "data", tile, 0, &r->blob);
    if (rc != SQLITE_OK) { sqlite3_blob_close(r->blob); r->blob = NULL; }
  }
  if (rc != SQLITE_OK) {
    const char *d = io_detail(rc);
    set_err(pzErr, "%s: cannot read tile %u: %s%s%s", r->what, tile, sqlite3_errmsg(r->db), *d ? ": " : "", d);
    return rc == SQLITE_ERROR ? SQLITE_CORRUPT_VTAB : rc;
  }
  r->blob_row = tile;
  return SQLITE_OK;
}

static int blob_read(dc_reader *r, uint32_t tile, void *buf, uint64_t n, uint64_t off, char **pzErr) {
  int rc = sqlite3_blob_read(r->blob, buf, (int)n, (int)off);
  if (rc != SQLITE_OK) {
    const char *d = io_detail(rc);
    set_err(pzErr, "%s: reading tile %u (%llu bytes at %llu): %s%s%s", r->what, tile, (unsigned long long)n,
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

/* tiles_data.checksum of one tile (read when its head is, not by the load) */
static int tile_checksum(dc_reader *r, uint32_t tile, int64_t *out, char **pzErr) {
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT checksum FROM \"%w\".tiles_data WHERE tile = ?1", r->schema);
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
      set_err(pzErr, "%s: tiles_data row of tile %u has no checksum (an integer)", r->what, tile);
      return SQLITE_CORRUPT_VTAB;
    }
  }
  const char *d = io_detail(rc);
  set_err(pzErr, "%s: reading the checksum of tile %u: %s%s%s", r->what, tile, sqlite3_errmsg(r->db), *d ? ": " : "", d);
  sqlite3_finalize(st);
  return rc;
}

int dc_reader_head(dc_reader *r, uint32_t tile, const dc_tilehead **out, char **pzErr) {
  if (tile >= r->n_tiles) { set_err(pzErr, "%s: no tile %u", r->what, tile); return SQLITE_ERROR; }
  if (r->heads[tile]) { *out = r->heads[tile]; return SQLITE_OK; }
  int rc = blob_at(r, tile, pzErr);
  if (rc != SQLITE_OK) return rc;
  uint64_t len = (uint64_t)sqlite3_blob_bytes(r->blob);
  dc_tilehead *h = calloc(1, sizeof *h);
  uint8_t *buf = NULL;
  if (!h) return SQLITE_NOMEM;
  dc_error err;
  memset(&err, 0, sizeof err);
  uint64_t have = len < HEAD_PROBE ? len : HEAD_PROBE;
  buf = malloc(have ? have : 1);
  if (!buf) { rc = SQLITE_NOMEM; goto fail; }
  if ((rc = blob_read(r, tile, buf, have, 0, pzErr)) != SQLITE_OK) goto fail;
  for (;;) {
    size_t need = dc_tile_header_need(buf, (size_t)have);
    if (need == 0) break;
    if (need <= have || need > len || need > MAX_PREFIX) {
      set_err(pzErr, "%s: tile %u: corrupt header (needs %llu bytes, blob has %llu)", r->what, tile, (unsigned long long)need,
              (unsigned long long)len);
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
    uint8_t *nb = realloc(buf, need);
    if (!nb) { rc = SQLITE_NOMEM; goto fail; }
    buf = nb;
    if ((rc = blob_read(r, tile, buf + have, need - have, have, pzErr)) != SQLITE_OK) goto fail;
    have = need;
  }
  if (dc_tile_parse(buf, (size_t)len, &h->hdr, &err) != DC_OK) {
    set_err(pzErr, "%s: tile %u: corrupt %s", r->what, tile, err.msg[0] ? err.msg : "tile header");
    rc = err.code == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  const dc_tileinfo *ti = &r->tiles[tile];
  if (h->hdr.n_cells != ti->n_cells || h->hdr.nnz != ti->nnz || h->hdr.n_chunks != ti->chunks ||
      (int64_t)h->hdr.n_genes > r->n_genes || (h->hdr.n_chunks == 0 && h->hdr.n_cells != 0)) {
    set_err(pzErr, "%s: tile %u: header (%u cells, %llu nonzeros, %u chunks, %u genes) disagrees with "
            "tiles_data (%u cells, %llu nonzeros, %u chunks, %lld genes)", r->what, tile, h->hdr.n_cells,
            (unsigned long long)h->hdr.nnz, h->hdr.n_chunks, h->hdr.n_genes, ti->n_cells,
            (unsigned long long)ti->nnz, ti->chunks, (long long)r->n_genes);
    rc = SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  if (r->sealed) {
    int64_t seal = 0, want = 0;
    if ((rc = tile_checksum(r, tile, &want, pzErr)) != SQLITE_OK) goto fail;
    if (dc_seal_tile(r->dataset_id, tile, ti->first_cell, ti->n_cells, (int64_t)ti->nnz, ti->chunks, len, buf,
                     (size_t)h->hdr.hdr_len, &seal)) { rc = SQLITE_NOMEM; goto fail; }
    if (seal != want) {
      set_err(pzErr, "%s: tile %u: checksum mismatch: its blob and tiles_data row (cells %lld..%lld, %llu nonzeros) "
              "were not written together for tile %u of this dataset (moved, swapped, copied or edited)", r->what, tile,
              (long long)ti->first_cell, (long long)(ti->first_cell + ti->n_cells - 1), (unsigned long long)ti->nnz, tile);
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
  }
  /* chunks must tile the cells in order (the gather relies on it) */
  uint64_t prefix = h->hdr.n_chunks ? len : h->hdr.hdr_len;
  uint32_t next = 0;
  uint64_t nnz_next = 0;
  for (uint32_t c = 0; c < h->hdr.n_chunks; c++) {
    const dc_chunk_info *ci = &h->hdr.chunk[c];
    if (ci->first_cell != next || ci->n_cells == 0 || ci->nnz_before != nnz_next ||
        ci->offset > len || ci->length > len - ci->offset) {
      set_err(pzErr, "%s: tile %u chunk %u: corrupt chunk table", r->what, tile, c);
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
    next += ci->n_cells;
    nnz_next += ci->nnz;
    if (ci->offset < prefix) prefix = ci->offset;
  }
  if (next != h->hdr.n_cells || nnz_next != h->hdr.nnz || prefix > MAX_PREFIX || prefix < h->hdr.hdr_len) {
    set_err(pzErr, "%s: tile %u: corrupt chunk table (cells or nonzeros do not add up)", r->what, tile);
    rc = SQLITE_CORRUPT_VTAB;
    goto fail;
  }
  h->blob_len = len;
  h->prefix_len = prefix;
  if (prefix > have) {
    uint8_t *nb = realloc(buf, prefix);
    if (!nb) { rc = SQLITE_NOMEM; goto fail; }
    buf = nb;
    if ((rc = blob_read(r, tile, buf + have, prefix - have, have, pzErr)) != SQLITE_OK) goto fail;
  }
  h->prefix = buf;
  {                        /* keep the chunk table's used part only (dc_reader.h) */
    dc_tilehead *small = realloc(h, DC_TILEHEAD_SIZE(h->hdr.n_chunks));
    if (small) h = small;
  }
  r->heads[tile] = h;
  *out = h;
  return SQLITE_OK;
fail:
  free(buf);
  free(h);
  return rc;
}

/* A tile-sized buffer holding the prefix and the payloads of the given
** chunks (sorted, distinct) of one tile; the rest is never touched. */
static int read_chunks(dc_reader *r, uint32_t tile, const dc_tilehead *h, const uint32_t *chunks, size_t n,
                       uint8_t **out, char **pzErr) {
  int rc = blob_at(r, tile, pzErr);
  if (rc != SQLITE_OK) return rc;
  if ((uint64_t)sqlite3_blob_bytes(r->blob) != h->blob_len) {
    set_err(pzErr, "%s: tile %u changed size while being read", r->what, tile);
    return SQLITE_CORRUPT_VTAB;
  }
  uint8_t *buf = rcbuf_new(r->conn->bufpool, h->blob_len);   /* recycled: no page faults */
  if (!buf) return SQLITE_NOMEM;
  memcpy(buf, h->prefix, h->prefix_len);
  size_t i = 0;
  while (i < n) {
    uint64_t off = h->hdr.chunk[chunks[i]].offset;
    uint64_t end = off + h->hdr.chunk[chunks[i]].length;
    size_t j = i + 1;
    while (j < n && h->hdr.chunk[chunks[j]].offset == end) { end += h->hdr.chunk[chunks[j]].length; j++; }
    if (end > off && (rc = blob_read(r, tile, buf + off, end - off, off, pzErr)) != SQLITE_OK) { rcbuf_unref(buf); return rc; }
    i = j;
  }
  *out = buf;
  return SQLITE_OK;
}

static int decode_error(dc_reader *r, const dc_job *j, const dc_chunkkey *k, char **pzErr) {
  set_err(pzErr, "%s: tile %u chunk %u: %s", r->what, k->tile, k->chunk,
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

int dc_reader_fetch(dc_reader *r, const dc_chunkkey *keys, size_t n, dc_chunk_data **out, int lookup,
                    char **pzErr) {
  int rc = SQLITE_OK;
  struct dc_cache *cache = dc_conn_cache(r->conn);
  missrec *mr = NULL;
  dc_chunkkey *miss = NULL;
  dc_chunk_data **dec = NULL;
  size_t n_miss = 0, ntb = 0;
  dc_job *jobs = NULL;
  tilebuf *tb = NULL;
  for (size_t i = 0; i < n; i++) out[i] = NULL;
  if (n == 0) return SQLITE_OK;
  mr = sqlite3_malloc64(n * sizeof *mr);
  miss = sqlite3_malloc64(n * sizeof *miss);
  if (!mr || !miss) { rc = SQLITE_NOMEM; goto done; }
  for (size_t i = 0; i < n; i++) {
    if (keys[i].tile >= r->n_tiles) {
      set_err(pzErr, "%s: no tile %u", r->what, keys[i].tile);
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
  if (!jobs || !dec) { rc = SQLITE_NOMEM; goto done; }
  memset(jobs, 0, n_miss * sizeof *jobs);
  memset(dec, 0, n_miss * sizeof *dec);
  for (size_t k = 0; k < n_miss; k++) {
    const dc_tilehead *h = r->heads[miss[k].tile];
    if (miss[k].chunk >= h->hdr.n_chunks) {
      set_err(pzErr, "%s: tile %u has no chunk %u", r->what, miss[k].tile, miss[k].chunk);
      rc = SQLITE_ERROR;
      goto done;
    }
    const dc_chunk_info *ci = &h->hdr.chunk[miss[k].chunk];
    dec[k] = dc_chunk_new(r->conn->bufpool, ci->n_cells, ci->nnz);
    if (!dec[k]) { rc = SQLITE_NOMEM; goto done; }
    dec[k]->indptr[0] = (int64_t)ci->nnz_before;
    jobs[k].buf = tile_buf(tb, ntb, miss[k].tile);
    jobs[k].len = (size_t)h->blob_len;
    jobs[k].hdr = &h->hdr;
    jobs[k].chunk = miss[k].chunk;
    jobs[k].out.indptr = SHIFT_BACK(int64_t, dec[k]->indptr, ci->first_cell);
    jobs[k].out.indices = SHIFT_BACK(int32_t, dec[k]->indices, ci->nnz_before);
    jobs[k].out.values = SHIFT_BACK(int32_t, dec[k]->values, ci->nnz_before);
    jobs[k].out.values_f32 = 0;
  }
  {
    dc_pool *pool = dc_conn_pool(r->conn);
    if (!pool) { rc = SQLITE_NOMEM; goto done; }
    if (dc_pool_decode(pool, jobs, n_miss) != DC_OK) {
      rc = SQLITE_ERROR;
      for (size_t k = 0; k < n_miss; k++)
        if (jobs[k].rc != DC_OK) { rc = decode_error(r, &jobs[k], &miss[k], pzErr); break; }
      goto done;
    }
  }
  /* rebase indptr to the chunk and check it */
  for (size_t k = 0; k < n_miss; k++) {
    dc_chunk_data *d = dec[k];
    int64_t base = d->indptr[0], prev = 0;
    int ok = 1;
    for (uint32_t c = 0; c <= d->n_cells; c++) {
      int64_t v = d->indptr[c] - base;
      if (v < prev) ok = 0;
      d->indptr[c] = prev = v;
    }
    if (!ok || (uint64_t)d->indptr[d->n_cells] != d->nnz) {
      set_err(pzErr, "%s: tile %u chunk %u: decoded row offsets are inconsistent", r->what, miss[k].tile,
              miss[k].chunk);
      rc = SQLITE_CORRUPT_VTAB;
      goto done;
    }
  }
  for (size_t k = 0; k < n_miss; k++) {
    if (cache) dc_cache_put(cache, r->ns, miss[k].tile, miss[k].chunk, dec[k]);
    out[mr[k].slot] = dec[k];
    dec[k] = NULL;
  }
done:
  if (dec) for (size_t k = 0; k < n_miss; k++) dc_chunk_release(dec[k]);
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
        set_err(pzErr, "%s: tile %u chunk %u: decoded row offsets are inconsistent", r->what, dj[k].tile,
                dj[k].chunk);
        rc = SQLITE_CORRUPT_VTAB;
        goto done;
      }
      dj[k].indptr_out[dj[k].row0 + c] = dj[k].out_base + v;
      prev = v;
    }
    if ((uint64_t)prev != ci->nnz) {
      set_err(pzErr, "%s: tile %u chunk %u: decoded row offsets are inconsistent", r->what, dj[k].tile,
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

/* ---------------------------------------------------------------- gene names */
static uint64_t name_hash(const char *s, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
  return h ^ (h >> 31);
}

static int load_gene_names(dc_reader *r, char **pzErr) {
  int64_t ng = r->n_genes;
  uint64_t size = 16;
  while (size < (uint64_t)ng * 2) size <<= 1;
  r->gm_slot = sqlite3_malloc64(size * sizeof *r->gm_slot);
  r->gm_name = sqlite3_malloc64((uint64_t)(ng ? ng : 1) * sizeof *r->gm_name);
  if (!r->gm_slot || !r->gm_name) return SQLITE_NOMEM;
  memset(r->gm_slot, 0, size * sizeof *r->gm_slot);
  memset(r->gm_name, 0, (uint64_t)(ng ? ng : 1) * sizeof *r->gm_name);
  r->gm_mask = (uint32_t)(size - 1);
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT gene_id, name FROM \"%w\".genes ORDER BY gene_id", r->schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    set_err(pzErr, "%s: cannot read genes (schema %s): %s", r->what, r->schema, sqlite3_errmsg(r->db));
    return rc;
  }
  int64_t i = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 1);
    int len = sqlite3_column_bytes(st, 1);
    if (sqlite3_column_int64(st, 0) != i || i >= ng || !name) {
      set_err(pzErr, "%s: genes table is inconsistent at gene_id %lld", r->what, (long long)sqlite3_column_int64(st, 0));
      rc = SQLITE_CORRUPT_VTAB;
      break;
    }
    r->gm_name[i] = sqlite3_mprintf("%.*s", len, name);
    if (!r->gm_name[i]) { rc = SQLITE_NOMEM; break; }
    uint64_t h = name_hash(name, len) & r->gm_mask;
    for (;;) {
      int64_t v = r->gm_slot[h];
      if (v == 0) { r->gm_slot[h] = i + 1; break; }
      int64_t g = v > 0 ? v - 1 : -v - 1;
      if ((int)strlen(r->gm_name[g]) == len && memcmp(r->gm_name[g], name, (size_t)len) == 0) {
        r->gm_slot[h] = -(g + 1);         /* name not unique */
        break;
      }
      h = (h + 1) & r->gm_mask;
    }
    i++;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE && i != ng) {
    set_err(pzErr, "%s: genes holds %lld rows but dc_meta.n_genes is %lld", r->what, (long long)i, (long long)ng);
    rc = SQLITE_CORRUPT_VTAB;
  }
  if (rc == SQLITE_DONE) { r->gm_loaded = 1; return SQLITE_OK; }
  if (rc == SQLITE_ROW || rc == SQLITE_OK) rc = SQLITE_ERROR;
  if (!*pzErr) set_err(pzErr, "%s: reading genes: %s", r->what, sqlite3_errmsg(r->db));
  return rc;
}

static int names_ready(dc_reader *r, char **pzErr) {
  dc_index *ix = r->ix;
  if (ix && ix->gm_loaded) {   /* loaded by a reader sharing the index */
    r->gm_loaded = 1; r->gm_mask = ix->gm_mask; r->gm_slot = ix->gm_slot; r->gm_name = ix->gm_name;
    return SQLITE_OK;
  }
  if (!r->gm_loaded) {
    /* r->gm_* are the index's (NULL) or left over from a failed load of this reader */
    if (!ix || r->gm_slot != ix->gm_slot) {
      sqlite3_free(r->gm_slot);
      if (r->gm_name) for (int64_t i = 0; i < r->n_genes; i++) sqlite3_free(r->gm_name[i]);
      sqlite3_free(r->gm_name);
    }
    r->gm_slot = NULL; r->gm_name = NULL;
    int rc = load_gene_names(r, pzErr);
    if (ix) {   /* the index owns them, loaded or not (a failed load is freed with it, or retried) */
      if (rc == SQLITE_OK) {
        ix->gm_loaded = 1; ix->gm_mask = r->gm_mask; ix->gm_slot = r->gm_slot; ix->gm_name = r->gm_name;
      } else {
        sqlite3_free(r->gm_slot);
        if (r->gm_name) for (int64_t i = 0; i < r->n_genes; i++) sqlite3_free(r->gm_name[i]);
        sqlite3_free(r->gm_name);
        r->gm_slot = NULL; r->gm_name = NULL; r->gm_loaded = 0;
      }
    }
    return rc;
  }
  return SQLITE_OK;
}

int dc_reader_gene_name(dc_reader *r, int64_t id, const char **name, char **pzErr) {
  int rc = names_ready(r, pzErr);
  if (rc != SQLITE_OK) return rc;
  if (id < 0 || id >= r->n_genes) {
    set_err(pzErr, "%s: no gene %lld", r->what, (long long)id);
    return SQLITE_RANGE;
  }
  *name = r->gm_name[id];
  return SQLITE_OK;
}

int dc_reader_read(dc_reader *r, const dc_chunkkey *keys, size_t n, dc_tilebytes **out, size_t *n_out,
                   char **pzErr) {
  *out = NULL;
  *n_out = 0;
  if (n == 0) return SQLITE_OK;
  return read_tiles(r, keys, n, out, n_out, pzErr);
}

void dc_reader_read_free(dc_tilebytes *tb, size_t n) { free_tiles(tb, n); }

int dc_reader_gene_id(dc_reader *r, const char *name, int n, int64_t *id, char **pzErr) {
  int rc = names_ready(r, pzErr);
  if (rc != SQLITE_OK) return rc;
  uint64_t h = name_hash(name, n) & r->gm_mask;
  for (;;) {
    int64_t v = r->gm_slot[h];
    if (v == 0) { *id = -1; return SQLITE_OK; }
    int64_t g = v > 0 ? v - 1 : -v - 1;
    if ((int)strlen(r->gm_name[g]) == n && memcmp(r->gm_name[g], name, (size_t)n) == 0) {
      *id = v > 0 ? g : -2;
      return SQLITE_OK;
    }
    h = (h + 1) & r->gm_mask;
  }
}
