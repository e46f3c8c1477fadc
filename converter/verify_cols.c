/*
** verify_cols.c — `verify`'s checks of the stored columns (see verify.h): the genes table
** (version 1 plain, version 2 blocks) and every obs column's blocks against their
** statistics, dictionaries and seals.
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

#include "verify.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Version 1: the plain genes table.  Returns the rows read, or -1. */
int64_t cv_verify_genes_v1(sqlite3 *db, vrep *rep, int64_t n_genes, int64_t *tc, int64_t *cc) {
  sqlite3_stmt *s = NULL;
  int64_t ng = 0;
  if (sqlite3_prepare_v2(db, "SELECT gene_id, total_counts, n_cells FROM genes ORDER BY gene_id", -1, &s, NULL) != SQLITE_OK) {
    VFAULT("genes: %s", sqlite3_errmsg(db));
    return -1;
  }
  while (cv_vstep(db, rep, s, "genes")) {
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
int64_t cv_verify_genes_v2(sqlite3 *db, vrep *rep, int64_t n_genes, dc_obs_decoder *odec, int64_t *tc,
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
  int64_t named = cv_q_int(db, "SELECT coalesce(sum(n_genes), 0) FROM genes_blocks WHERE col = 0", -1);
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
  while (cv_vstep(db, rep, cs, "genes_columns")) {
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
    while (cv_vstep(db, rep, bs, "genes_blocks")) {
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
int64_t cv_verify_obs(sqlite3 *db, vrep *rep, int64_t n_cells, dc_obs_decoder *odec) {
  int64_t obs_block = cv_meta_int(db, "obs_block_cells"), n_blocks = 0;
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
  while (cv_vstep(db, rep, s, "cells_columns")) {
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
    while (cv_vstep(db, rep, d, "cells_dict")) {
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
      distinct = cv_q_int(db, q, -1);
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
    int64_t stray = cv_q_int(db, "SELECT count(*) FROM cells_dict WHERE col NOT IN (SELECT col FROM cells_columns"
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
  while (cv_vstep(db, rep, s, "cells_blocks")) {
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
