/*
** inspect.c — `info`, `obs info` and `verify` on a dataset (read only).
**
** They read the plain and shadow tables directly (docs/format.md section 1),
** so they work without the extension and on a damaged file.
*/
#include "inspect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "dc_codec.h"
#include "dc_obs.h"

static int open_ro(const char *path, sqlite3 **db, cv_err *e) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return cv_fail(e, "%s: cannot open: %m", path);
  unsigned char hdr[16];
  size_t n = fread(hdr, 1, 16, fp);
  fclose(fp);
  if (n < 16 || memcmp(hdr, "SQLite format 3", 16) != 0)
    return cv_fail(e, "%s: not a deltacells dataset (not an SQLite database)", path);
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
    int r = cv_fail(e, "%s: not a deltacells dataset (no dc_meta format_version): %s", path, sqlite3_errmsg(*db));
    sqlite3_close(*db);
    *db = NULL;
    return r;
  }
  if (v != 1) {
    sqlite3_close(*db);
    *db = NULL;
    return cv_fail(e, "%s: format version %lld is not supported (this build reads 1)", path, (long long)v);
  }
  return 0;
}

/* One integer from a query, or dflt. */
static int64_t q_int(sqlite3 *db, const char *sql, int64_t dflt) {
  sqlite3_stmt *s = NULL;
  int64_t v = dflt;
  if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
      sqlite3_column_type(s, 0) != SQLITE_NULL)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return v;
}

/* A dc_meta text value (malloc'd) or NULL. */
static char *meta_text(sqlite3 *db, const char *key) {
  sqlite3_stmt *s = NULL;
  char *v = NULL;
  if (sqlite3_prepare_v2(db, "SELECT CAST(value AS TEXT) FROM dc_meta WHERE key=?", -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = strdup((const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  return v;
}

static int64_t meta_int(sqlite3 *db, const char *key) {
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT value FROM dc_meta WHERE key='%s'", key);
  return q_int(db, sql, -1);
}

static void json_esc(FILE *o, const char *s) {
  fputc('"', o);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(o, "\\%c", *p);
    else if (*p < 0x20) fprintf(o, "\\u%04x", *p);
    else fputc(*p, o);
  }
  fputc('"', o);
}

static void mb(char *buf, size_t n, double bytes) {
  if (bytes >= 1e9) snprintf(buf, n, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6) snprintf(buf, n, "%.2f MB", bytes / 1e6);
  else if (bytes >= 1e3) snprintf(buf, n, "%.1f kB", bytes / 1e3);
  else snprintf(buf, n, "%.0f B", bytes);
}

int cv_info(const char *path, int json, cv_err *e) {
  sqlite3 *db = NULL;
  if (open_ro(path, &db, e)) return -1;
  int64_t n_cells = meta_int(db, "n_cells"), n_genes = meta_int(db, "n_genes"), nnz = meta_int(db, "nnz");
  int64_t tiles = q_int(db, "SELECT count(*) FROM tiles_data", 0);
  int64_t xb = q_int(db, "SELECT sum(length(data)) FROM tiles_data", 0);
  int64_t ob = q_int(db, "SELECT sum(bytes) FROM cells_columns", 0);
  int64_t ncol = q_int(db, "SELECT count(*) FROM cells_columns", 0);
  int64_t fb = cv_file_size(path);
  int64_t level = meta_int(db, "level"), chunks = meta_int(db, "chunks"), tc = meta_int(db, "tile_cells");
  char *codec = meta_text(db, "codec"), *sources = meta_text(db, "sources"), *by = meta_text(db, "created_by");
  double bpn = nnz > 0 ? 8.0 * (double)xb / (double)nnz : 0;
  if (json) {
    printf("{\"path\":");
    json_esc(stdout, path);
    printf(",\"format_version\":1,\"n_cells\":%lld,\"n_genes\":%lld,\"nnz\":%lld,\"tiles\":%lld,"
           "\"expression_bytes\":%lld,\"obs_bytes\":%lld,\"obs_columns\":%lld,\"file_bytes\":%lld,"
           "\"bits_per_nnz\":%.4f,\"codec\":",
           (long long)n_cells, (long long)n_genes, (long long)nnz, (long long)tiles, (long long)xb, (long long)ob,
           (long long)ncol, (long long)fb, bpn);
    json_esc(stdout, codec);
    printf(",\"level\":%lld,\"chunks\":%lld,\"tile_cells\":%lld,\"sources\":%s,\"created_by\":", (long long)level,
           (long long)chunks, (long long)tc, sources ? sources : "[]");
    json_esc(stdout, by);
    printf("}\n");
  } else {
    char b1[32], b2[32], b3[32];
    mb(b1, sizeof b1, (double)xb);
    mb(b2, sizeof b2, (double)ob);
    mb(b3, sizeof b3, (double)fb);
    printf("dataset      %s\n", path);
    printf("cells        %lld\n", (long long)n_cells);
    printf("genes        %lld\n", (long long)n_genes);
    printf("nonzeros     %lld (%.1f per cell)\n", (long long)nnz, n_cells > 0 ? (double)nnz / (double)n_cells : 0.0);
    printf("tiles        %lld (up to %lld cells each)\n", (long long)tiles, (long long)tc);
    printf("expression   %s (%.2f bits per nonzero)\n", b1, bpn);
    printf("obs          %s (%lld columns incl. the index)\n", b2, (long long)ncol);
    printf("file         %s\n", b3);
    char lv[32];
    if (level == 0) snprintf(lv, sizeof lv, "default");
    else snprintf(lv, sizeof lv, "%lld", (long long)level);
    printf("codec        %s, level %s, %lld chunks per tile\n", codec ? codec : "?", lv, (long long)chunks);
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
  if (open_ro(path, &db, e)) return -1;
  int64_t n_cells = meta_int(db, "n_cells");
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "SELECT col, name, kind, n_categories, null_count, bytes FROM cells_columns ORDER BY col",
                         -1, &s, NULL) != SQLITE_OK) {
    int r = cv_fail(e, "%s: cells_columns: %s", path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return r;
  }
  printf("%-4s %-24s %-9s %10s %10s %12s %16s\n", "col", "column", "type", "categories", "nulls", "stored", "per 100M cells");
  int64_t tot = 0;
  int n = 0;
  while (sqlite3_step(s) == SQLITE_ROW) {
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
  sqlite3_finalize(s);
  char b1[32], b2[32];
  mb(b1, sizeof b1, (double)tot);
  mb(b2, sizeof b2, n_cells > 0 ? (double)tot * 1e8 / (double)n_cells : 0);
  printf("%-4s %-24s %-9s %10s %10s %12s %16s\n", "", "(all columns)", "", "", "", b1, b2);
  printf("%d columns, %lld cells\n", n, (long long)n_cells);
  sqlite3_close(db);
  return 0;
}

/* ------------------------------------------------------------ verify */
int cv_verify(const char *path, int quiet, cv_err *e) {
  sqlite3 *db = NULL;
  if (open_ro(path, &db, e)) return -1;
  int64_t n_cells = meta_int(db, "n_cells"), n_genes = meta_int(db, "n_genes"), nnz_meta = meta_int(db, "nnz");
  int faults = 0;
  dc_decoder *dec = dc_decoder_new();
  dc_obs_decoder *odec = dc_obs_decoder_new();
  uint64_t *tot = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *tot);
  uint64_t *ncl = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *ncl);
  int64_t *ip = NULL;
  int32_t *ix = NULL, *vx = NULL;
  size_t cap_c = 0, cap_n = 0;
  sqlite3_stmt *s = NULL;
  int64_t expect_first = 0, nnz_sum = 0, n_tiles = 0, n_blocks = 0;
#define FAULT(...) do { faults++; fprintf(stderr, "verify: %s: ", path); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } while (0)
  if (!dec || !odec || !tot || !ncl) { cv_fail(e, "out of memory"); goto done; }
  if (sqlite3_prepare_v2(db, "SELECT tile, first_cell, n_cells, nnz, chunks, data FROM tiles_data ORDER BY tile", -1, &s,
                         NULL) != SQLITE_OK) {
    cv_fail(e, "%s: tiles_data: %s", path, sqlite3_errmsg(db));
    goto done;
  }
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t t = sqlite3_column_int64(s, 0), fc = sqlite3_column_int64(s, 1), nc = sqlite3_column_int64(s, 2);
    int64_t nz = sqlite3_column_int64(s, 3), ch = sqlite3_column_int64(s, 4);
    const uint8_t *blob = sqlite3_column_blob(s, 5);
    size_t len = (size_t)sqlite3_column_bytes(s, 5);
    n_tiles++;
    if (t != n_tiles - 1) FAULT("tile %lld: tiles are not numbered 0, 1, 2, ... (expected %lld)", (long long)t, (long long)n_tiles - 1);
    if (fc != expect_first) FAULT("tile %lld: first_cell %lld, expected %lld", (long long)t, (long long)fc, (long long)expect_first);
    expect_first = fc + nc;
    dc_tile_hdr h;
    dc_error de;
    memset(&de, 0, sizeof de);
    if (dc_tile_parse(blob, len, &h, &de) != DC_OK) { FAULT("tile %lld: %s", (long long)t, de.msg); continue; }
    if ((int64_t)h.n_cells != nc || (int64_t)h.nnz != nz || (int64_t)h.n_chunks != ch || (int64_t)h.n_genes != n_genes) {
      FAULT("tile %lld: header (%u cells, %llu nonzeros, %u chunks, %u genes) disagrees with tiles_data "
            "(%lld, %lld, %lld) or the dataset's %lld genes", (long long)t, h.n_cells, (unsigned long long)h.nnz,
            h.n_chunks, h.n_genes, (long long)nc, (long long)nz, (long long)ch, (long long)n_genes);
      continue;
    }
    if (cv_grow((void **)&ip, &cap_c, (size_t)nc + 1, sizeof *ip, e)) goto done;
    size_t c2 = cap_n;
    if (cv_grow((void **)&ix, &c2, (size_t)nz + 1, sizeof *ix, e)) goto done;
    c2 = cap_n;
    if (cv_grow((void **)&vx, &c2, (size_t)nz + 1, sizeof *vx, e)) goto done;
    cap_n = c2;
    dc_out out = {ip, ix, vx, 0};
    if (dc_tile_decode(dec, blob, len, &out, &de) != DC_OK) { FAULT("tile %lld: %s", (long long)t, de.msg); continue; }
    int bad = 0;
    if (ip[0] != 0 || ip[nc] != nz) bad = 1;
    for (int64_t i = 0; i < nc && !bad; i++) {
      if (ip[i + 1] < ip[i]) { bad = 1; break; }
      for (int64_t k = ip[i]; k < ip[i + 1]; k++) {
        if (ix[k] < 0 || ix[k] >= n_genes || (k > ip[i] && ix[k] <= ix[k - 1]) || vx[k] == 0) {
          FAULT("tile %lld: cell %lld (dataset cell %lld): bad gene index %d or count %u", (long long)t, (long long)i,
                (long long)(fc + i), ix[k], (uint32_t)vx[k]);
          bad = 2;
          break;
        }
        tot[ix[k]] += (uint32_t)vx[k];
        ncl[ix[k]]++;
      }
    }
    if (bad == 1) FAULT("tile %lld: decoded cell offsets are inconsistent", (long long)t);
    nnz_sum += nz;
  }
  if (rc != SQLITE_DONE) FAULT("reading tiles_data: %s", sqlite3_errmsg(db));
  sqlite3_finalize(s);
  s = NULL;
  if (expect_first != n_cells) FAULT("tiles hold %lld cells, dc_meta says %lld", (long long)expect_first, (long long)n_cells);
  if (nnz_sum != nnz_meta) FAULT("tiles hold %lld nonzeros, dc_meta says %lld", (long long)nnz_sum, (long long)nnz_meta);
  /* genes: totals must match what the tiles hold, and be in decreasing order */
  if (sqlite3_prepare_v2(db, "SELECT gene_id, name, total_counts, n_cells FROM genes ORDER BY gene_id", -1, &s, NULL) ==
      SQLITE_OK) {
    int64_t ng = 0, prev = INT64_MAX;
    while (sqlite3_step(s) == SQLITE_ROW) {
      int64_t id = sqlite3_column_int64(s, 0), tc = sqlite3_column_int64(s, 2), cc = sqlite3_column_int64(s, 3);
      if (id != ng || id >= n_genes) { FAULT("genes: gene_id %lld out of sequence", (long long)id); break; }
      if ((uint64_t)tc != tot[id] || (uint64_t)cc != ncl[id])
        FAULT("genes: gene %lld '%s': total_counts %lld / n_cells %lld, but the tiles hold %llu / %llu", (long long)id,
              (const char *)sqlite3_column_text(s, 1), (long long)tc, (long long)cc, (unsigned long long)tot[id],
              (unsigned long long)ncl[id]);
      if (tc > prev) FAULT("genes: gene %lld has more counts than gene %lld", (long long)id, (long long)id - 1);
      prev = tc;
      ng++;
    }
    if (ng != n_genes) FAULT("genes: %lld rows, dc_meta says %lld", (long long)ng, (long long)n_genes);
  } else FAULT("genes: %s", sqlite3_errmsg(db));
  sqlite3_finalize(s);
  s = NULL;
  /* obs blocks */
  int64_t obs_block = meta_int(db, "obs_block_cells");
  if (sqlite3_prepare_v2(db,
                         "SELECT b.col, b.block, b.n_cells, b.null_count, b.data, c.kind, c.n_categories, c.name, b.first_cell "
                         "FROM cells_blocks b JOIN cells_columns c USING(col) ORDER BY b.col, b.block",
                         -1, &s, NULL) == SQLITE_OK) {
    while (sqlite3_step(s) == SQLITE_ROW) {
      dc_obs_expect ex = {dc_obs_kind_from_name((const char *)sqlite3_column_text(s, 5)),
                          (uint32_t)sqlite3_column_int64(s, 2), (uint32_t)sqlite3_column_int64(s, 6)};
      dc_obs_block blk;
      dc_error de;
      memset(&de, 0, sizeof de);
      n_blocks++;
      const char *name = (const char *)sqlite3_column_text(s, 7);
      int64_t bl = sqlite3_column_int64(s, 1);
      if (dc_obs_decode(odec, sqlite3_column_blob(s, 4), (size_t)sqlite3_column_bytes(s, 4), &ex, &blk, &de) != DC_OK)
        FAULT("obs column '%s', block %lld: %s", name, (long long)bl, de.msg);
      else if ((int64_t)blk.null_count != sqlite3_column_int64(s, 3))
        FAULT("obs column '%s', block %lld: %u NULLs, cells_blocks says %lld", name, (long long)bl, blk.null_count,
              (long long)sqlite3_column_int64(s, 3));
      else if (sqlite3_column_int64(s, 8) != bl * obs_block)
        FAULT("obs column '%s', block %lld: first_cell %lld", name, (long long)bl, (long long)sqlite3_column_int64(s, 8));
    }
  } else FAULT("cells_blocks: %s", sqlite3_errmsg(db));
  sqlite3_finalize(s);
  s = NULL;
  {
    int64_t bad_cols = q_int(db,
                             "SELECT count(*) FROM cells_columns c WHERE (SELECT coalesce(sum(n_cells),0) FROM cells_blocks b "
                             "WHERE b.col=c.col) != (SELECT value FROM dc_meta WHERE key='n_cells')", -1);
    if (bad_cols != 0) FAULT("cells_blocks: %lld obs columns do not cover every cell", (long long)bad_cols);
  }
  if (faults) {
    cv_fail(e, "%s: %d fault%s found", path, faults, faults == 1 ? "" : "s");
  } else if (!quiet) {
    printf("%s: ok: %lld tiles (%lld cells, %lld nonzeros) decoded with checksums, %lld genes, %lld obs blocks\n", path,
           (long long)n_tiles, (long long)n_cells, (long long)nnz_sum, (long long)n_genes, (long long)n_blocks);
  }
done:
  sqlite3_finalize(s);
  free(ip); free(ix); free(vx); free(tot); free(ncl);
  dc_decoder_free(dec);
  dc_obs_decoder_free(odec);
  sqlite3_close(db);
  return faults || e->msg[0] ? -1 : 0;
#undef FAULT
}
