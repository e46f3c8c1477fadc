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
#include "dc_format.h"
#include "dc_obs.h"

static int open_ro(const char *path, sqlite3 **db, int64_t *version, cv_err *e) {
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
  int64_t version = 0;
  if (open_ro(path, &db, &version, e)) return -1;
  int64_t n_cells = meta_int(db, "n_cells"), n_genes = meta_int(db, "n_genes"), nnz = meta_int(db, "nnz");
  int64_t tiles = q_int(db, "SELECT count(*) FROM tiles_data", 0);
  int64_t xb = q_int(db, "SELECT sum(length(data)) FROM tiles_data", 0);
  int64_t ob = q_int(db, "SELECT sum(bytes) FROM cells_columns", 0);
  int64_t ncol = q_int(db, "SELECT count(*) FROM cells_columns", 0);
  int64_t gb = version >= DC_FORMAT_GENES_MIN ? q_int(db, "SELECT sum(bytes) FROM genes_columns", 0) : -1;
  int64_t fb = cv_file_size(path);
  int64_t level = meta_int(db, "level"), chunks = meta_int(db, "chunks"), tc = meta_int(db, "tile_cells");
  char *codec = meta_text(db, "codec"), *sources = meta_text(db, "sources"), *by = meta_text(db, "created_by");
  double bpn = nnz > 0 ? 8.0 * (double)xb / (double)nnz : 0;
  if (json) {
    printf("{\"path\":");
    json_esc(stdout, path);
    printf(",\"format_version\":%lld,\"n_cells\":%lld,\"n_genes\":%lld,\"nnz\":%lld,\"tiles\":%lld,"
           "\"expression_bytes\":%lld,\"obs_bytes\":%lld,\"obs_columns\":%lld,\"file_bytes\":%lld,"
           "\"bits_per_nnz\":%.4f,\"codec\":",
           (long long)version, (long long)n_cells, (long long)n_genes, (long long)nnz, (long long)tiles, (long long)xb,
           (long long)ob, (long long)ncol, (long long)fb, bpn);
    json_esc(stdout, codec);
    if (gb >= 0) printf(",\"genes_bytes\":%lld", (long long)gb);
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
  int64_t version = 0;
  if (open_ro(path, &db, &version, e)) return -1;
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
#define VFAULT(...) do { (*faults)++; fprintf(stderr, "verify: %s: ", path); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } while (0)

/* Version 1: the plain genes table.  Returns the rows read, or -1. */
static int64_t verify_genes_v1(sqlite3 *db, const char *path, int64_t n_genes, int64_t *tc, int64_t *cc, int *faults) {
  sqlite3_stmt *s = NULL;
  int64_t ng = 0;
  if (sqlite3_prepare_v2(db, "SELECT gene_id, total_counts, n_cells FROM genes ORDER BY gene_id", -1, &s, NULL) != SQLITE_OK) {
    VFAULT("genes: %s", sqlite3_errmsg(db));
    return -1;
  }
  while (sqlite3_step(s) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(s, 0);
    if (id != ng || id >= n_genes) { VFAULT("genes: gene_id %lld out of sequence", (long long)id); break; }
    tc[id] = sqlite3_column_int64(s, 1);
    cc[id] = sqlite3_column_int64(s, 2);
    ng++;
  }
  sqlite3_finalize(s);
  return ng;
}

/* Version 2: decodes every block of every stored column of the genes table
** (genes_columns, genes_blocks); total_counts and n_cells into tc, cc.
** Returns n_genes when the name and count columns decoded, or -1. */
static int64_t verify_genes_v2(sqlite3 *db, const char *path, int64_t n_genes, dc_obs_decoder *odec, int64_t *tc,
                               int64_t *cc, int *faults) {
  static const char *const fixed[3] = {"name", "total_counts", "n_cells"};
  int64_t block = -1, ok_fixed = 0;
  {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT value FROM dc_meta WHERE key='genes_block'", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_INTEGER)
      block = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
  }
  if (block < 1 || block > (int64_t)DC_OBS_MAX_N) {
    VFAULT("genes: dc_meta.genes_block is missing or impossible (%lld)", (long long)block);
    return -1;
  }
  sqlite3_stmt *cs = NULL, *bs = NULL;
  if (sqlite3_prepare_v2(db, "SELECT col, name, kind, null_count, bytes FROM genes_columns ORDER BY col", -1, &cs, NULL) !=
          SQLITE_OK ||
      sqlite3_prepare_v2(db, "SELECT col, block, first_gene, n_genes, data FROM genes_blocks WHERE id >= ?1 AND id < ?2 "
                             "ORDER BY id", -1, &bs, NULL) != SQLITE_OK) {
    VFAULT("genes: %s", sqlite3_errmsg(db));
    sqlite3_finalize(cs);
    return -1;
  }
  int64_t expect_col = 0, all_blocks = 0;
  while (sqlite3_step(cs) == SQLITE_ROW) {
    int64_t col = sqlite3_column_int64(cs, 0), nulls = sqlite3_column_int64(cs, 3), bytes = sqlite3_column_int64(cs, 4);
    const char *name = (const char *)sqlite3_column_text(cs, 1), *kd = (const char *)sqlite3_column_text(cs, 2);
    int kind = kd ? dc_obs_kind_from_name(kd) : 0;
    if (col != expect_col) VFAULT("genes_columns: col %lld, expected %lld", (long long)col, (long long)expect_col);
    expect_col = col + 1;
    if (!name || !kind || kind == DC_OBS_CATEGORY ||
        (col < 3 && (strcmp(name, fixed[col]) || kind != (col == 0 ? DC_OBS_TEXT : DC_OBS_INT)))) {
      VFAULT("genes_columns: col %lld ('%s', kind '%s') is not what the format allows", (long long)col,
             name ? name : "NULL", kd ? kd : "NULL");
      continue;
    }
    sqlite3_bind_int64(bs, 1, col << 32);
    sqlite3_bind_int64(bs, 2, (col + 1) << 32);
    int64_t next = 0, b = 0, got_nulls = 0, got_bytes = 0, bad = 0;
    while (sqlite3_step(bs) == SQLITE_ROW) {
      int64_t bl = sqlite3_column_int64(bs, 1), first = sqlite3_column_int64(bs, 2), cnt = sqlite3_column_int64(bs, 3);
      int64_t want = n_genes - next < block ? n_genes - next : block;
      all_blocks++;
      if (sqlite3_column_int64(bs, 0) != col || bl != b || first != next || cnt != want || cnt <= 0) {
        VFAULT("genes column '%s' block %lld: first_gene %lld, n_genes %lld; expected block %lld of genes %lld..%lld",
               name, (long long)bl, (long long)first, (long long)cnt, (long long)b, (long long)next,
               (long long)(next + want - 1));
        bad = 1;
        break;
      }
      dc_obs_expect ex = {kind, (uint32_t)cnt, 0};
      dc_obs_block blk;
      dc_error de;
      memset(&de, 0, sizeof de);
      int len = sqlite3_column_bytes(bs, 4);
      if (dc_obs_decode(odec, sqlite3_column_blob(bs, 4), (size_t)len, &ex, &blk, &de) != DC_OK) {
        VFAULT("genes column '%s' block %lld: %s", name, (long long)bl, de.msg);
        bad = 1;
        break;
      }
      if (col == 0 && blk.null_count) {
        VFAULT("genes column 'name' block %lld: %u NULL names", (long long)bl, blk.null_count);
        bad = 1;
      }
      if (col == 1 || col == 2) {
        int64_t *dst = col == 1 ? tc : cc;
        for (int64_t i = 0; i < cnt; i++) {
          if (!blk.valid[i] || blk.i64[i] < 0) {
            VFAULT("genes column '%s': gene %lld is NULL or negative", name, (long long)(next + i));
            bad = 1;
            break;
          }
          dst[next + i] = blk.i64[i];
        }
      }
      got_nulls += blk.null_count;
      got_bytes += len;
      next += cnt;
      b++;
    }
    sqlite3_reset(bs);
    if (bad) continue;
    if (next != n_genes) {
      VFAULT("genes column '%s': blocks hold %lld genes, dc_meta says %lld", name, (long long)next, (long long)n_genes);
      continue;
    }
    if (got_nulls != nulls || got_bytes != bytes)
      VFAULT("genes column '%s': %lld NULLs in %lld bytes, genes_columns says %lld in %lld", name, (long long)got_nulls,
             (long long)got_bytes, (long long)nulls, (long long)bytes);
    if (col < 3) ok_fixed++;
  }
  sqlite3_finalize(cs);
  sqlite3_finalize(bs);
  int64_t stored = 0;
  {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM genes_blocks", -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      stored = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
  }
  if (stored != all_blocks)
    VFAULT("genes_blocks: %lld rows, of which %lld belong to the columns of genes_columns", (long long)stored,
           (long long)all_blocks);
  if (ok_fixed != 3) {
    if (expect_col < 3) VFAULT("genes_columns lacks name, total_counts or n_cells");
    return -1;
  }
  return n_genes;
}

/* The name of gene id (sqlite3_malloc'd), for messages. */
static char *gene_name(sqlite3 *db, int64_t version, int64_t id) {
  if (version < DC_FORMAT_GENES_MIN) {
    sqlite3_stmt *s = NULL;
    char *r = NULL;
    if (sqlite3_prepare_v2(db, "SELECT name FROM genes WHERE gene_id = ?", -1, &s, NULL) == SQLITE_OK) {
      sqlite3_bind_int64(s, 1, id);
      if (sqlite3_step(s) == SQLITE_ROW) r = sqlite3_mprintf("%s", (const char *)sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    return r;
  }
  return sqlite3_mprintf("gene_id %lld", (long long)id);
}

/* Version 2: every input's tiles (dc_meta.sources first_tile, n_tiles) hold
** exactly its cells, so no tile spans two inputs. */
static void verify_sources(sqlite3 *db, const char *path, int64_t n_tiles, int *faults) {
  sqlite3_stmt *s = NULL, *t = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT json_extract(j.value, '$.file'), json_extract(j.value, '$.first_cell'),"
                         " json_extract(j.value, '$.n_cells'), json_extract(j.value, '$.first_tile'),"
                         " json_extract(j.value, '$.n_tiles') FROM dc_meta m, json_each(m.value) j"
                         " WHERE m.key = 'sources' ORDER BY j.key", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "SELECT min(first_cell), max(first_cell + n_cells), count(*) FROM tiles_data"
                             " WHERE tile >= ?1 AND tile < ?2", -1, &t, NULL) != SQLITE_OK) {
    VFAULT("dc_meta.sources: %s", sqlite3_errmsg(db));
    sqlite3_finalize(s);
    return;
  }
  int64_t next_tile = 0, n = 0;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *file = (const char *)sqlite3_column_text(s, 0);
    n++;
    for (int k = 1; k <= 4; k++)
      if (sqlite3_column_type(s, k) != SQLITE_INTEGER) {
        VFAULT("dc_meta.sources[%lld] (%s): first_cell, n_cells, first_tile or n_tiles is missing", (long long)n - 1,
               file ? file : "?");
        goto done;
      }
    int64_t fc = sqlite3_column_int64(s, 1), nc = sqlite3_column_int64(s, 2);
    int64_t ft = sqlite3_column_int64(s, 3), nt = sqlite3_column_int64(s, 4);
    if (ft != next_tile || nt < 0 || (nt == 0) != (nc == 0)) {
      VFAULT("dc_meta.sources[%lld] (%s): tiles %lld..+%lld, expected to start at tile %lld", (long long)n - 1,
             file ? file : "?", (long long)ft, (long long)nt, (long long)next_tile);
      goto done;
    }
    next_tile = ft + nt;
    if (nt > 0) {
      sqlite3_bind_int64(t, 1, ft);
      sqlite3_bind_int64(t, 2, ft + nt);
      if (sqlite3_step(t) == SQLITE_ROW &&
          (sqlite3_column_int64(t, 2) != nt || sqlite3_column_int64(t, 0) != fc || sqlite3_column_int64(t, 1) != fc + nc))
        VFAULT("dc_meta.sources[%lld] (%s): its tiles %lld..%lld do not hold exactly its cells %lld..%lld",
               (long long)n - 1, file ? file : "?", (long long)ft, (long long)(ft + nt - 1), (long long)fc,
               (long long)(fc + nc - 1));
      sqlite3_reset(t);
    }
  }
  if (rc != SQLITE_DONE) VFAULT("dc_meta.sources: %s", sqlite3_errmsg(db));
  else if (n == 0) VFAULT("dc_meta.sources lists no input");
  else if (next_tile != n_tiles) VFAULT("dc_meta.sources covers %lld tiles, the dataset has %lld", (long long)next_tile, (long long)n_tiles);
done:
  sqlite3_finalize(s);
  sqlite3_finalize(t);
}
#undef VFAULT

int cv_verify(const char *path, int quiet, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  if (open_ro(path, &db, &version, e)) return -1;
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
  int64_t *gtc = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *gtc);
  int64_t *gcc = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *gcc);
  if (!gtc || !gcc) { free(gtc); free(gcc); cv_fail(e, "out of memory"); goto done; }
  int64_t ng = version >= DC_FORMAT_GENES_MIN ? verify_genes_v2(db, path, n_genes, odec, gtc, gcc, &faults)
                                              : verify_genes_v1(db, path, n_genes, gtc, gcc, &faults);
  if (ng >= 0) {
    for (int64_t id = 0; id < ng && id < n_genes; id++) {
      if ((uint64_t)gtc[id] != tot[id] || (uint64_t)gcc[id] != ncl[id]) {
        char *nm = gene_name(db, version, id);
        FAULT("genes: gene %lld '%s': total_counts %lld / n_cells %lld, but the tiles hold %llu / %llu", (long long)id,
              nm ? nm : "?", (long long)gtc[id], (long long)gcc[id], (unsigned long long)tot[id],
              (unsigned long long)ncl[id]);
        sqlite3_free(nm);
      }
      if (id > 0 && gtc[id] > gtc[id - 1])
        FAULT("genes: gene %lld has more counts than gene %lld", (long long)id, (long long)id - 1);
    }
    if (ng != n_genes) FAULT("genes: %lld rows, dc_meta says %lld", (long long)ng, (long long)n_genes);
  }
  free(gtc);
  free(gcc);
  if (version >= DC_FORMAT_GENES_MIN) verify_sources(db, path, n_tiles, &faults);
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
