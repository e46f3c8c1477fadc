/*
** inspect.c — `info` and `obs info`: what a dataset holds, printed (read only); and the
** read-only open and dc_meta lookups that `verify` (verify.c) shares.
**
** They read the plain and shadow tables directly (docs/format.md section 1),
** so they work without the extension and on a damaged file.
*/
#include "inspect.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "merge_store.h"   /* cv_pagemap_state */
#include "dc_obs.h"
#include "dc_seal.h"

int cv_open_ro(const char *path, sqlite3 **db, int64_t *version, cv_err *e) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return cv_fail(e, "%s: cannot open: %m", path);
  unsigned char hdr[16];
  size_t n = fread(hdr, 1, 16, fp);
  fclose(fp);
  if (n < 16 || memcmp(hdr, "SQLite format 3", 16) != 0)
    return cv_fail(e, "%s: not a deltacells dataset (not an SQLite database)", path);
  /* a hot journal (an append killed inside its transaction): only a read-write open
  ** rolls it back, restoring the dataset as it was before the append */
  size_t jl = strlen(path) + 16;
  char *jp = malloc(jl);
  if (jp) {
    snprintf(jp, jl, "%s-journal", path);
    if (access(jp, F_OK) == 0 && access(path, W_OK) == 0 &&
        sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
      sqlite3_busy_timeout(*db, 10000);
      sqlite3_exec(*db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    }
    if (*db) sqlite3_close(*db);
    *db = NULL;
    free(jp);
  }
  if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    int r = cv_fail(e, "%s: %s", path, sqlite3_errmsg(*db));
    sqlite3_close(*db);
    *db = NULL;
    return r;
  }
  sqlite3_stmt *s = NULL;
  int ok = sqlite3_prepare_v2(*db, "SELECT value FROM dc_meta WHERE key='format_version'", -1, &s, NULL) == SQLITE_OK &&
           sqlite3_step(s) == SQLITE_ROW;
  int64_t v = ok ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_finalize(s);
  if (!ok) {
    int r = dsw_fail_no_meta(*db, path, e);
    sqlite3_close(*db);
    *db = NULL;
    return r;
  }
  if (v < DC_FORMAT_MIN || v > DC_FORMAT_VERSION) {
    sqlite3_close(*db);
    *db = NULL;
    return cv_fail(e, "%s: the dataset has format_version %lld; this build reads versions %d..%d%s", path,
                   (long long)v, DC_FORMAT_MIN, DC_FORMAT_VERSION,
                   v > DC_FORMAT_VERSION ? " (a newer deltacells wrote it: upgrade deltacells)" : "");
  }
  if (version) *version = v;
  return 0;
}

/* One integer from a query, or dflt. */
int64_t cv_q_int(sqlite3 *db, const char *sql, int64_t dflt) {
  sqlite3_stmt *s = NULL;
  int64_t v = dflt;
  if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
      sqlite3_column_type(s, 0) != SQLITE_NULL)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return v;
}

/* A dc_meta text value (malloc'd) or NULL. */
char *cv_meta_text(sqlite3 *db, const char *key) {
  sqlite3_stmt *s = NULL;
  char *v = NULL;
  if (sqlite3_prepare_v2(db, "SELECT CAST(value AS TEXT) FROM dc_meta WHERE key=?", -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = strdup((const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  return v;
}

int64_t cv_meta_int(sqlite3 *db, const char *key) {
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT value FROM dc_meta WHERE key='%s'", key);
  return cv_q_int(db, sql, -1);
}

static void mb(char *buf, size_t n, double bytes) {
  if (bytes >= 1e9) snprintf(buf, n, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6) snprintf(buf, n, "%.2f MB", bytes / 1e6);
  else if (bytes >= 1e3) snprintf(buf, n, "%.1f kB", bytes / 1e3);
  else snprintf(buf, n, "%.0f B", bytes);
}

int cv_info(const char *path, int json, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  if (cv_open_ro(path, &db, &version, e)) return -1;
  int64_t n_cells = cv_meta_int(db, "n_cells"), n_genes = cv_meta_int(db, "n_genes"), nnz = cv_meta_int(db, "nnz");
  int64_t tiles = cv_q_int(db, "SELECT count(*) FROM tiles_data", 0);
  int64_t xb = cv_q_int(db, "SELECT sum(length(data)) FROM tiles_data", 0);
  int64_t ob = cv_q_int(db, "SELECT sum(bytes) FROM cells_columns", 0);
  int64_t ncol = cv_q_int(db, "SELECT count(*) FROM cells_columns", 0);
  int64_t gb = version >= DC_FORMAT_GENES_MIN ? cv_q_int(db, "SELECT sum(bytes) FROM genes_columns", 0) : -1;
  int64_t fb = cv_file_size(path);
  int64_t level = cv_meta_int(db, "level"), chunks = cv_meta_int(db, "chunks"), tc = cv_meta_int(db, "tile_cells");
  int64_t ccells = cv_meta_int(db, "chunk_cells");   /* -1: absent (then every tile had `chunks`) */
  char *codec = cv_meta_text(db, "codec"), *sources = cv_meta_text(db, "sources"), *by = cv_meta_text(db, "created_by");
  double bpn = nnz > 0 ? 8.0 * (double)xb / (double)nnz : 0;
  int64_t map_held;
  int map = cv_pagemap_state(db, &map_held);
  static const char *const map_word[3] = {"none", "retired", "current"};
  if (json) {
    printf("{\"path\":");
    cv_json_print(stdout, path);
    printf(",\"format_version\":%lld,\"n_cells\":%lld,\"n_genes\":%lld,\"nnz\":%lld,\"tiles\":%lld,"
           "\"expression_bytes\":%lld,\"obs_bytes\":%lld,\"obs_columns\":%lld,\"file_bytes\":%lld,"
           "\"bits_per_nnz\":%.4f,\"codec\":",
           (long long)version, (long long)n_cells, (long long)n_genes, (long long)nnz, (long long)tiles, (long long)xb,
           (long long)ob, (long long)ncol, (long long)fb, bpn);
    cv_json_print(stdout, codec);
    if (gb >= 0) printf(",\"genes_bytes\":%lld", (long long)gb);
    printf(",\"level\":%lld,\"chunks\":%lld,\"chunk_cells\":%lld,\"tile_cells\":%lld,\"page_map\":\"%s\",\"sources\":%s,"
           "\"created_by\":",
           (long long)level, (long long)chunks, (long long)(ccells > 0 ? ccells : 0), (long long)tc, map_word[map + 1],
           sources ? sources : "[]");
    cv_json_print(stdout, by);
    printf("}\n");
  } else {
    char b1[32], b2[32], b3[32];
    mb(b1, sizeof b1, (double)xb);
    mb(b2, sizeof b2, (double)ob);
    mb(b3, sizeof b3, (double)fb);
    printf("dataset      %s\n", path);
    printf("cells        %lld\n", (long long)n_cells);
    if (gb >= 0) {
      char bg[32];
      mb(bg, sizeof bg, (double)gb);
      printf("genes        %lld (%s stored)\n", (long long)n_genes, bg);
    } else {
      printf("genes        %lld\n", (long long)n_genes);
    }
    printf("nonzeros     %lld (%.1f per cell)\n", (long long)nnz, n_cells > 0 ? (double)nnz / (double)n_cells : 0.0);
    printf("tiles        %lld (up to %lld cells each)\n", (long long)tiles, (long long)tc);
    printf("expression   %s (%.2f bits per nonzero)\n", b1, bpn);
    printf("obs          %s (%lld columns incl. the index)\n", b2, (long long)ncol);
    printf("file         %s (format version %lld)\n", b3, (long long)version);
    char lv[32];
    if (level == 0) snprintf(lv, sizeof lv, "default");
    else snprintf(lv, sizeof lv, "%lld", (long long)level);
    if (ccells > 0 && chunks > DC_CHUNKS_BASE)   /* dc_encode_chunks: more in tiles over 8 x DC_CHUNK_NNZ */
      printf("codec        %s, level %s, up to %lld chunks per tile (%d, one per %u M nonzeros past %u M, then a "
             "multiple of 4) of at least %lld cells each\n", codec ? codec : "?", lv, (long long)chunks, DC_CHUNKS_BASE,
             DC_CHUNK_NNZ >> 20, (DC_CHUNKS_BASE * DC_CHUNK_NNZ) >> 20, (long long)ccells);
    else if (ccells > 0)
      printf("codec        %s, level %s, up to %lld chunks per tile of at least %lld cells each\n", codec ? codec : "?", lv,
             (long long)chunks, (long long)ccells);
    else
      printf("codec        %s, level %s, %lld chunks per tile\n", codec ? codec : "?", lv, (long long)chunks);
    if (map > 0)
      printf("page map     current: a remote reader fetches each tile in one round trip\n");
    else if (map == 0)
      printf("page map     retired (written under schema version %lld; a VACUUM or another schema change since): remote "
             "reads take two round trips per tile until the next append writes a new one\n", (long long)map_held);
    else
      printf("page map     none (written before 2026-12-07, or by an SQLite without dbstat): remote reads take two round "
             "trips per tile until the next append writes one\n");
    printf("sources      %s\n", sources ? sources : "?");
    printf("created by   %s\n", by ? by : "?");
  }
  free(codec);
  free(sources);
  free(by);
  sqlite3_close(db);
  return 0;
}

int cv_obs_info(const char *path, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  if (cv_open_ro(path, &db, &version, e)) return -1;
  int64_t n_cells = cv_meta_int(db, "n_cells");
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "SELECT col, name, kind, n_categories, null_count, bytes FROM cells_columns ORDER BY col",
                         -1, &s, NULL) != SQLITE_OK) {
    int r = cv_fail(e, "%s: cells_columns: %s", path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return r;
  }
  printf("%-4s %-24s %-9s %10s %10s %12s %16s\n", "col", "column", "type", "categories", "nulls", "stored", "per 100M cells");
  int64_t tot = 0;
  int n = 0, sr;
  while ((sr = sqlite3_step(s)) == SQLITE_ROW) {
    char b1[32], b2[32], cats[24];
    int64_t by = sqlite3_column_int64(s, 5);
    tot += by;
    n++;
    mb(b1, sizeof b1, (double)by);
    mb(b2, sizeof b2, n_cells > 0 ? (double)by * 1e8 / (double)n_cells : 0);
    if (sqlite3_column_type(s, 3) == SQLITE_NULL) snprintf(cats, sizeof cats, "-");
    else snprintf(cats, sizeof cats, "%lld", (long long)sqlite3_column_int64(s, 3));
    printf("%-4lld %-24s %-9s %10s %10lld %12s %16s\n", (long long)sqlite3_column_int64(s, 0),
           (const char *)sqlite3_column_text(s, 1), (const char *)sqlite3_column_text(s, 2), cats,
           (long long)sqlite3_column_int64(s, 4), b1, b2);
  }
  if (sr != SQLITE_DONE) {
    int r = cv_fail(e, "%s: cells_columns: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return r;
  }
  sqlite3_finalize(s);
  char b1[32], b2[32];
  mb(b1, sizeof b1, (double)tot);
  mb(b2, sizeof b2, n_cells > 0 ? (double)tot * 1e8 / (double)n_cells : 0);
  printf("%-4s %-24s %-9s %10s %10s %12s %16s\n", "", "(all columns)", "", "", "", b1, b2);
  printf("%d columns, %lld cells\n", n, (long long)n_cells);
  sqlite3_close(db);
  return 0;
}
