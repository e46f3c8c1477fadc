/*
** test_batch_plan.c — dc_batch's planner and row kernels (ext/batch_plan.c, pure C: compiled
** in here directly): direct runs, distinct chunks, groups under a budget, the output layout,
** and the count/fill kernels with and without a gene panel, on the calling thread and on a
** pool, and the take (rows converted into a caller's arrays), against results written out by
** hand or computed apart.
*/
#include "dctest.h"
#include "dc_testutil.h"
#include "../../ext/batch_plan.c"

/* two tiles of three chunks: chunk (t, c) has n_cells[t][c] cells and nnz[t][c] nonzeros */
static dc_chunk_info info_tab[2][3];
static const dc_chunk_info *info(void *ctx, uint32_t t, uint32_t c) { (void)ctx; return &info_tab[t][c]; }
static int cached_tile1_chunk0(void *ctx, uint32_t t, uint32_t c) { (void)ctx; return t == 1 && c == 0; }

static void setup(void) {
  uint32_t cells[2][3] = {{4, 3, 1}, {2, 5, 4}};
  uint64_t nnz[2][3] = {{40, 0, 7}, {9, 50, 12}};
  memset(info_tab, 0, sizeof info_tab);
  for (int t = 0; t < 2; t++) {
    uint32_t first = 0;
    for (int c = 0; c < 3; c++) {
      info_tab[t][c].first_cell = first;
      info_tab[t][c].n_cells = cells[t][c];
      info_tab[t][c].nnz = nnz[t][c];
      first += cells[t][c];
    }
  }
}

/* cell id -> ref: tile 0 holds cells 0..7, tile 1 cells 8..18 */
static batch_cellref ref_of(int64_t id) {
  batch_cellref r;
  r.tile = id < 8 ? 0 : 1;
  uint32_t rel = (uint32_t)(id - (r.tile ? 8 : 0));
  r.chunk = 0;
  while (r.chunk < 2 && info_tab[r.tile][r.chunk + 1].first_cell <= rel) r.chunk++;
  r.cell = rel - info_tab[r.tile][r.chunk].first_cell;
  return r;
}

static void test_direct(void) {
  setup();
  /* 0..3 = tile 0 chunk 0 whole; 4..6 = chunk 1 (no nonzeros: not direct); 7 (one cell: not);
  ** 8, 9 = tile 1 chunk 0 (cached in the second pass); 10..14 chunk 1 out of order; 15..18 whole */
  int64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 11, 13, 14, 15, 16, 17, 18, 3};
  int64_t n = (int64_t)(sizeof ids / sizeof ids[0]);
  batch_cellref ref[20];
  for (int64_t i = 0; i < n; i++) ref[i] = ref_of(ids[i]);
  DCT_CHECK(ref[19].tile == 0 && ref[19].chunk == 0 && ref[19].cell == 3 && ref[16].chunk == 2 && ref[16].cell == 1);
  for (int pass = 0; pass < 2; pass++) {
    uint8_t direct[20] = {0};
    batch_row rows[20];
    memset(rows, 0, sizeof rows);
    batch_run runs[11];
    size_t nr = batch_find_direct(ids, ref, n, info, NULL, pass ? cached_tile1_chunk0 : NULL, NULL, direct, rows, runs);
    uint8_t want[20] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0};
    if (pass) want[8] = want[9] = 0;
    DCT_CHECKF(!memcmp(direct, want, sizeof want), "pass %d", pass);
    DCT_CHECK(nr == (pass ? 2u : 3u));
    DCT_CHECK(runs[0].tile == 0 && runs[0].chunk == 0 && runs[0].row0 == 0 && rows[0].n_out == -41 && rows[1].n_out == -1);
    DCT_CHECK(runs[nr - 1].tile == 1 && runs[nr - 1].chunk == 2 && runs[nr - 1].row0 == 15 && rows[15].n_out == -13);
    DCT_CHECK(rows[4].n_out == 0 && rows[19].n_out == 0);
    /* 3. the other rows' chunks, sorted and distinct */
    dc_chunkkey keys[20];
    uint32_t rowkey[20];
    size_t nk = batch_chunk_keys(ref, direct, n, keys, rowkey);
    /* pass 0: (0,0) [row 19], (0,1), (0,2), (1,1); pass 1 also (1,0) */
    DCT_CHECK(nk == (pass ? 5u : 4u));
    for (size_t q = 1; q < nk; q++)
      DCT_CHECK(keys[q - 1].tile < keys[q].tile || (keys[q - 1].tile == keys[q].tile && keys[q - 1].chunk < keys[q].chunk));
    for (int64_t i = 0; i < n; i++)
      if (!direct[i]) DCT_CHECK(keys[rowkey[i]].tile == ref[i].tile && keys[rowkey[i]].chunk == ref[i].chunk);
    /* 4. layout: rows not direct get 2 nonzeros each here */
    for (int64_t i = 0; i < n; i++) if (!direct[i]) rows[i].n_out = 2;
    int64_t off[21], indptr[21];
    int64_t total = batch_layout(n, direct, rows, ref, info, NULL, runs, off, indptr);
    int64_t t = 0;
    int64_t want_ptr[21];
    want_ptr[0] = 0;
    size_t qr = 0;
    for (int64_t i = 0; i < n;) {   /* written apart: a run's nonzeros land on its last row */
      if (direct[i]) {
        DCT_CHECK(runs[qr].out_base == t);
        int64_t len = info_tab[ref[i].tile][ref[i].chunk].n_cells;
        for (int64_t k = 1; k < len; k++) want_ptr[i + k] = -7;   /* filled by the decoder */
        t += (int64_t)info_tab[ref[i].tile][ref[i].chunk].nnz;
        want_ptr[i + len] = t;
        i += len;
        qr++;
        continue;
      }
      DCT_CHECK(off[i] == t);
      t += 2;
      want_ptr[++i] = t;
    }
    DCT_CHECK(total == t && qr == nr);
    for (int64_t i = 0; i <= n; i++) if (want_ptr[i] != -7) DCT_CHECKF(indptr[i] == want_ptr[i], "pass %d row %lld", pass, (long long)i);
  }
}

static void test_groups(void) {
  setup();
  /* decoded sizes: 8 * (nnz + n_cells): (0,0) 352, (0,1) 24, (0,2) 64, (1,0) 88, (1,1) 440, (1,2) 128 */
  dc_chunkkey keys[6] = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
  uint32_t group[6];
  DCT_CHECK(batch_groups(keys, 6, NULL, info, NULL, 1 << 20, group) == 1);
  for (int q = 0; q < 6; q++) DCT_CHECK(group[q] == 0);
  /* budget 400: 352+24 | 64+88 (440 would pass 400) | 440 alone (over the budget) | 128 */
  DCT_CHECK(batch_groups(keys, 6, NULL, info, NULL, 400, group) == 4);
  uint32_t want[6] = {0, 0, 1, 1, 2, 3};
  DCT_CHECK(!memcmp(group, want, sizeof want));
  /* held chunks cost nothing: group 0 */
  dc_chunk_data fake;
  dc_chunk_data *held[6] = {NULL, NULL, NULL, NULL, &fake, NULL};
  DCT_CHECK(batch_groups(keys, 6, held, info, NULL, 400, group) == 2);
  uint32_t want2[6] = {0, 0, 1, 1, 0, 1};
  DCT_CHECK(!memcmp(group, want2, sizeof want2));
  DCT_CHECK(batch_groups(keys, 0, NULL, info, NULL, 400, group) == 1);
}

/* rows of random genes (sorted, distinct) and counts; a panel; count and fill against a
** reference computed here */
static void test_kernels(void) {
  enum { ROWS = 300, GENES = 500 };
  static int32_t idx[ROWS][64], val[ROWS][64];
  static batch_row rows[ROWS];
  int32_t map_sorted[GENES], map_shuffled[GENES];
  uint64_t x = 12345;
  for (int g = 0; g < GENES; g++) { map_sorted[g] = -1; map_shuffled[g] = -1; }
  int32_t panel[40];
  for (int j = 0; j < 40; j++) { panel[j] = j * 12 + 3; map_sorted[panel[j]] = j; map_shuffled[panel[j]] = 39 - j; }
  for (int r = 0; r < ROWS; r++) {
    int n = 0;
    for (int g = 0; g < GENES && n < 64; g++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      if ((x >> 33) % 11 == 0) { idx[r][n] = g; val[r][n] = (int32_t)((x >> 20) % 1000); n++; }
    }
    rows[r].idx = idx[r]; rows[r].val = val[r]; rows[r].n_in = (uint32_t)n;
  }
  dc_pool *pool = dc_pool_new(2);
  DCT_CHECK(pool != NULL);
  for (int variant = 0; variant < 6; variant++) {
    const int32_t *map = variant % 3 == 0 ? NULL : variant % 3 == 1 ? map_sorted : map_shuffled;
    dc_pool *p = variant < 3 ? NULL : pool;
    uint64_t which[ROWS];
    size_t nw = 0;
    for (int r = 0; r < ROWS; r += 1 + (variant & 1)) which[nw++] = (uint64_t)r;
    uint64_t bits[(GENES + 63) / 64];
    int64_t size = map ? batch_panel_bits(map, GENES, bits) : 0;
    DCT_CHECK(size == (map ? 40 : 0));
    batch_kernel k = {.rows = rows, .which = which, .n = nw, .map = map, .bits = map ? bits : NULL, .panel_size = size,
                      .n_genes = GENES, .sorted = map != map_shuffled};
    batch_run_kernel(p, &k, BATCH_COUNT);
    DCT_CHECK(k.bad == 0);
    int64_t off[ROWS], total = 0;
    for (size_t j = 0; j < nw; j++) {
      int r = (int)which[j];
      int64_t want = 0;
      for (uint32_t e = 0; e < rows[r].n_in; e++) want += !map || map[idx[r][e]] >= 0;
      DCT_CHECKF(rows[r].n_out == want, "variant %d row %d", variant, r);
      off[r] = total;
      total += rows[r].n_out;
    }
    int32_t *di = malloc((size_t)(total ? total : 1) * 4), *dv = malloc((size_t)(total ? total : 1) * 4);
    k.dst_off = off; k.dst_idx = di; k.dst_val = dv;
    batch_run_kernel(p, &k, BATCH_FILL);
    DCT_CHECK(k.bad == 0);
    for (size_t j = 0; j < nw; j++) {
      int r = (int)which[j];
      /* the row's (mapped gene, count) pairs, sorted by mapped gene */
      int32_t wi[64], wv[64];
      int m = 0;
      for (uint32_t e = 0; e < rows[r].n_in; e++) {
        int32_t pg = map ? map[idx[r][e]] : idx[r][e];
        if (pg < 0) continue;
        int at = m++;
        while (at > 0 && wi[at - 1] > pg) { wi[at] = wi[at - 1]; wv[at] = wv[at - 1]; at--; }
        wi[at] = pg; wv[at] = val[r][e];
      }
      DCT_CHECK(m == rows[r].n_out);
      DCT_CHECKF(!memcmp(di + off[r], wi, (size_t)m * 4) && !memcmp(dv + off[r], wv, (size_t)m * 4), "variant %d row %d", variant, r);
    }
    free(di);
    free(dv);
  }
  /* a gene index out of range is reported, not followed */
  int32_t bad_idx[2] = {3, GENES + 5}, bad_val[2] = {1, 1};
  batch_row br = {bad_idx, bad_val, 2, 0};
  uint64_t bits[(GENES + 63) / 64];
  batch_kernel k = {.rows = &br, .n = 1, .map = map_sorted, .bits = bits, .panel_size = batch_panel_bits(map_sorted, GENES, bits),
                    .n_genes = GENES, .sorted = 1};
  batch_run_kernel(pool, &k, BATCH_COUNT);
  DCT_CHECK(k.bad == 1);
  /* nothing to do */
  batch_kernel none = {.rows = rows, .n_genes = GENES, .sorted = 1};
  batch_run_kernel(pool, &none, BATCH_FILL);
  DCT_CHECK(none.bad == 0);
  dc_pool_free(pool);
}

/* The take: rows (in reverse order, to scattered offsets) copied and converted to every kind,
** on the calling thread and on a pool.  The values are the stored counts, uint32: a few reach
** past int8, uint8, int16 and int32 (up to 2^32-1); a value that does not fit a kind is
** reported at its smallest output position, whichever thread finds it, and the wide kinds
** (float32 rounded, float64, int64, uint32) take every value. */
static void test_take(void) {
  enum { ROWS = 500, W = 37 };
  static uint32_t idx[ROWS][W], val[ROWS][W];
  static batch_row rows[ROWS];
  static int64_t off[ROWS];
  int64_t total = 0;
  for (int r = ROWS - 1; r >= 0; r--) {
    int n = (r * 7) % W;
    for (int e = 0; e < n; e++) {
      idx[r][e] = (uint32_t)(r + e);
      val[r][e] = (uint32_t)((r * 31 + e * 17) % 120);
      if (e == 1 && r % 41 == 3) val[r][e] = r % 2 ? 3000000000u : UINT32_MAX - (uint32_t)r;
      if (e == 2 && r % 23 == 7) val[r][e] = r % 2 ? 40000u : 0x80000000u;
      if (e == 3 && r % 13 == 9) val[r][e] = 200u;
    }
    rows[r] = (batch_row){(const int32_t *)idx[r], (const int32_t *)val[r], (uint32_t)n, n};
    off[r] = total;
    total += n;
  }
  dc_pool *pool = dc_pool_new(2);
  DCT_CHECK(pool != NULL);
  static const size_t size[BATCH_KIND_N] = {4, 4, 2, 1, 1, 8, 8, 4};
  static const uint64_t hi[BATCH_KIND_N] = {INT32_MAX, UINT32_MAX, INT16_MAX, INT8_MAX, UINT8_MAX,
                                            UINT32_MAX, UINT32_MAX, UINT32_MAX};
  int32_t *di = malloc((size_t)total * 4);
  void *dv = malloc((size_t)total * 8);
  for (int kind = 0; kind < BATCH_KIND_N; kind++)
    for (int use = 0; use < 2; use++) {
      memset(di, 0xab, (size_t)total * 4);
      batch_take t = {rows, ROWS, off, di, dv, kind, 0, 0};
      int rc = batch_run_take(use ? pool : NULL, &t);
      int64_t first = INT64_MAX, fv = 0;
      for (int r = 0; r < ROWS; r++)
        for (uint32_t e = 0; e < rows[r].n_in; e++)
          if (val[r][e] > hi[kind] && off[r] + e < first) { first = off[r] + e; fv = val[r][e]; }
      if (first != INT64_MAX) {
        DCT_CHECKF(rc == -1 && t.bad_pos == first && t.bad_val == fv, "kind %d use %d: rc %d pos %lld (want %lld)",
                   kind, use, rc, (long long)t.bad_pos, (long long)first);
        continue;
      }
      DCT_CHECKF(rc == 0, "kind %d use %d", kind, use);
      for (int r = 0; r < ROWS; r++)
        for (uint32_t e = 0; e < rows[r].n_in; e++) {
          int64_t o = off[r] + e, v = val[r][e], got = 0;
          const char *q = (const char *)dv + (size_t)o * size[kind];
          switch (kind) {
            case BATCH_KIND_F32: got = (int64_t)*(const float *)q; v = (int64_t)(float)val[r][e]; break;
            case BATCH_KIND_F64: got = (int64_t)*(const double *)q; break;
            case BATCH_KIND_I64: got = *(const int64_t *)q; break;
            case BATCH_KIND_U32: got = *(const uint32_t *)q; break;
            default: got = -1; break;   /* the narrow kinds all meet a value they cannot hold */
          }
          DCT_CHECKF(got == v && di[o] == (int32_t)idx[r][e], "kind %d use %d row %d", kind, use, r);
        }
    }
  /* the same rows without the values past 255: every kind takes them, int8 only up to 127 */
  for (int r = 0; r < ROWS; r++)
    for (uint32_t e = 0; e < rows[r].n_in; e++)
      if (val[r][e] > 255) val[r][e] = 255;
  for (int kind = 0; kind < BATCH_KIND_N; kind++) {
    batch_take t = {rows, ROWS, off, di, dv, kind, 0, 0};
    int rc = batch_run_take(pool, &t);
    DCT_CHECKF(kind == BATCH_KIND_I8 ? rc == -1 : rc == 0, "kind %d: rc %d", kind, rc);
    for (int r = 0; rc == 0 && r < ROWS; r++)
      for (uint32_t e = 0; e < rows[r].n_in; e++) {
        const char *q = (const char *)dv + (size_t)(off[r] + e) * size[kind];
        int64_t got = 0;
        switch (kind) {
          case BATCH_KIND_I32: got = *(const int32_t *)q; break;
          case BATCH_KIND_F32: got = (int64_t)*(const float *)q; break;
          case BATCH_KIND_I16: got = *(const int16_t *)q; break;
          case BATCH_KIND_U8: got = *(const uint8_t *)q; break;
          case BATCH_KIND_F64: got = (int64_t)*(const double *)q; break;
          case BATCH_KIND_I64: got = *(const int64_t *)q; break;
          case BATCH_KIND_U32: got = *(const uint32_t *)q; break;
        }
        DCT_CHECKF(got == (int64_t)val[r][e], "kind %d row %d", kind, r);
      }
  }
  batch_take bad = {rows, ROWS, off, di, dv, BATCH_KIND_N, 0, 0};
  DCT_CHECK(batch_run_take(pool, &bad) == -2);
  free(di);
  free(dv);
  dc_pool_free(pool);
}

/* placing: rows grouped by chunk in row order, and the first repeated cell found */
static void test_rows_by_key(void) {
  /* rows: (tile, chunk, cell) */
  batch_cellref ref[7] = {{1, 2, 3}, {0, 0, 1}, {1, 2, 0}, {0, 0, 2}, {1, 2, 1}, {0, 2, 0}, {0, 0, 0}};
  dc_chunkkey keys[7];
  uint32_t rowkey[7];
  uint8_t direct[7] = {0};
  size_t nk = batch_chunk_keys(ref, direct, 7, keys, rowkey);
  DCT_CHECK(nk == 3);
  uint64_t row0[4];
  int64_t rows[7];
  DCT_CHECK(batch_rows_by_key(ref, rowkey, 7, nk, row0, rows) == -1);
  uint64_t want0[4] = {0, 3, 4, 7};
  int64_t want[7] = {1, 3, 6, 5, 0, 2, 4};   /* (0,0): rows 1 3 6; (0,2): 5; (1,2): 0 2 4 */
  DCT_CHECK(!memcmp(row0, want0, sizeof want0));
  DCT_CHECK(!memcmp(rows, want, sizeof want));
  /* row 5 asks again for row 1's cell, row 6 for row 0's: the first repeat is row 5 */
  batch_cellref rep[7] = {{1, 2, 3}, {0, 0, 1}, {1, 2, 0}, {0, 0, 2}, {0, 2, 0}, {0, 0, 1}, {1, 2, 3}};
  nk = batch_chunk_keys(rep, direct, 7, keys, rowkey);
  DCT_CHECK(batch_rows_by_key(rep, rowkey, 7, nk, row0, rows) == 5);
  /* no rows */
  DCT_CHECK(batch_rows_by_key(ref, rowkey, 0, 0, row0, rows) == -1 && row0[0] == 0);
}

/* batch_chunk_keys against a plain reference (every key sorted, then made distinct), on many
** rows in random order with some direct rows; batch_rows_by_key's repeat against a scan */
static void test_keys_random(void) {
  uint64_t seed = 12345;
  for (int round = 0; round < 20; round++) {
    int64_t n = 1 + (int64_t)(dct_rng(&seed) % 6000);
    uint32_t tiles = 1 + (uint32_t)(dct_rng(&seed) % 6), chunks = 1 + (uint32_t)(dct_rng(&seed) % 9);
    batch_cellref *ref = malloc((size_t)n * sizeof *ref);
    uint8_t *direct = calloc((size_t)n, 1);
    dc_chunkkey *keys = malloc((size_t)n * sizeof *keys), *want = malloc((size_t)n * sizeof *want);
    uint32_t *rowkey = malloc((size_t)n * sizeof *rowkey);
    int64_t *rows = malloc((size_t)n * sizeof *rows);
    uint64_t *row0 = malloc(((size_t)n + 1) * sizeof *row0);
    for (int64_t i = 0; i < n; i++) {
      ref[i] = (batch_cellref){(uint32_t)(dct_rng(&seed) % tiles), (uint32_t)(dct_rng(&seed) % chunks),
                               (uint32_t)(dct_rng(&seed) % 3000)};
      direct[i] = round % 3 == 0 && dct_rng(&seed) % 4 == 0;
    }
    size_t m = 0;
    for (int64_t i = 0; i < n; i++) if (!direct[i]) want[m++] = (dc_chunkkey){ref[i].tile, ref[i].chunk};
    qsort(want, m, sizeof *want, cmp_key);
    size_t d = 0;
    for (size_t i = 0; i < m; i++) if (d == 0 || cmp_key(&want[d - 1], &want[i])) want[d++] = want[i];
    size_t got = batch_chunk_keys(ref, direct, n, keys, rowkey);
    DCT_CHECKF(got == d, "%zu keys, want %zu", got, d);
    DCT_CHECK(!memcmp(keys, want, d * sizeof *keys));
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
      if (!direct[i]) ok &= rowkey[i] < got && keys[rowkey[i]].tile == ref[i].tile && keys[rowkey[i]].chunk == ref[i].chunk;
    DCT_CHECK(ok);
    if (round % 3 != 0) {            /* no direct rows: the first repeated cell, by a plain scan */
      int64_t first = -1;
      for (int64_t i = 0; i < n && first < 0; i++)
        for (int64_t k = 0; k < i; k++)
          if (ref[k].tile == ref[i].tile && ref[k].chunk == ref[i].chunk && ref[k].cell == ref[i].cell) { first = i; break; }
      DCT_CHECKF(batch_rows_by_key(ref, rowkey, n, got, row0, rows) == first, "round %d", round);
    }
    free(ref); free(direct); free(keys); free(want); free(rowkey); free(rows); free(row0);
  }
}

/* With a panel (no direct runs): rows the glue marked BATCH_ROW_EMPTY (their tile holds none of
** the panel's genes) get no key and an empty place in the layout, between the others' rows. */
static void test_empty_rows(void) {
  setup();
  int64_t ids[] = {9, 2, 15, 0, 17, 9, 5};
  int64_t n = (int64_t)(sizeof ids / sizeof ids[0]);
  batch_cellref ref[7];
  uint8_t direct[7];
  batch_row rows[7];
  memset(rows, 0, sizeof rows);
  for (int64_t i = 0; i < n; i++) {
    ref[i] = ref_of(ids[i]);
    direct[i] = ref[i].tile == 1 ? BATCH_ROW_EMPTY : BATCH_ROW_FETCH;   /* tile 1 skipped */
  }
  dc_chunkkey keys[7];
  uint32_t rowkey[7];
  size_t nk = batch_chunk_keys(ref, direct, n, keys, rowkey);
  /* tile 0 only: (0,0) [cells 2, 0] and (0,1) [cell 5] */
  DCT_CHECK(nk == 2 && keys[0].tile == 0 && keys[0].chunk == 0 && keys[1].tile == 0 && keys[1].chunk == 1);
  DCT_CHECK(rowkey[1] == 0 && rowkey[3] == 0 && rowkey[6] == 1);
  int64_t n_out[7] = {0, 3, 0, 5, 0, 0, 1};
  for (int64_t i = 0; i < n; i++) rows[i].n_out = n_out[i];
  int64_t off[8], indptr[8];
  int64_t total = batch_layout(n, direct, rows, ref, info, NULL, NULL, off, indptr);
  int64_t want_ptr[8] = {0, 0, 3, 3, 8, 8, 8, 9};
  DCT_CHECK(total == 9);
  for (int64_t i = 0; i <= n; i++) DCT_CHECKF(indptr[i] == want_ptr[i], "row %lld", (long long)i);
  for (int64_t i = 0; i < n; i++) DCT_CHECK(off[i] == want_ptr[i]);
}

/* The fill with a panel in another order than the genes' (positions put in order by the insertion
** sort for rows of at most FEW_OUT panel genes, by the scatter for longer ones), and in gene order,
** against a plain reference: random panels of 1 .. all genes, rows of 0 .. all genes, a negative
** index and one past the genes reported by the count. */
static void test_kernels_panels(void) {
  enum { G = 700, R = 60 };
  static int32_t idx[R][G], val[R][G], map[G], di[R * G], dv[R * G], pi[R * G], pv[R * G];
  static uint64_t bits[(G + 63) / 64];
  static batch_row rows[R];
  static int64_t off[R];
  uint64_t x = 99;
#define RND() (x = x * 6364136223846793005ull + 1442695040888963407ull, (uint32_t)(x >> 33))
  dc_pool *pool = dc_pool_new(3);
  for (int trial = 0; trial < 40; trial++) {
    int psize = trial == 0 ? G : trial == 1 ? 1 : 1 + (int)(RND() % G);
    int order[G];
    for (int g = 0; g < G; g++) { order[g] = g; map[g] = -1; }
    for (int g = G - 1; g > 0; g--) { int o = (int)(RND() % (uint32_t)(g + 1)), t = order[g]; order[g] = order[o]; order[o] = t; }
    int sorted = trial % 4 == 3;
    if (sorted) {   /* the chosen genes, positions in gene order */
      int chosen[G] = {0};
      for (int j = 0; j < psize; j++) chosen[order[j]] = 1;
      for (int g = 0, p = 0; g < G; g++) if (chosen[g]) map[g] = p++;
    } else {
      for (int j = 0; j < psize; j++) map[order[j]] = j;
    }
    int64_t size = batch_panel_bits(map, G, bits);
    DCT_CHECK(size == psize);
    for (int g = 0; g < G; g++) DCT_CHECK(((bits[g / 64] >> (g % 64)) & 1) == (map[g] >= 0));
    for (int r = 0; r < R; r++) {
      uint32_t dens = r % 5 == 0 ? 1000 : r % 5 == 1 ? 0 : RND() % 1000;   /* per mille */
      int n = 0;
      for (int g = 0; g < G; g++) if (RND() % 1000 < dens) { idx[r][n] = g; val[r][n] = (int32_t)RND(); n++; }
      rows[r] = (batch_row){idx[r], val[r], (uint32_t)n, 0};
    }
    batch_kernel k = {.rows = rows, .n = R, .map = map, .bits = bits, .panel_size = size, .n_genes = G, .sorted = sorted};
    batch_run_kernel(trial & 1 ? pool : NULL, &k, BATCH_COUNT);
    DCT_CHECK(k.bad == 0);
    int64_t total = 0;
    for (int r = 0; r < R; r++) { off[r] = total; total += rows[r].n_out; }
    k.dst_off = off; k.dst_idx = di; k.dst_val = dv;
    batch_run_kernel(trial & 1 ? pool : NULL, &k, BATCH_FILL);
    DCT_CHECK(k.bad == 0);
    for (int r = 0; r < R; r++) {
      /* the reference: every position of the panel in order, the row's value where it has the gene */
      int64_t o = 0;
      int ok = 1;
      int32_t at[G];
      for (int p = 0; p < psize; p++) at[p] = -1;
      for (uint32_t e = 0; e < rows[r].n_in; e++) if (map[idx[r][e]] >= 0) at[map[idx[r][e]]] = (int32_t)e;
      for (int p = 0; p < psize; p++) {
        if (at[p] < 0) continue;
        ok &= o < rows[r].n_out && di[off[r] + o] == p && dv[off[r] + o] == val[r][at[p]];
        o++;
      }
      DCT_CHECKF(ok && o == rows[r].n_out, "trial %d (panel %d, %s) row %d (%lld of %u genes)", trial, psize,
                 sorted ? "gene order" : "any order", r, (long long)rows[r].n_out, rows[r].n_in);
    }
    /* placing: the rows laid out for their sizes before the panel, each filtered where it lies,
    ** then packed: the same as the fill's output */
    int64_t src[R], cnt[R], at = 0;
    batch_scratch sc = {NULL, NULL};
    static uint8_t member[4 * G];
    k.member_mask = batch_panel_member(map, G, member);
    k.member = member;
    DCT_CHECK(k.member_mask + 1 >= G && k.member_mask < 2 * G && !(k.member_mask & (k.member_mask + 1)));
    for (int r = 0; r < R; r++) {
      src[r] = at;
      memcpy(pi + at, idx[r], rows[r].n_in * sizeof *pi);
      memcpy(pv + at, val[r], rows[r].n_in * sizeof *pv);
      cnt[r] = batch_panel_inplace(&k, pi + at, pv + at, rows[r].n_in, &sc);
      DCT_CHECKF(cnt[r] == rows[r].n_out, "trial %d row %d: %lld in place, %lld counted", trial, r, (long long)cnt[r],
                 (long long)rows[r].n_out);
      at += rows[r].n_in;
    }
    batch_scratch_free(&sc);
    DCT_CHECK(batch_compact(R, src, cnt, pi, pv, sizeof *pv, 0) == total);
    DCT_CHECKF(!memcmp(pi, di, (size_t)total * sizeof *pi) && !memcmp(pv, dv, (size_t)total * sizeof *pv),
               "trial %d: placed and packed rows differ from the fill's", trial);
  }
  /* the compaction moves rows towards the front only */
  {
    int32_t ci[6] = {0, 1, 2, 3, 4, 5}, cv[6] = {10, 11, 12, 13, 14, 15};
    int64_t s2[2] = {0, 3}, n2[2] = {1, 2};
    DCT_CHECK(batch_compact(2, s2, n2, ci, cv, sizeof *cv, 1) == -1);   /* row 0 would move to 1 */
    DCT_CHECK(batch_compact(2, s2, n2, ci, cv, sizeof *cv, 0) == 3);
    DCT_CHECK(ci[0] == 0 && ci[1] == 3 && ci[2] == 4 && cv[0] == 10 && cv[1] == 13 && cv[2] == 14);
    int64_t s3[2] = {0, 1}, n3[2] = {2, 1};
    DCT_CHECK(batch_compact(2, s3, n3, ci, cv, sizeof *cv, 0) == -1);   /* row 1 would move to 2 */
    int64_t s4[1] = {2}, n4[1] = {-1};
    DCT_CHECK(batch_compact(1, s4, n4, ci, cv, sizeof *cv, 0) == -1);
  }
  /* a negative gene index and one past the genes: reported by the count */
  for (int bad = 0; bad < 2; bad++) {
    int32_t bi[3] = {1, bad ? G : -4, 5}, bv[3] = {1, 1, 1};
    batch_row br = {bi, bv, 3, 0};
    batch_kernel k = {.rows = &br, .n = 1, .map = map, .bits = bits, .panel_size = batch_panel_bits(map, G, bits), .n_genes = G};
    batch_run_kernel(NULL, &k, BATCH_COUNT);
    DCT_CHECK(k.bad == 1);
    /* in place: such an index is taken modulo the membership table (no read outside it)
    ** and never kept as itself */
    static uint8_t member[4 * G];
    k.member_mask = batch_panel_member(map, G, member);
    k.member = member;
    batch_scratch sc = {NULL, NULL};
    int64_t m = batch_panel_inplace(&k, bi, bv, 3, &sc);
    batch_scratch_free(&sc);
    DCT_CHECK(m >= 0 && m <= 3);
    for (int64_t e = 0; e < m; e++) DCT_CHECK(bi[e] >= 0 && bi[e] < k.panel_size);
  }
#undef RND
  dc_pool_free(pool);
}

int main(void) {
  DCT_RUN(test_direct);
  DCT_RUN(test_empty_rows);
  DCT_RUN(test_groups);
  DCT_RUN(test_kernels);
  DCT_RUN(test_kernels_panels);
  DCT_RUN(test_take);
  DCT_RUN(test_rows_by_key);
  DCT_RUN(test_keys_random);
  return dct_done();
}
