/*
** reader.c — the tile index of one dataset schema (see dc_reader.h): dc_meta and tiles_data
** loaded and validated, shared by every reader of the schema on a connection, reloaded when
** the data version changes.  Reading and decoding chunks is in reader_chunks.c, the gene-name
** map in reader_names.c (reader_int.h).
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
#include "reader_int.h"
#include "dc_format.h"
#include "dc_seal.h"
#include "dc_search.h"
#include "tile_check.h"
#include "tile_rows.h"


/* the remote VFS's reason for an I/O error (ext/vfs_http.c), or "" */
const char *rd_io_detail(int rc) {
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

struct dc_slot {
  struct dc_slot *next;
  char *schema, *file;
  int n_readers;
  dc_index *ix;            /* the current index (one reference), or NULL */
};

static void free_arrays(dc_tileinfo *tiles, int64_t *tile_first, dc_tilehead **heads, uint32_t n_tiles,
                        int64_t *gm_slot, char **gm_name, int64_t n_genes) {
  if (heads) {
    for (uint32_t i = 0; i < n_tiles; i++) {
      if (heads[i]) { sqlite3_free(heads[i]->prefix); free(heads[i]->genes); sqlite3_free(heads[i]); }
    }
  }
  sqlite3_free(heads);
  sqlite3_free(tiles);
  sqlite3_free(tile_first);
  if (gm_name) {
    for (int64_t i = 0; i < n_genes; i++) sqlite3_free(gm_name[i]);
  }
  sqlite3_free(gm_name);
  sqlite3_free(gm_slot);
}

static void index_unref(dc_index *ix) {
  if (!ix || --ix->n_ref > 0) return;
  free_arrays(ix->tiles, ix->tile_first, ix->heads, ix->n_tiles, ix->gm_slot, ix->gm_name, ix->n_genes);
  dc_obsstats_free_list(ix->obs);
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
  r->tile_first = ix->tile_first;
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
  else free_arrays(r->tiles, r->tile_first, r->heads, r->n_tiles, r->gm_slot, r->gm_name, r->n_genes);
  r->ix = NULL;
  r->heads = NULL; r->tiles = NULL; r->tile_first = NULL; r->n_tiles = 0;
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
  ix->tile_first = r->tile_first;
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
    dc_err(pzErr, 0, NULL, "%s: not a deltacells dataset (schema %s): %s", r->what, r->schema, sqlite3_errmsg(r->db));
    return rc;
  }
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
    *v = sqlite3_column_int64(st, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
    dc_err(pzErr, 0, NULL, "%s: dc_meta.%s is missing or not an integer (schema %s)", r->what, key, r->schema);
    rc = SQLITE_CORRUPT_VTAB;
  } else {
    dc_err(pzErr, 0, NULL, "%s: reading dc_meta: %s", r->what, sqlite3_errmsg(r->db));
  }
  sqlite3_finalize(st);
  return rc;
}

/* sqlite3_prepare_v2 of sqlite3_mprintf(fmt, ...): SQLITE_OK, SQLITE_NOMEM, or prepare's code */
static int prep_fmt(sqlite3 *db, sqlite3_stmt **st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *sql = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  *st = NULL;
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
  sqlite3_free(sql);
  return rc;
}

int dc_dataset_seal(sqlite3 *db, const char *schema, const char *what, int *sealed, uint64_t *id,
                    char **pzErr) {
  sqlite3_stmt *st = NULL;
  *sealed = 0;
  *id = 0;
  int rc = prep_fmt(db, &st, "SELECT (SELECT value FROM \"%w\".dc_meta WHERE key = 'format_version'),"
                     " (SELECT value FROM \"%w\".dc_meta WHERE key = 'dataset_id')", schema, schema);
  if (rc == SQLITE_NOMEM) return rc;
  if (rc != SQLITE_OK) {
    dc_err(pzErr, 0, NULL, "%s: not a deltacells dataset (schema %s): %s", what, schema, sqlite3_errmsg(db));
    return rc;
  }
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    dc_err(pzErr, 0, NULL, "%s: reading dc_meta: %s", what, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  }
  rc = SQLITE_OK;
  if (sqlite3_column_type(st, 0) != SQLITE_INTEGER) {
    dc_err(pzErr, 0, NULL, "%s: dc_meta.format_version is missing or not an integer (schema %s)", what, schema);
    rc = SQLITE_CORRUPT_VTAB;
  } else {
    int64_t version = sqlite3_column_int64(st, 0);
    if (version < DC_FORMAT_MIN || version > DC_FORMAT_VERSION) {
      dc_err(pzErr, 0, NULL, "%s: the dataset has format_version %lld; this extension reads versions %d..%d%s", what,
              (long long)version, DC_FORMAT_MIN, DC_FORMAT_VERSION,
              version > DC_FORMAT_VERSION ? " (a newer deltacells wrote it: upgrade deltacells)" : "");
      rc = SQLITE_ERROR;
    } else if (version < DC_FORMAT_SEALED && sqlite3_column_type(st, 1) != SQLITE_NULL) {
      /* only version 3 and later draw a dataset_id: an older version beside one was edited,
      ** and reading it unsealed would take a moved or swapped tile for a good one */
      dc_err(pzErr, 0, NULL, "%s: dc_meta.format_version is %lld but the dataset has a dataset_id, which only "
              "versions %d and later have: the version was changed (schema %s; corrupt)", what, (long long)version,
              DC_FORMAT_SEALED, schema);
      rc = SQLITE_CORRUPT_VTAB;
    } else if (version >= DC_FORMAT_SEALED) {
      int is_text = sqlite3_column_type(st, 1) == SQLITE_TEXT;
      const char *t = is_text ? (const char *)sqlite3_column_text(st, 1) : NULL;
      if (!is_text || dc_seal_parse_id(t, (size_t)sqlite3_column_bytes(st, 1), id) != 0) {
        dc_err(pzErr, 0, NULL, "%s: dc_meta.dataset_id is missing or not 16 hex digits (schema %s, format_version %lld): "
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

int dc_genes_agree(sqlite3 *db, const char *schema, const char *table, const char *what, int64_t n, char **pzErr) {
  sqlite3_stmt *st = NULL;
  /* column 0 (name) is rows 0 .. 2^32-1 of genes_blocks (id = col * 2^32 + block) */
  int rc = prep_fmt(db, &st, "SELECT coalesce(max(first_gene + n_genes), 0) FROM \"%w\".\"%w_blocks\" "
                     "WHERE id >= 0 AND id < 4294967296", schema, table);
  if (rc == SQLITE_NOMEM) return rc;
  if (rc != SQLITE_OK) {
    dc_err(pzErr, 0, NULL, "%s: cannot read %s_blocks (schema %s): %s", what, table, schema, sqlite3_errmsg(db));
    return SQLITE_CORRUPT_VTAB;
  }
  rc = sqlite3_step(st);
  int64_t got = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  if (rc != SQLITE_ROW) dc_err(pzErr, 0, NULL, "%s: reading %s_blocks: %s", what, table, sqlite3_errmsg(db));
  else if (got != n)
    dc_err(pzErr, 0, NULL, "%s: dc_meta.n_genes is %lld but the %s table holds %lld genes (schema %s; corrupt)", what,
           (long long)n, table, (long long)got, schema);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW && got == n ? SQLITE_OK : rc == SQLITE_ROW ? SQLITE_CORRUPT_VTAB : rc;
}

/* The cache namespace of the tile index just loaded: a fresh one per load.  Every reader of
** the schema shares the index (and so its namespace) until the data changes; a reload never
** finds a chunk of the old data.  (A digest of the tiles_data rows would let two schemas of
** the same file share chunks too, but the checksums are no longer read at load: without them
** equal rows do not prove equal tiles.) */
static uint64_t index_namespace(const dc_reader *r) { return dc_conn_namespace(r->conn); }

/* The covering index DC_TILES_INDEX exists and holds the checksums (an index of that name
** without them would make the load read every tile's pages for its checksum). */
static int index_has_seals(dc_reader *r) {
  sqlite3_stmt *st = NULL;
  int yes = 0;
  if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM pragma_index_info WHERE arg = '" DC_TILES_INDEX "' AND schema = ?1 "
                         "AND name = 'checksum'", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, r->schema, -1, SQLITE_STATIC);
    yes = sqlite3_step(st) == SQLITE_ROW;
  }
  sqlite3_finalize(st);
  return yes;
}

static int load_index(dc_reader *r, char **pzErr) {
  int64_t version = 0, n_cells = 0, n_genes = 0, n_tiles = 0;
  int rc;
  free_index(r);
  if ((rc = meta_int(r, "format_version", &version, pzErr)) != SQLITE_OK) return rc;
  if (version < DC_FORMAT_MIN || version > DC_FORMAT_VERSION) {
    dc_err(pzErr, 0, NULL, "%s: the dataset has format_version %lld; this extension reads versions %d..%d%s", r->what,
            (long long)version, DC_FORMAT_MIN, DC_FORMAT_VERSION,
            version > DC_FORMAT_VERSION ? " (a newer deltacells wrote it: upgrade deltacells)" : "");
    return SQLITE_ERROR;
  }
  if ((rc = meta_int(r, "n_cells", &n_cells, pzErr)) != SQLITE_OK) return rc;
  if ((rc = meta_int(r, "n_genes", &n_genes, pzErr)) != SQLITE_OK) return rc;
  if ((rc = meta_int(r, "n_tiles", &n_tiles, pzErr)) != SQLITE_OK) return rc;
  if ((rc = dc_dataset_seal(r->db, r->schema, r->what, &r->sealed, &r->dataset_id, pzErr)) != SQLITE_OK) return rc;
  if (!dc_meta_sizes_ok(n_cells, n_genes, n_tiles)) {
    dc_err(pzErr, 0, NULL, "%s: dc_meta has impossible sizes (n_cells %lld, n_genes %lld, n_tiles %lld)", r->what,
            (long long)n_cells, (long long)n_genes, (long long)n_tiles);
    return SQLITE_CORRUPT_VTAB;
  }
  r->tiles = sqlite3_malloc64((uint64_t)(n_tiles ? n_tiles : 1) * sizeof *r->tiles);
  r->heads = sqlite3_malloc64((uint64_t)(n_tiles ? n_tiles : 1) * sizeof *r->heads);
  r->tile_first = sqlite3_malloc64((uint64_t)(n_tiles + 1) * sizeof *r->tile_first);
  if (!r->tiles || !r->heads || !r->tile_first) return SQLITE_NOMEM;
  memset(r->heads, 0, (uint64_t)(n_tiles ? n_tiles : 1) * sizeof *r->heads);

  /* the rows and their rule: tile_rows.c (verify reads them the same way); a sealed dataset's
  ** checksums too where the covering index has them (else each is read with its tile's head) */
  dc_tilerows it;
  int seals = r->sealed && index_has_seals(r) &&
              dc_tilerows_open(r->db, r->schema, DC_ROWS_SEAL | DC_ROWS_INDEXED, &it) == SQLITE_OK;
  if (!seals && (rc = dc_tilerows_open(r->db, r->schema, 0, &it)) != SQLITE_OK) {
    dc_err(pzErr, 0, NULL, "%s: cannot read " DC_TILES_DATA " (schema %s): %s", r->what, r->schema, sqlite3_errmsg(r->db));
    return rc;
  }
  int64_t next_cell = 0, i = 0;
  dc_tilerow row;
  while ((rc = dc_tilerows_next(&it, &row)) == SQLITE_ROW) {
    if (i >= n_tiles) {
      dc_err(pzErr, 0, NULL, "%s: " DC_TILES_DATA " holds more tiles than dc_meta.n_tiles says (%lld)", r->what, (long long)n_tiles);
      dc_tilerows_close(&it);
      return SQLITE_CORRUPT_VTAB;
    }
    if (!row.ok) {
      dc_err(pzErr, 0, NULL, "%s: " DC_TILES_DATA " row of tile %lld is inconsistent (expected tile %lld starting at cell %lld)",
              r->what, (long long)row.tile, (long long)i, (long long)next_cell);
      dc_tilerows_close(&it);
      return SQLITE_CORRUPT_VTAB;
    }
    r->tiles[i].first_cell = row.first_cell;
    r->tiles[i].n_cells = (uint32_t)row.n_cells;
    r->tiles[i].nnz = (uint64_t)row.nnz;
    r->tiles[i].chunks = (uint32_t)row.chunks;
    r->tiles[i].seal = seals ? row.seal : 0;
    r->tiles[i].seal_state = !seals ? 0 : row.has_seal ? 1 : 2;
    r->tile_first[i] = row.first_cell;
    next_cell += row.n_cells;
    i++;
  }
  dc_tilerows_close(&it);
  if (rc != SQLITE_DONE) {
    dc_err(pzErr, 0, NULL, "%s: reading " DC_TILES_DATA ": %s", r->what, sqlite3_errmsg(r->db));
    return rc;
  }
  if (i != n_tiles || next_cell != n_cells) {
    dc_err(pzErr, 0, NULL, "%s: " DC_TILES_DATA " holds %lld tiles and %lld cells but dc_meta says %lld and %lld", r->what,
            (long long)i, (long long)next_cell, (long long)n_tiles, (long long)n_cells);
    return SQLITE_CORRUPT_VTAB;
  }
  r->tile_first[n_tiles] = n_cells;
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
