/*
** inspect.c — `info`, `obs info` and `verify` on a dataset (read only).
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
#include "dc_obs.h"
#include "dc_seal.h"

static int open_ro(const char *path, sqlite3 **db, int64_t *version, cv_err *e) {
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
#define VERIFY_SHOW 20   /* faults printed; the rest are counted */

/* Where verify's faults go: one line each (the first VERIFY_SHOW), then a count. */
typedef struct vrep {
  const char *path;
  int json;
  int64_t n;                  /* faults found */
  char *msg[VERIFY_SHOW];     /* the first ones (sqlite3_malloc'd) */
  int sealed;                 /* format version >= 3 with a good dataset_id */
  uint64_t dataset_id;
} vrep;

static void vfault(vrep *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (r->n < VERIFY_SHOW) {
    r->msg[r->n] = m;
    if (!r->json) fprintf(stderr, "verify: %s: %s\n", r->path, m ? m : "(out of memory)");
  } else {
    sqlite3_free(m);
  }
  r->n++;
}
#define VFAULT(...) vfault(rep, __VA_ARGS__)

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Version 1: the plain genes table.  Returns the rows read, or -1. */
static int64_t verify_genes_v1(sqlite3 *db, vrep *rep, int64_t n_genes, int64_t *tc, int64_t *cc) {
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
static int64_t verify_genes_v2(sqlite3 *db, vrep *rep, int64_t n_genes, dc_obs_decoder *odec, int64_t *tc,
                               int64_t *cc, int64_t *dup_names) {
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
  int64_t named = q_int(db, "SELECT coalesce(sum(n_genes), 0) FROM genes_blocks WHERE col = 0", -1);
  if (named != n_genes) {
    VFAULT("dc_meta.n_genes says %lld, the genes table's blocks of names hold %lld genes", (long long)n_genes, (long long)named);
    return -1;
  }
  sqlite3_stmt *cs = NULL, *bs = NULL;
  if (sqlite3_prepare_v2(db, "SELECT col, name, kind, null_count, bytes FROM genes_columns ORDER BY col", -1, &cs, NULL) !=
          SQLITE_OK ||
      sqlite3_prepare_v2(db, rep->sealed ? "SELECT col, block, first_gene, n_genes, data, checksum FROM genes_blocks"
                                           " WHERE id >= ?1 AND id < ?2 ORDER BY id"
                                         : "SELECT col, block, first_gene, n_genes, data FROM genes_blocks"
                                           " WHERE id >= ?1 AND id < ?2 ORDER BY id", -1, &bs, NULL) != SQLITE_OK) {
    VFAULT("genes: %s", sqlite3_errmsg(db));
    sqlite3_finalize(cs);
    return -1;
  }
  int64_t expect_col = 0, all_blocks = 0;
  char **names = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *names);
  if (!names) { VFAULT("out of memory"); sqlite3_finalize(cs); sqlite3_finalize(bs); return -1; }
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
      const uint8_t *data = sqlite3_column_blob(bs, 4);
      int len = sqlite3_column_bytes(bs, 4);
      if (rep->sealed) {
        dc_blockplace pl = {"genes", col, name, kind, -1, bl, first, cnt, -1};
        int64_t seal = 0;
        if (dc_seal_block(rep->dataset_id, &pl, NULL, NULL, NULL, (uint64_t)len, data, &seal) ||
            sqlite3_column_type(bs, 5) != SQLITE_INTEGER || sqlite3_column_int64(bs, 5) != seal) {
          VFAULT("genes column '%s' block %lld: checksum mismatch: its data and its place (genes %lld..%lld of column "
                 "%lld) were not written together (moved, swapped, copied or edited)", name, (long long)bl,
                 (long long)first, (long long)(first + cnt - 1), (long long)col);
          bad = 1;
          break;
        }
      }
      if (dc_obs_decode(odec, data, (size_t)len, &ex, &blk, &de) != DC_OK) {
        VFAULT("genes column '%s' block %lld: %s", name, (long long)bl, de.msg);
        bad = 1;
        break;
      }
      if (col == 0 && blk.null_count) {
        VFAULT("genes column 'name' block %lld: %u NULL names", (long long)bl, blk.null_count);
        bad = 1;
      }
      if (col == 0 && !bad) {
        for (int64_t i = 0; i < cnt; i++) {
          free(names[next + i]);
          names[next + i] = strndup(blk.text + blk.text_off[i], (size_t)(blk.text_off[i + 1] - blk.text_off[i]));
        }
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
  /* gene names are the key of gene panels (dc_batch, CellDataset(genes=)): count those that
  ** occur more than once (legitimate, but a panel cannot name them) */
  int64_t have = 0;
  for (int64_t i = 0; i < n_genes; i++) if (names[i]) names[have++] = names[i];
  qsort(names, (size_t)have, sizeof *names, cmp_str);
  *dup_names = 0;
  for (int64_t i = 1; i < have; i++)
    if (!strcmp(names[i], names[i - 1]) && (i == 1 || strcmp(names[i - 1], names[i - 2]))) (*dup_names)++;
  for (int64_t i = 0; i < have; i++) free(names[i]);
  free(names);
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
static void verify_sources(sqlite3 *db, vrep *rep, int64_t n_tiles) {
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
static int val_eq(const dc_sealval *a, const dc_sealval *b) {
  if (a->type != b->type) return 0;
  switch (a->type) {
    case DC_SV_INT: return a->i == b->i;
    case DC_SV_REAL: return a->f == b->f;
    case DC_SV_TEXT: case DC_SV_BLOB: return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
    default: return 1;
  }
}

/* The statistics of a decoded block, recomputed (dc_obs_stats_compute). */
static int block_stats(const dc_obs_block *b, uint32_t n_categories, dc_obs_stats *st, dc_error *de) {
  dc_obs_values v;
  memset(&v, 0, sizeof v);
  v.kind = b->kind;
  v.n = b->n;
  int8_t *b8 = NULL;
  const char **txt = NULL;
  uint32_t *tl = NULL;
  switch (b->kind) {
    case DC_OBS_CATEGORY: v.codes = b->codes; v.n_categories = n_categories; break;
    case DC_OBS_INT: v.i64 = b->i64; v.valid = b->valid; break;
    case DC_OBS_REAL: v.f64 = b->f64; break;
    case DC_OBS_BOOL:
      b8 = malloc(b->n ? b->n : 1);
      if (!b8) return DC_ENOMEM;
      for (uint32_t i = 0; i < b->n; i++) b8[i] = b->valid[i] ? (int8_t)(b->i64[i] != 0) : -1;
      v.b8 = b8;
      break;
    case DC_OBS_TEXT:
      txt = malloc((b->n ? b->n : 1) * sizeof *txt);
      tl = malloc((b->n ? b->n : 1) * sizeof *tl);
      if (!txt || !tl) { free(txt); free(tl); return DC_ENOMEM; }
      for (uint32_t i = 0; i < b->n; i++) {
        txt[i] = b->valid[i] ? b->text + b->text_off[i] : NULL;
        tl[i] = (uint32_t)(b->text_off[i + 1] - b->text_off[i]);
      }
      v.text = txt;
      v.text_len = tl;
      break;
  }
  memset(st, 0, sizeof *st);
  int r = dc_obs_stats_compute(&v, st, de);
  free(b8);
  free(txt);
  free(tl);
  return r;
}

typedef struct vcol {
  int64_t col;
  char *name;
  int kind;
  int64_t n_categories;       /* -1 unless category */
  int64_t null_count, bytes;  /* as cells_columns says */
  int64_t got_nulls, got_bytes, got_cells, next_block;
  int bad;
} vcol;

/* cells_columns, cells_dict and cells_blocks: every row the cells table reads. */
static int64_t verify_obs(sqlite3 *db, vrep *rep, int64_t n_cells, dc_obs_decoder *odec) {
  int64_t obs_block = meta_int(db, "obs_block_cells"), n_blocks = 0;
  if (obs_block < 1 || obs_block > (int64_t)DC_OBS_MAX_N) {
    VFAULT("dc_meta.obs_block_cells is missing or impossible (%lld)", (long long)obs_block);
    return 0;
  }
  vcol *cols = NULL;
  int nc = 0, cap = 0;
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, rep->sealed ? "SELECT col, name, kind, n_categories, null_count, bytes, checksum FROM cells_columns ORDER BY col"
                                         : "SELECT col, name, kind, n_categories, null_count, bytes FROM cells_columns ORDER BY col",
                         -1, &s, NULL) != SQLITE_OK) {
    VFAULT("cells_columns: %s", sqlite3_errmsg(db));
    return 0;
  }
  while (sqlite3_step(s) == SQLITE_ROW) {
    if (nc == cap) {
      cap = cap ? cap * 2 : 16;
      vcol *q = realloc(cols, (size_t)cap * sizeof *q);
      if (!q) { VFAULT("out of memory"); goto done; }
      cols = q;
    }
    vcol *c = &cols[nc];
    memset(c, 0, sizeof *c);
    c->col = sqlite3_column_int64(s, 0);
    const char *nm = (const char *)sqlite3_column_text(s, 1), *kd = (const char *)sqlite3_column_text(s, 2);
    c->name = strdup(nm ? nm : "?");
    c->kind = kd ? dc_obs_kind_from_name(kd) : 0;
    c->n_categories = sqlite3_column_type(s, 3) == SQLITE_INTEGER ? sqlite3_column_int64(s, 3) : -1;
    c->null_count = sqlite3_column_int64(s, 4);
    c->bytes = sqlite3_column_int64(s, 5);
    nc++;
    if (!c->name) { VFAULT("out of memory"); goto done; }
    if (c->col != nc - 1) { VFAULT("cells_columns: col %lld where %d is expected (a row is missing)", (long long)c->col, nc - 1); c->bad = 1; }
    if (!c->kind) { VFAULT("obs column '%s': kind '%s' is not category, int, real, bool or text", c->name, kd ? kd : "NULL"); c->bad = 1; }
    if (nc == 1 && (strcmp(c->name, "_index") || c->kind != DC_OBS_TEXT)) VFAULT("cells_columns: col 0 is not the text column '_index'");
    if ((c->kind == DC_OBS_CATEGORY) != (c->n_categories >= 0) || c->n_categories > (int64_t)DC_OBS_MAX_CATEGORIES) {
      VFAULT("obs column '%s': n_categories %lld does not fit its kind", c->name, (long long)c->n_categories);
      c->bad = 1;
    }
    if (c->bad || c->kind != DC_OBS_CATEGORY) {
      if (rep->sealed && c->kind != DC_OBS_CATEGORY && sqlite3_column_type(s, 6) != SQLITE_INTEGER)
        VFAULT("obs column '%s': cells_columns has no checksum", c->name);
      continue;
    }
    /* the dictionary: codes 0 .. n_categories-1, distinct text values, sealed with the column */
    sqlite3_stmt *d = NULL;
    if (sqlite3_prepare_v2(db, "SELECT code, value FROM cells_dict WHERE col = ?1 ORDER BY code", -1, &d, NULL) != SQLITE_OK) {
      VFAULT("cells_dict: %s", sqlite3_errmsg(db));
      continue;
    }
    sqlite3_bind_int64(d, 1, c->col);
    dc_seal ds = {NULL};
    dc_blockplace pl = {"cells", c->col, c->name, c->kind, c->n_categories, 0, 0, 0, 0};
    if (rep->sealed) dc_seal_dict_begin(&ds, rep->dataset_id, &pl);
    int64_t code = 0;
    while (sqlite3_step(d) == SQLITE_ROW) {
      if (sqlite3_column_int64(d, 0) != code || sqlite3_column_type(d, 1) != SQLITE_TEXT) {
        VFAULT("obs column '%s': dictionary code %lld where %lld is expected, or its value is not text", c->name,
               (long long)sqlite3_column_int64(d, 0), (long long)code);
        c->bad = 1;
        break;
      }
      const unsigned char *z = sqlite3_column_text(d, 1);
      int zn = sqlite3_column_bytes(d, 1);
      if (rep->sealed) dc_seal_bytes(&ds, z, (size_t)zn);
      c->got_bytes += zn;
      code++;
    }
    sqlite3_finalize(d);
    int64_t got = 0;
    int ended = ds.st ? dc_seal_end(&ds, &got) : -1;
    if (c->bad) continue;
    if (code != c->n_categories) {
      VFAULT("obs column '%s': the dictionary has %lld values, cells_columns says %lld", c->name, (long long)code,
             (long long)c->n_categories);
      c->bad = 1;
      continue;
    }
    int64_t distinct = -1;
    {
      char q[128];
      snprintf(q, sizeof q, "SELECT count(DISTINCT value) FROM cells_dict WHERE col = %lld", (long long)c->col);
      distinct = q_int(db, q, -1);
    }
    if (distinct != code) {
      VFAULT("obs column '%s': the dictionary's %lld values are not distinct", c->name, (long long)code);
      c->bad = 1;
    }
    if (rep->sealed && (ended || sqlite3_column_type(s, 6) != SQLITE_INTEGER || sqlite3_column_int64(s, 6) != got)) {
      VFAULT("obs column '%s': checksum mismatch: its dictionary (%lld values in cells_dict) or its cells_columns row "
             "was changed", c->name, (long long)code);
      c->bad = 1;
    }
  }
  sqlite3_finalize(s);
  s = NULL;
  if (nc == 0) VFAULT("cells_columns is empty (col 0, '_index', is required)");
  {
    int64_t stray = q_int(db, "SELECT count(*) FROM cells_dict WHERE col NOT IN (SELECT col FROM cells_columns"
                              " WHERE kind = 'category')", -1);
    if (stray != 0) VFAULT("cells_dict: %lld rows belong to no category column of cells_columns", (long long)stray);
  }

  if (sqlite3_prepare_v2(db, rep->sealed
                                 ? "SELECT id, col, block, first_cell, n_cells, null_count, min, max, present, data, checksum"
                                   " FROM cells_blocks ORDER BY col, block"
                                 : "SELECT id, col, block, first_cell, n_cells, null_count, min, max, present, data"
                                   " FROM cells_blocks ORDER BY col, block", -1, &s, NULL) != SQLITE_OK) {
    VFAULT("cells_blocks: %s", sqlite3_errmsg(db));
    goto done;
  }
  int64_t stray_col = -1;
  while (sqlite3_step(s) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(s, 0), col = sqlite3_column_int64(s, 1), bl = sqlite3_column_int64(s, 2);
    int64_t first = sqlite3_column_int64(s, 3), n = sqlite3_column_int64(s, 4), nulls = sqlite3_column_int64(s, 5);
    n_blocks++;
    vcol *c = NULL;
    for (int k = 0; k < nc; k++) if (cols[k].col == col) c = &cols[k];
    if (!c) {
      if (col != stray_col) VFAULT("cells_blocks: blocks of column %lld, which cells_columns lacks", (long long)col);
      stray_col = col;
      continue;
    }
    if (c->bad) continue;
    if (id != (int64_t)((uint64_t)col << 32 | (uint64_t)bl) || bl != c->next_block || first != bl * obs_block ||
        n < 1 || n > obs_block || first + n > n_cells || nulls < 0 || nulls > n) {
      VFAULT("obs column '%s' block %lld: id %lld, first_cell %lld, n_cells %lld, null_count %lld; expected block %lld "
             "(id col*2^32+block) of cells %lld..", c->name, (long long)bl, (long long)id, (long long)first, (long long)n,
             (long long)nulls, (long long)c->next_block, (long long)(c->next_block * obs_block));
      c->bad = 1;
      continue;
    }
    c->next_block++;
    const uint8_t *data = sqlite3_column_blob(s, 9);
    int len = sqlite3_column_bytes(s, 9);
    dc_sealval mn = cv_sealval_of_column(s, 6), mx = cv_sealval_of_column(s, 7), pr = cv_sealval_of_column(s, 8);
    if (rep->sealed) {
      dc_blockplace pl = {"cells", c->col, c->name, c->kind, c->n_categories, bl, first, n, nulls};
      int64_t seal = 0;
      if (dc_seal_block(rep->dataset_id, &pl, &mn, &mx, &pr, (uint64_t)len, data, &seal) ||
          sqlite3_column_type(s, 10) != SQLITE_INTEGER || sqlite3_column_int64(s, 10) != seal) {
        VFAULT("obs column '%s' block %lld: checksum mismatch: its data, its statistics (null count, min, max, present) "
               "and its place (column %lld, cells %lld..%lld) were not written together (moved, swapped, copied or "
               "edited)", c->name, (long long)bl, (long long)c->col, (long long)first, (long long)(first + n - 1));
        c->bad = 1;
        continue;
      }
    }
    dc_obs_expect ex = {c->kind, (uint32_t)n, c->n_categories > 0 ? (uint32_t)c->n_categories : 0};
    dc_obs_block blk;
    dc_error de;
    memset(&de, 0, sizeof de);
    if (dc_obs_decode(odec, data, (size_t)len, &ex, &blk, &de) != DC_OK) {
      VFAULT("obs column '%s' block %lld: %s", c->name, (long long)bl, de.msg);
      c->bad = 1;
      continue;
    }
    if (c->kind == DC_OBS_CATEGORY && c->n_categories == 0 && blk.null_count != blk.n) {
      VFAULT("obs column '%s' block %lld: codes without categories", c->name, (long long)bl);
      c->bad = 1;
      continue;
    }
    /* the statistics the cells table prunes with, recomputed from the values */
    dc_obs_stats st;
    memset(&de, 0, sizeof de);
    int sr = block_stats(&blk, (uint32_t)(c->n_categories > 0 ? c->n_categories : 0), &st, &de);
    if (sr != DC_OK) {
      VFAULT("obs column '%s' block %lld: statistics: %s", c->name, (long long)bl, de.msg[0] ? de.msg : dc_strerror(sr));
      dc_obs_stats_clear(&st);
      c->bad = 1;
      continue;
    }
    dc_sealval smn = cv_sealval_of_stat(c->kind, &st, 0), smx = cv_sealval_of_stat(c->kind, &st, 1), spr;
    memset(&spr, 0, sizeof spr);
    if (st.present) { spr.type = DC_SV_BLOB; spr.p = st.present; spr.n = st.present_len; }
    const char *what = (int64_t)st.null_count != nulls ? "null_count" : !val_eq(&mn, &smn) ? "min"
                     : !val_eq(&mx, &smx) ? "max" : !val_eq(&pr, &spr) ? "present" : NULL;
    if (what) {
      VFAULT("obs column '%s' block %lld: cells_blocks.%s disagrees with the block's values", c->name, (long long)bl, what);
      c->bad = 1;
    }
    dc_obs_stats_clear(&st);
    c->got_nulls += nulls;
    c->got_bytes += len + (pr.type == DC_SV_BLOB ? (int64_t)pr.n : 0);
    c->got_cells += n;
  }
  sqlite3_finalize(s);
  s = NULL;
  for (int k = 0; k < nc; k++) {
    vcol *c = &cols[k];
    if (c->bad) continue;
    if (c->got_cells != n_cells)
      VFAULT("obs column '%s': its blocks hold %lld cells, dc_meta says %lld", c->name, (long long)c->got_cells, (long long)n_cells);
    else if (c->got_nulls != c->null_count || c->got_bytes != c->bytes)
      VFAULT("obs column '%s': %lld NULLs in %lld bytes, cells_columns says %lld in %lld", c->name, (long long)c->got_nulls,
             (long long)c->got_bytes, (long long)c->null_count, (long long)c->bytes);
  }
done:
  sqlite3_finalize(s);
  for (int k = 0; k < nc; k++) free(cols[k].name);
  free(cols);
  return n_blocks;
}

/* The tables every query relies on, by format version. */
static void verify_schema(sqlite3 *db, vrep *rep, int64_t version, int *have_tiles) {
  static const char *const plain[] = {"dc_meta", "tiles_data", "cells_columns", "cells_dict", "cells_blocks", NULL};
  static const char *const v2[] = {"genes_columns", "genes_blocks", NULL};
  static const char *const virt[] = {"cells", "tiles", "expression", "expression_long", "dc_batch", NULL};
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "SELECT type, sql FROM sqlite_schema WHERE name = ?1", -1, &s, NULL) != SQLITE_OK) {
    VFAULT("sqlite_schema: %s", sqlite3_errmsg(db));
    return;
  }
  for (int pass = 0; pass < 4; pass++) {
    const char *const *list = pass == 0 ? plain : pass == 1 ? (version >= DC_FORMAT_GENES_MIN ? v2 : NULL) : pass == 2 ? virt : NULL;
    if (pass == 3) {
      static const char *const genes[] = {"genes", NULL};
      list = genes;
    }
    for (int i = 0; list && list[i]; i++) {
      sqlite3_bind_text(s, 1, list[i], -1, SQLITE_STATIC);
      int found = sqlite3_step(s) == SQLITE_ROW;
      const char *sql = found ? (const char *)sqlite3_column_text(s, 1) : NULL;
      int is_virtual = sql && strstr(sql, "VIRTUAL") != NULL;
      int want_virtual = pass == 2 || (pass == 3 && version >= DC_FORMAT_GENES_MIN);
      if (!found) VFAULT("table %s is missing (dropped?): the dataset's queries need it", list[i]);
      else if (is_virtual != want_virtual)
        VFAULT("table %s is %s, expected %s", list[i], is_virtual ? "a virtual table" : "a plain table",
               want_virtual ? "a virtual table" : "a plain table");
      if (!found && !strcmp(list[i], "tiles_data")) *have_tiles = 0;
      sqlite3_reset(s);
    }
  }
  sqlite3_finalize(s);
}

/* The extension, compiled into the converter with -DSQLITE_CORE. */
int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

/* Runs the queries a user runs, through the extension's own tables. */
static void verify_queries(sqlite3 *db, vrep *rep, int64_t n_tiles) {
  char *msg = NULL;
  if (sqlite3_deltacells_init(db, &msg, NULL) != SQLITE_OK) {
    VFAULT("loading the extension: %s", msg ? msg : "failed");
    sqlite3_free(msg);
    return;
  }
  sqlite3_free(msg);
  /* dc_batch over the first and the last cell of every tile */
  sqlite3_str *ids = sqlite3_str_new(db);
  int64_t n_ids = 0;
  sqlite3_stmt *t = NULL;
  sqlite3_str_appendchar(ids, 1, '[');
  if (sqlite3_prepare_v2(db, "SELECT first_cell, n_cells FROM tiles_data WHERE n_cells > 0 ORDER BY tile", -1, &t, NULL) == SQLITE_OK) {
    while (sqlite3_step(t) == SQLITE_ROW) {
      int64_t f = sqlite3_column_int64(t, 0), n = sqlite3_column_int64(t, 1);
      sqlite3_str_appendf(ids, "%s%lld", n_ids ? "," : "", (long long)f);
      n_ids++;
      if (n > 1) { sqlite3_str_appendf(ids, ",%lld", (long long)(f + n - 1)); n_ids++; }
    }
  }
  sqlite3_finalize(t);
  sqlite3_str_appendchar(ids, 1, ']');
  char *json = sqlite3_str_finish(ids);
  static const char *const queries[] = {"SELECT * FROM cells", "SELECT * FROM genes", "SELECT * FROM tiles",
                                        "SELECT n_cells FROM dc_batch(?1)", NULL};
  for (int i = 0; queries[i]; i++) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, queries[i], -1, &s, NULL);
    int64_t rows = 0, batch = -1;
    if (rc == SQLITE_OK) {
      if (i == 3) sqlite3_bind_text(s, 1, json ? json : "[]", -1, SQLITE_STATIC);
      while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        rows++;
        if (i == 3) batch = sqlite3_column_int64(s, 0);
      }
      if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) VFAULT("the query `%s` fails: %s", queries[i], sqlite3_errmsg(db));
    else if (i == 3 && batch != n_ids)
      VFAULT("the query `%s` over %lld cells returned %lld", queries[i], (long long)n_ids, (long long)batch);
    else if (i == 2 && rows != n_tiles)
      VFAULT("the query `%s` returned %lld rows, dc_meta.n_tiles is %lld", queries[i], (long long)rows, (long long)n_tiles);
    sqlite3_finalize(s);
  }
  sqlite3_free(json);
}

int cv_verify(const char *path, int quiet, int json, cv_err *e) {
  sqlite3 *db = NULL;
  int64_t version = 0;
  if (open_ro(path, &db, &version, e)) return -1;
  vrep rr, *rep = &rr;
  memset(rep, 0, sizeof *rep);
  rep->path = path;
  rep->json = json;
  int have_tiles = 1;
  verify_schema(db, rep, version, &have_tiles);
  /* the seals' key */
  if (version >= DC_FORMAT_SEALED) {
    char *id = meta_text(db, "dataset_id");
    if (!id || dc_seal_parse_id(id, strlen(id), &rep->dataset_id) != 0)
      VFAULT("dc_meta.dataset_id is missing or not 16 hex digits (format version %lld): the checksums cannot be checked",
             (long long)version);
    else rep->sealed = 1;
    free(id);
  }
  /* dc_meta's sizes */
  static const char *const keys[4] = {"n_cells", "n_genes", "nnz", "n_tiles"};
  int64_t mv[4];
  for (int k = 0; k < 4; k++) {
    char q[96];
    snprintf(q, sizeof q, "SELECT CASE typeof(value) WHEN 'integer' THEN value END FROM dc_meta WHERE key = '%s'", keys[k]);
    mv[k] = q_int(db, q, -1);
    if (mv[k] < 0 || (k == 1 && mv[k] > INT32_MAX)) VFAULT("dc_meta.%s is missing, not an integer or impossible", keys[k]);
  }
  int64_t n_cells = mv[0], n_genes = mv[1], nnz_meta = mv[2], n_tiles_meta = mv[3];
  dc_decoder *dec = dc_decoder_new();
  /* the chunks of each tile are decoded on every core (the blob is plain bytes by then) */
  dc_pool *pool = dc_pool_new(0);
  dc_job *jobs = malloc(DC_MAX_CHUNKS * sizeof *jobs);
  dc_obs_decoder *odec = dc_obs_decoder_new();
  uint64_t *tot = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *tot);
  uint64_t *ncl = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *ncl);
  dc_tile_hdr *h = malloc(sizeof *h);
  int64_t *ip = NULL;
  int32_t *ix = NULL, *vx = NULL;
  size_t cap_c = 0, cap_n = 0;
  sqlite3_stmt *s = NULL;
  int64_t expect_first = 0, nnz_sum = 0, n_tiles = 0, n_blocks = 0, dup_names = 0;
  int64_t faults_before_tiles = rep->n, tile_genes = -1, max_tile_genes = -1;
  int genes_bad = 0;
  if (!dec || !odec || !tot || !ncl || !h || !jobs) { cv_fail(e, "out of memory"); goto done; }
  if (have_tiles &&
      sqlite3_prepare_v2(db, rep->sealed ? "SELECT tile, first_cell, n_cells, nnz, chunks, data, checksum FROM tiles_data ORDER BY tile"
                                         : "SELECT tile, first_cell, n_cells, nnz, chunks, data FROM tiles_data ORDER BY tile",
                         -1, &s, NULL) != SQLITE_OK) {
    VFAULT("tiles_data: %s", sqlite3_errmsg(db));
    have_tiles = 0;
  }
  int rc = SQLITE_DONE;
  while (have_tiles && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t t = sqlite3_column_int64(s, 0), fc = sqlite3_column_int64(s, 1), nc = sqlite3_column_int64(s, 2);
    int64_t nz = sqlite3_column_int64(s, 3), ch = sqlite3_column_int64(s, 4);
    const uint8_t *blob = sqlite3_column_blob(s, 5);
    size_t len = (size_t)sqlite3_column_bytes(s, 5);
    n_tiles++;
    if (t != n_tiles - 1) VFAULT("tile %lld: tiles are not numbered 0, 1, 2, ... (expected %lld)", (long long)t, (long long)n_tiles - 1);
    if (fc != expect_first)
      VFAULT("tile %lld: first_cell %lld, expected %lld (tiles must cover every cell once, in order)", (long long)t,
             (long long)fc, (long long)expect_first);
    if (nc < 0 || nc > UINT32_MAX || nz < 0 || ch < 0 || ch > DC_MAX_CHUNKS) {
      VFAULT("tile %lld: impossible n_cells %lld, nnz %lld or chunks %lld", (long long)t, (long long)nc, (long long)nz, (long long)ch);
      expect_first = fc + (nc > 0 ? nc : 0);
      continue;
    }
    expect_first = fc + nc;
    nnz_sum += nz;
    dc_error de;
    memset(&de, 0, sizeof de);
    if (dc_tile_parse(blob, len, h, &de) != DC_OK) { VFAULT("tile %lld: %s", (long long)t, de.msg); continue; }
    if (rep->sealed) {
      int64_t seal = 0;
      if (dc_seal_tile(rep->dataset_id, t, fc, nc, nz, ch, len, blob, (size_t)h->hdr_len, &seal) ||
          sqlite3_column_type(s, 6) != SQLITE_INTEGER || sqlite3_column_int64(s, 6) != seal) {
        VFAULT("tile %lld: checksum mismatch: its blob and tiles_data row (cells %lld..%lld, %lld nonzeros) were not "
               "written together for tile %lld of this dataset (moved, swapped, copied or edited)", (long long)t,
               (long long)fc, (long long)(fc + nc - 1), (long long)nz, (long long)t);
        continue;
      }
    }
    if ((int64_t)h->n_cells != nc || (int64_t)h->nnz != nz || (int64_t)h->n_chunks != ch) {
      VFAULT("tile %lld: header (%u cells, %llu nonzeros, %u chunks, %u genes) disagrees with tiles_data "
             "(%lld, %lld, %lld)", (long long)t, h->n_cells, (unsigned long long)h->nnz,
             h->n_chunks, h->n_genes, (long long)nc, (long long)nz, (long long)ch);
      continue;
    }
    /* a tile holds genes 0 .. its n_genes-1: all of them, or, written before an append
    ** added genes, fewer (the extension's rule: at most dc_meta.n_genes) */
    if (n_genes >= 0 && (int64_t)h->n_genes > n_genes) {
      if (tile_genes < 0)
        VFAULT("dc_meta.n_genes says %lld, tile %lld is of %u genes", (long long)n_genes, (long long)t, h->n_genes);
      tile_genes = h->n_genes;
      genes_bad = 1;
    }
    if (genes_bad) continue;
    if ((int64_t)h->n_genes > max_tile_genes && h->n_cells > 0) max_tile_genes = h->n_genes;
    if (cv_grow((void **)&ip, &cap_c, (size_t)nc + 1, sizeof *ip, e)) goto done;
    size_t c2 = cap_n;
    if (cv_grow((void **)&ix, &c2, (size_t)nz + 1, sizeof *ix, e)) goto done;
    c2 = cap_n;
    if (cv_grow((void **)&vx, &c2, (size_t)nz + 1, sizeof *vx, e)) goto done;
    cap_n = c2;
    dc_out out = {ip, ix, vx, 0};
    int dec_rc = DC_OK;
    if (h->n_chunks == 0 || !pool) {
      dec_rc = dc_tile_decode(dec, blob, len, &out, &de);
    } else {
      for (uint32_t c = 0; c < h->n_chunks; c++) {
        memset(&jobs[c], 0, sizeof jobs[c]);
        jobs[c].buf = blob; jobs[c].len = len; jobs[c].hdr = h; jobs[c].chunk = c; jobs[c].out = out; jobs[c].rc = -1;
      }
      if ((dec_rc = dc_pool_decode(pool, jobs, h->n_chunks)) != DC_OK)
        for (uint32_t c = 0; c < h->n_chunks; c++)
          if (jobs[c].rc != DC_OK) { de = jobs[c].err; break; }
    }
    if (dec_rc != DC_OK) { VFAULT("tile %lld: %s", (long long)t, de.msg); continue; }
    int bad = 0;
    if (ip[0] != 0 || ip[nc] != nz) bad = 1;
    for (int64_t i = 0; i < nc && !bad; i++) {
      if (ip[i + 1] < ip[i]) { bad = 1; break; }
      for (int64_t k = ip[i]; k < ip[i + 1]; k++) {
        if (ix[k] < 0 || ix[k] >= n_genes || (k > ip[i] && ix[k] <= ix[k - 1]) || vx[k] == 0) {
          VFAULT("tile %lld: cell %lld (dataset cell %lld): bad gene index %d or count %u", (long long)t, (long long)i,
                 (long long)(fc + i), ix[k], (uint32_t)vx[k]);
          bad = 2;
          break;
        }
        tot[ix[k]] += (uint32_t)vx[k];
        ncl[ix[k]]++;
      }
    }
    if (bad == 1) VFAULT("tile %lld: decoded cell offsets are inconsistent", (long long)t);
  }
  if (have_tiles && rc != SQLITE_DONE) VFAULT("reading tiles_data: %s", sqlite3_errmsg(db));
  if (have_tiles && n_genes >= 0 && !genes_bad && max_tile_genes >= 0 && max_tile_genes != n_genes) {
    VFAULT("dc_meta.n_genes says %lld, the tiles are of %lld genes (at most)", (long long)n_genes, (long long)max_tile_genes);
    genes_bad = 1;
  }
  int tiles_decoded = rep->n == faults_before_tiles;
  if (genes_bad) n_genes = -1;   /* said once: nothing to compare the genes with */
  sqlite3_finalize(s);
  s = NULL;
  if (have_tiles) {
    if (n_cells >= 0 && expect_first != n_cells)
      VFAULT("tiles hold %lld cells, dc_meta.n_cells says %lld", (long long)expect_first, (long long)n_cells);
    if (nnz_meta >= 0 && nnz_sum != nnz_meta)
      VFAULT("tiles hold %lld nonzeros, dc_meta.nnz says %lld", (long long)nnz_sum, (long long)nnz_meta);
    if (n_tiles_meta >= 0 && n_tiles != n_tiles_meta)
      VFAULT("tiles_data holds %lld tiles, dc_meta.n_tiles says %lld", (long long)n_tiles, (long long)n_tiles_meta);
  }
  /* genes: totals must match what the tiles hold, and be in decreasing order */
  if (n_genes >= 0) {
    int64_t *gtc = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *gtc);
    int64_t *gcc = calloc((size_t)(n_genes > 0 ? n_genes : 1), sizeof *gcc);
    if (!gtc || !gcc) { free(gtc); free(gcc); cv_fail(e, "out of memory"); goto done; }
    int64_t ng = version >= DC_FORMAT_GENES_MIN ? verify_genes_v2(db, rep, n_genes, odec, gtc, gcc, &dup_names)
                                                : verify_genes_v1(db, rep, n_genes, gtc, gcc);
    if (ng >= 0 && have_tiles && tiles_decoded) {   /* (a tile not decoded leaves nothing to compare) */
      int64_t off = 0, first_off = -1, unordered = 0, first_un = -1;
      for (int64_t id = 0; id < ng && id < n_genes; id++) {
        if ((uint64_t)gtc[id] != tot[id] || (uint64_t)gcc[id] != ncl[id]) { if (!off++) first_off = id; }
        if (id > 0 && gtc[id] > gtc[id - 1]) { if (!unordered++) first_un = id; }
      }
      if (off) {
        char *nm = gene_name(db, version, first_off);
        VFAULT("genes: %lld genes' total_counts / n_cells disagree with the tiles; the first, gene %lld '%s', says %lld / "
               "%lld, the tiles hold %llu / %llu", (long long)off, (long long)first_off, nm ? nm : "?",
               (long long)gtc[first_off], (long long)gcc[first_off], (unsigned long long)tot[first_off],
               (unsigned long long)ncl[first_off]);
        sqlite3_free(nm);
      }
      char *order = meta_text(db, "gene_numbering");   /* 'stable' after append/merge: ids kept, not re-sorted */
      int stable = order && !strcmp(order, "stable");
      free(order);
      if (unordered && !stable)
        VFAULT("genes: %lld genes have more counts than the gene before them (the first: gene %lld); genes are "
               "numbered by decreasing total counts", (long long)unordered, (long long)first_un);
    }
    if (ng >= 0 && ng != n_genes) VFAULT("genes: %lld rows, dc_meta.n_genes says %lld", (long long)ng, (long long)n_genes);
    free(gtc);
    free(gcc);
  }
  if (version >= DC_FORMAT_GENES_MIN && have_tiles) verify_sources(db, rep, n_tiles);
  n_blocks = verify_obs(db, rep, n_cells, odec);
  /* what the checks above cannot see, the extension's own tables will */
  if (rep->n == 0) verify_queries(db, rep, n_tiles);

  if (json) {
    printf("{\"path\":");
    json_esc(stdout, path);
    printf(",\"ok\":%s,\"faults\":%lld,\"messages\":[", rep->n ? "false" : "true", (long long)rep->n);
    for (int64_t i = 0; i < rep->n && i < VERIFY_SHOW; i++) {
      if (i) putchar(',');
      json_esc(stdout, rep->msg[i] ? rep->msg[i] : "(out of memory)");
    }
    printf("],\"not_shown\":%lld,\"format_version\":%lld,\"sealed\":%s,\"tiles\":%lld,\"cells\":%lld,\"nnz\":%lld,"
           "\"genes\":%lld,\"obs_blocks\":%lld,\"duplicate_gene_names\":%lld}\n",
           (long long)(rep->n > VERIFY_SHOW ? rep->n - VERIFY_SHOW : 0), (long long)version, rep->sealed ? "true" : "false",
           (long long)n_tiles, (long long)n_cells, (long long)nnz_sum, (long long)n_genes, (long long)n_blocks,
           (long long)dup_names);
  } else if (rep->n > VERIFY_SHOW) {
    fprintf(stderr, "verify: %s: ... and %lld more faults (only the first %d are shown)\n", path,
            (long long)(rep->n - VERIFY_SHOW), VERIFY_SHOW);
  }
  if (rep->n) {
    cv_fail(e, "%s: %lld fault%s found", path, (long long)rep->n, rep->n == 1 ? "" : "s");
  } else if (!quiet && !json) {
    printf("%s: ok: %lld tiles (%lld cells, %lld nonzeros) decoded with checksums%s, %lld genes, %lld obs blocks; "
           "every table the queries read checked\n", path, (long long)n_tiles, (long long)n_cells, (long long)nnz_sum,
           rep->sealed ? " and seals" : "", (long long)n_genes, (long long)n_blocks);
    if (dup_names)
      printf("%s: note: %lld gene names occur more than once (kept as distinct genes; a gene panel cannot name them)\n",
             path, (long long)dup_names);
  }
done:
  sqlite3_finalize(s);
  for (int i = 0; i < VERIFY_SHOW; i++) sqlite3_free(rep->msg[i]);
  free(ip); free(ix); free(vx); free(tot); free(ncl); free(h);
  dc_decoder_free(dec);
  dc_pool_free(pool);
  free(jobs);
  dc_obs_decoder_free(odec);
  sqlite3_close(db);
  return rep->n || e->msg[0] ? -1 : 0;
}
#undef VFAULT
