/*
** fuzz_sql.c — libFuzzer target: the extension's SQL surface on a damaged dataset.
**
** Each input is a program over a fresh in-memory copy of a small converted dataset (built
** once by the Makefile: build/fuzz/fuzz_sql.dcdb; DC_FUZZ_DATASET names another).  The
** program's steps damage stored rows (any column of tiles_data, cells_blocks, cells_columns,
** cells_dict, genes_blocks, genes_columns, dc_meta set to a fuzzed value, a byte of a blob
** changed, a row deleted) and run queries with fuzzed arguments: dc_batch (cell ids, genes;
** and placing: its ticket placed into buffers, with and without a gene panel),
** cells with pushed-down terms of every operator on every column kind, expression and
** expression_long, genes, tiles, dc_aggregate, dc_config.  Every statement must end in a row
** or an error: a crash, an out-of-bounds access, undefined behaviour or a hang is a finding
** (ASan, UBSan, libFuzzer's timeout).  The plan strings the tables exchange between
** xBestIndex and xFilter are reached through these queries (SQLite offers no way to hand a
** table a plan of one's own).
**
**   make fuzz && build/fuzz/fuzz_sql -max_total_time=60 build/corpus/fuzz_sql
*/
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

static unsigned char *g_db;
static sqlite3_int64 g_len;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  const char *path = getenv("DC_FUZZ_DATASET");
  if (!path || !*path) path = "build/fuzz/fuzz_sql.dcdb";
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "fuzz_sql: cannot open the dataset %s (make fuzz builds it)\n", path); exit(1); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  g_db = malloc(n > 0 ? (size_t)n : 1);
  if (!g_db || n <= 0 || fread(g_db, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "fuzz_sql: cannot read the dataset %s\n", path);
    exit(1);
  }
  fclose(f);
  g_len = n;
  return 0;
}

/* ------------------------------------------------------------ input reader */
typedef struct { const uint8_t *p; size_t n; } in_t;

static unsigned u8(in_t *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}
static int64_t i64(in_t *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | u8(in);
  return (int64_t)v;
}
/* a small integer most of the time, any int64 sometimes */
static int64_t num(in_t *in) {
  unsigned k = u8(in);
  if (k < 160) return (int64_t)(k % 80) - 8;
  if (k < 230) return (int64_t)(u8(in) << 8 | u8(in));
  return i64(in);
}
static const uint8_t *bytes(in_t *in, size_t *len) {
  size_t n = u8(in);
  if (n > in->n) n = in->n;
  const uint8_t *p = in->p;
  in->p += n;
  in->n -= n;
  *len = n;
  return p;
}

/* binds a fuzzed value of any type to parameter i */
static void bind_any(sqlite3_stmt *st, int i, in_t *in) {
  size_t n;
  const uint8_t *p;
  switch (u8(in) % 7) {
    case 0: sqlite3_bind_null(st, i); break;
    case 1: case 2: sqlite3_bind_int64(st, i, num(in)); break;
    case 3: sqlite3_bind_double(st, i, (double)num(in) / (1 + (u8(in) % 4))); break;
    case 4: p = bytes(in, &n); sqlite3_bind_text(st, i, (const char *)p, (int)n, SQLITE_TRANSIENT); break;
    case 5: { char b[32]; snprintf(b, sizeof b, "%lld", (long long)num(in)); sqlite3_bind_text(st, i, b, -1, SQLITE_TRANSIENT); break; }
    default: p = bytes(in, &n); sqlite3_bind_blob(st, i, p, (int)n, SQLITE_TRANSIENT); break;
  }
}

/* an int64 cell-id blob: mostly valid ids, sometimes anything */
static void bind_ids(sqlite3_stmt *st, int i, in_t *in) {
  int64_t ids[64];
  unsigned n = u8(in) % 65;
  for (unsigned k = 0; k < n; k++) ids[k] = u8(in) < 200 ? (int64_t)(u8(in) << 1 | (u8(in) & 1)) : i64(in);
  if (u8(in) % 8 == 0) {   /* a blob whose length is no multiple of 8 */
    size_t len;
    const uint8_t *p = bytes(in, &len);
    sqlite3_bind_blob(st, i, p, (int)len, SQLITE_TRANSIENT);
  } else {
    sqlite3_bind_blob(st, i, ids, (int)(n * sizeof ids[0]), SQLITE_TRANSIENT);
  }
}

/* runs sql with parameters from the input; steps at most 2,000 rows */
static void run(sqlite3 *db, const char *sql, in_t *in, int ids_param) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return;
  int np = sqlite3_bind_parameter_count(st);
  for (int i = 1; i <= np; i++) {
    if (i == ids_param) bind_ids(st, i, in);
    else bind_any(st, i, in);
  }
  for (int r = 0; r < 2000 && sqlite3_step(st) == SQLITE_ROW; r++) {
    for (int c = 0; c < sqlite3_column_count(st); c++) {   /* touch every value */
      if (sqlite3_column_type(st, c) == SQLITE_BLOB) (void)sqlite3_column_bytes(st, c);
    }
  }
  sqlite3_finalize(st);
}

int deltacells_ticket_place(uint64_t id, int64_t n_cells, int64_t nnz, const uint64_t *ix_addr,
                            const uint64_t *val_addr, int kind, int64_t *row_nnz, int64_t n_seg, const int64_t *seg,
                            char *msg, int msg_len);

/* placing, as the loader does it: dc_batch(cells, genes, NULL, 1), then the ticket placed into
** two runs of buffers laid out from cell_nnz (a gene panel filters each cell where it lies and
** the runs are packed); an error is fine, a row longer than cell_nnz said is a finding */
static void place(sqlite3 *db, in_t *in) {
  static const char *const Q[] = {
    "SELECT n_cells, nnz, ticket, cell_nnz FROM dc_batch(?1, NULL, NULL, 1)",
    "SELECT n_cells, nnz, ticket, cell_nnz FROM dc_batch(?1, ?2, NULL, 1)",
    "SELECT n_cells, nnz, ticket, cell_nnz FROM dc_batch(?1, (SELECT json_group_array(name) FROM "
    "(SELECT name FROM genes WHERE gene_id % (abs(?2) % 7 + 2) = 0 ORDER BY (gene_id * 7919) % 101)), NULL, 1)"};
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, Q[u8(in) % 3], -1, &st, NULL) != SQLITE_OK) return;
  bind_ids(st, 1, in);
  if (sqlite3_bind_parameter_count(st) >= 2) bind_any(st, 2, in);
  if (sqlite3_step(st) == SQLITE_ROW) {
    int64_t n = sqlite3_column_int64(st, 0), nnz = sqlite3_column_int64(st, 1);
    uint64_t ticket = (uint64_t)sqlite3_column_int64(st, 2);
    const int32_t *cnz = sqlite3_column_blob(st, 3);
    int cl = sqlite3_column_bytes(st, 3);
    int32_t *ix = NULL, *val = NULL;
    uint64_t *ia = NULL, *va = NULL;
    int64_t *row_nnz = NULL;
    if (ticket && cnz && n > 0 && n <= 64 && cl == 4 * n && nnz >= 0 && nnz < (1 << 24)) {
      ix = malloc((size_t)(nnz + 1) * 4);
      val = malloc((size_t)(nnz + 1) * 4);
      ia = malloc((size_t)n * 8);
      va = malloc((size_t)n * 8);
      row_nnz = malloc((size_t)n * 8);
    }
    if (ix && val && ia && va && row_nnz) {
      int64_t at = 0, seg[3] = {0, n / 2, n};
      for (int64_t i = 0; i < n; i++) {
        ia[i] = (uint64_t)(uintptr_t)(ix + at);
        va[i] = (uint64_t)(uintptr_t)(val + at);
        at += cnz[i];
      }
      char msg[256];
      int with_seg = u8(in) & 1;
      if (at == nnz &&
          deltacells_ticket_place(ticket, n, nnz, ia, va, (int)(u8(in) & 1), row_nnz, with_seg ? 2 : 0,
                                  with_seg ? seg : NULL, msg, (int)sizeof msg) == 0)
        for (int64_t i = 0; i < n; i++)
          if (row_nnz[i] < 0 || row_nnz[i] > cnz[i]) abort();
    }
    deltacells_ticket_place(ticket, 0, 0, NULL, NULL, 0, NULL, 0, NULL, NULL, 0);   /* released if not yet */
    free(ix); free(val); free(ia); free(va); free(row_nnz);
  }
  sqlite3_finalize(st);
}

/* ------------------------------------------------------------ the steps */
static const char *const DAMAGE[] = {
  "UPDATE tiles_data SET %s = ?1 WHERE tile = ?2",
  "UPDATE cells_blocks SET %s = ?1 WHERE id = ?2",
  "UPDATE cells_columns SET %s = ?1 WHERE col = ?2",
  "UPDATE genes_blocks SET %s = ?1 WHERE id = ?2",
  "UPDATE genes_columns SET %s = ?1 WHERE col = ?2",
};
static const char *const DAMAGE_COLS[][11] = {
  {"tile", "first_cell", "n_cells", "nnz", "chunks", "data", "checksum", NULL},
  {"col", "block", "first_cell", "n_cells", "null_count", "min", "max", "present", "data", "checksum", NULL},
  {"col", "name", "kind", "n_categories", "null_count", "bytes", "checksum", NULL},
  {"col", "block", "first_gene", "n_genes", "data", "checksum", NULL},
  {"col", "name", "kind", "null_count", "bytes", NULL},
};
static const char *const BLOBS[] = {"tiles_data", "cells_blocks", "genes_blocks"};
static const char *const BLOB_KEYS[] = {"tile", "id", "id"};
static const char *const META[] = {"n_cells", "n_genes", "n_tiles", "nnz", "format_version", "dataset_id",
                                   "codec", "tile_cells", "obs_block_cells", "genes_block", "sources"};
static const char *const CELL_COLS[] = {"cell_id", "name", "tile", "cell_type", "donor", "batch", "age",
                                        "n_counts", "percent_mt", "is_doublet", "barcode", "rowid"};
static const char *const OPS[] = {"= ?1", "< ?1", "<= ?1", "> ?1", ">= ?1", "!= ?1", "IN (?1, ?2, ?3)",
                                  "IS NULL", "IS NOT NULL", "BETWEEN ?1 AND ?2", "= ?1 COLLATE NOCASE",
                                  "IN (SELECT value FROM json_each(?1))"};
static const char *const CONFIG[] = {"threads", "cache_mb", "decode_mb", "batch_mb", "allow_drop", "defensive",
                                     "cache_hits", "nonsense"};

static void step(sqlite3 *db, in_t *in) {
  char sql[512];
  unsigned op = u8(in) % 17;
  switch (op) {
    case 0: case 1: {   /* set a stored column to a fuzzed value */
      unsigned t = u8(in) % 5, k = 0;
      while (DAMAGE_COLS[t][k]) k++;
      snprintf(sql, sizeof sql, DAMAGE[t], DAMAGE_COLS[t][u8(in) % k]);
      run(db, sql, in, 0);
      break;
    }
    case 2: {   /* change one byte of a blob */
      unsigned t = u8(in) % 3;
      snprintf(sql, sizeof sql,
               "UPDATE %s SET data = substr(data, 1, ?1) || ?2 || substr(data, ?1 + 2) WHERE %s = ?3",
               BLOBS[t], BLOB_KEYS[t]);
      run(db, sql, in, 0);
      break;
    }
    case 3: {   /* a row goes */
      static const char *const DEL[] = {"DELETE FROM tiles_data WHERE tile = ?1", "DELETE FROM cells_blocks WHERE id = ?1",
                                        "DELETE FROM cells_dict WHERE col = ?1 AND code = ?2",
                                        "DELETE FROM genes_blocks WHERE id = ?1", "DELETE FROM cells_columns WHERE col = ?1"};
      run(db, DEL[u8(in) % 5], in, 0);
      break;
    }
    case 4: {   /* dc_meta */
      snprintf(sql, sizeof sql, "UPDATE dc_meta SET value = ?1 WHERE key = '%s'", META[u8(in) % 11]);
      run(db, sql, in, 0);
      break;
    }
    case 5: run(db, "UPDATE cells_dict SET value = ?1 WHERE col = ?2 AND code = ?3", in, 0); break;
    case 6: case 7:
      run(db, u8(in) & 1 ? "SELECT * FROM dc_batch(?1)" : "SELECT * FROM dc_batch(?1, ?2)", in, 1);
      break;
    case 8: case 9: case 10: {   /* cells with one or two pushed-down terms */
      int two = u8(in) & 1;
      const char *c1 = CELL_COLS[u8(in) % 12], *o1 = OPS[u8(in) % 12];
      const char *c2 = CELL_COLS[u8(in) % 12], *o2 = OPS[u8(in) % 9];
      unsigned lim = u8(in);
      if (two)
        snprintf(sql, sizeof sql, "SELECT * FROM cells WHERE %s %s AND %s %s%s", c1, o1, c2, o2,
                 lim & 1 ? " ORDER BY cell_id LIMIT ?4 OFFSET ?5" : "");
      else
        snprintf(sql, sizeof sql, "SELECT * FROM cells WHERE %s %s%s", c1, o1, lim & 1 ? " LIMIT ?4" : "");
      run(db, sql, in, 0);
      break;
    }
    case 11: {
      static const char *const E[] = {"SELECT * FROM expression WHERE cell_id %s",
                                      "SELECT * FROM expression_long WHERE cell_id %s",
                                      "SELECT * FROM expression_long WHERE gene_id %s",
                                      "SELECT * FROM expression_long WHERE cell_id = ?4 AND gene_id %s"};
      snprintf(sql, sizeof sql, E[u8(in) % 4], OPS[u8(in) % 12]);
      run(db, sql, in, 0);
      break;
    }
    case 12: {
      static const char *const G[] = {"SELECT * FROM genes WHERE name = ?1", "SELECT * FROM genes WHERE gene_id = ?1",
                                      "SELECT * FROM genes WHERE gene_id BETWEEN ?1 AND ?2",
                                      "SELECT * FROM tiles WHERE tile = ?1", "SELECT * FROM tiles WHERE tile >= ?1",
                                      "SELECT count(*) FROM cells"};
      run(db, G[u8(in) % 6], in, 0);
      break;
    }
    case 13:
      run(db, u8(in) & 1 ? "SELECT * FROM dc_aggregate(?1, ?2, ?3)" : "SELECT * FROM dc_aggregate_wide(?1, ?2)", in, 2);
      break;
    case 14:
      snprintf(sql, sizeof sql, "SELECT dc_config('%s', ?1)", CONFIG[u8(in) % 8]);
      run(db, sql, in, 0);
      break;
    case 16: place(db, in); break;
    default:
      run(db, "SELECT * FROM dc_batch(?1, (SELECT json_group_array(name) FROM genes WHERE gene_id < ?2))", in, 1);
      break;
  }
}

/* ASan's default quarantine (256 MiB of freed memory never reused) makes every execution
** fault in fresh pages, which costs more than the work on a VM with slow first touch; a
** small one keeps the pages warm.  This applies to this fuzz binary only. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=16"; }

static unsigned char *g_work;   /* the database of one execution, reused: no fresh pages */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = NULL;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) { sqlite3_close(db); return 0; }
  if (!g_work && !(g_work = malloc((size_t)g_len))) { sqlite3_close(db); return 0; }
  memcpy(g_work, g_db, (size_t)g_len);
  /* not resizeable: a damage step that would grow the file fails with SQLITE_FULL */
  if (sqlite3_deserialize(db, "main", g_work, g_len, g_len, 0) != SQLITE_OK) {
    sqlite3_close(db);
    return 0;
  }
  char *err = NULL;
  if (sqlite3_deltacells_init(db, &err, NULL) != SQLITE_OK) {
    fprintf(stderr, "fuzz_sql: the extension does not load: %s\n", err ? err : "?");
    abort();
  }
  sqlite3_exec(db, "SELECT dc_config('threads', 1), dc_config('cache_mb', 8)", NULL, NULL, NULL);
  in_t in = {data, size};
  for (int s = 0; s < 12 && in.n; s++) step(db, &in);
  sqlite3_close(db);
  return 0;
}
