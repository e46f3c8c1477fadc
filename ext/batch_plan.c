/*
** batch_plan.c — dc_batch's planner and row kernels (see batch_plan.h).  Pure C: no SQLite.
*/
#include "batch_plan.h"

#include <stdlib.h>
#include <string.h>

size_t batch_find_direct(const int64_t *ids, const batch_cellref *ref, int64_t n, batch_info_fn info, void *ictx,
                         batch_cached_fn cached, void *cctx, uint8_t *direct, batch_row *rows, batch_run *runs) {
  size_t n_runs = 0;
  for (int64_t i = 0; i < n;) {
    const dc_chunk_info *ci = info(ictx, ref[i].tile, ref[i].chunk);
    int64_t len = ci->n_cells;
    int ok = ref[i].cell == 0 && i + len <= n && ci->nnz > 0 && len > 1;
    for (int64_t k = 1; ok && k < len; k++) ok = ids[i + k] == ids[i] + k;
    if (ok && cached && cached(cctx, ref[i].tile, ref[i].chunk)) ok = 0;
    if (!ok) { i++; continue; }
    runs[n_runs].tile = ref[i].tile;
    runs[n_runs].chunk = ref[i].chunk;
    runs[n_runs].row0 = (uint64_t)i;
    runs[n_runs].out_base = 0;
    n_runs++;
    memset(direct + i, BATCH_ROW_DIRECT, (size_t)len);
    for (int64_t k = 0; k < len; k++) rows[i + k].n_out = -1;   /* filled by the decoder */
    rows[i].n_out = -1 - (int64_t)ci->nnz;                     /* the run's total, marked */
    i += len;
  }
  return n_runs;
}

static int cmp_key(const void *a, const void *b) {
  const dc_chunkkey *x = a, *y = b;
  if (x->tile != y->tile) return x->tile < y->tile ? -1 : 1;
  return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* The distinct keys of the rows go through a small open-addressing set first, so that only
** they are sorted (a 20,000-cell window has some 16 chunks: sorting every row's key was most of
** a placing call's planning); a row asking for the chunk of the row before it skips the set. */
static uint64_t key64(uint32_t tile, uint32_t chunk) { return (uint64_t)tile << 32 | chunk; }
static size_t key_hash(uint64_t k, size_t mask) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & mask; }

size_t batch_chunk_keys(const batch_cellref *ref, const uint8_t *direct, int64_t n, dc_chunkkey *keys,
                        uint32_t *rowkey) {
  size_t cap = 64;
  while (cap < 2 * (size_t)n && cap < ((size_t)1 << 22)) cap <<= 1;
  uint64_t *set = calloc(cap, sizeof *set);           /* key + 1; 0: empty */
  size_t m = 0;
  if (set) {
    uint64_t last = 0;
    for (int64_t i = 0; i < n; i++) {
      if (direct[i]) continue;
      uint64_t k = key64(ref[i].tile, ref[i].chunk) + 1;
      if (k == last) continue;
      last = k;
      size_t h = key_hash(k, cap - 1), used = 0;
      while (set[h] && set[h] != k && ++used < cap) h = (h + 1) & (cap - 1);
      if (set[h] == k) continue;
      if (used >= cap) { m = SIZE_MAX; break; }      /* full (more distinct keys than cap): sort all */
      set[h] = k;
      keys[m].tile = ref[i].tile;
      keys[m].chunk = ref[i].chunk;
      m++;
    }
    free(set);
  } else {
    m = SIZE_MAX;
  }
  if (m == SIZE_MAX) {                                /* out of memory for the set: every key */
    m = 0;
    for (int64_t i = 0; i < n; i++) {
      if (direct[i]) continue;
      keys[m].tile = ref[i].tile;
      keys[m].chunk = ref[i].chunk;
      m++;
    }
  }
  qsort(keys, m, sizeof *keys, cmp_key);
  size_t d = 0;
  for (size_t i = 0; i < m; i++) if (d == 0 || cmp_key(&keys[d - 1], &keys[i])) keys[d++] = keys[i];
  uint32_t lastk = 0;
  for (int64_t i = 0; i < n; i++) {
    if (direct[i]) continue;
    dc_chunkkey key = {ref[i].tile, ref[i].chunk};
    if (!(d && !cmp_key(&keys[lastk], &key)))
      lastk = (uint32_t)((dc_chunkkey *)bsearch(&key, keys, d, sizeof *keys, cmp_key) - keys);
    rowkey[i] = lastk;
  }
  return d;
}

int64_t batch_rows_by_key(const batch_cellref *ref, const uint32_t *rowkey, int64_t n, size_t n_keys,
                          uint64_t *row0, int64_t *rows) {
  memset(row0, 0, (n_keys + 1) * sizeof *row0);
  for (int64_t i = 0; i < n; i++) if (rowkey[i] != BATCH_NO_KEY) row0[rowkey[i] + 1]++;
  for (size_t q = 0; q < n_keys; q++) row0[q + 1] += row0[q];
  for (int64_t i = 0; i < n; i++)
    if (rowkey[i] != BATCH_NO_KEY) rows[row0[rowkey[i]]++] = i;    /* row0[q] ends at key q's end */
  for (size_t q = n_keys; q > 0; q--) row0[q] = row0[q - 1];
  row0[0] = 0;
  /* repeats: a bitmap of the cells asked for so far, per key (rows in row order) */
  int64_t first = -1;
  uint8_t *seen = NULL;
  size_t seen_cap = 0;
  for (size_t q = 0; q < n_keys; q++) {
    uint64_t a = row0[q], b = row0[q + 1];
    uint32_t top = 0;
    for (uint64_t k = a; k < b; k++) if (ref[rows[k]].cell > top) top = ref[rows[k]].cell;
    size_t need = (size_t)top / 8 + 1;
    if (need > seen_cap) {
      uint8_t *ns = realloc(seen, need);
      if (!ns) { free(seen); return -2; }
      seen = ns;
      seen_cap = need;
    }
    memset(seen, 0, need);
    for (uint64_t k = a; k < b; k++) {
      uint32_t c = ref[rows[k]].cell;
      if (seen[c >> 3] & (1u << (c & 7))) {
        if (first < 0 || rows[k] < first) first = rows[k];
      }
      seen[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
  }
  free(seen);
  return first;
}

uint32_t batch_groups(const dc_chunkkey *keys, size_t n_keys, dc_chunk_data *const *chunks, batch_info_fn info,
                      void *ictx, int64_t budget, uint32_t *group) {
  int64_t bytes = 0;
  uint32_t n_groups = 1;
  for (size_t q = 0; q < n_keys; q++) {
    if (chunks && chunks[q]) { group[q] = 0; continue; }
    const dc_chunk_info *ci = info(ictx, keys[q].tile, keys[q].chunk);
    int64_t b = (int64_t)ci->nnz * 8 + (int64_t)ci->n_cells * 8;
    if (bytes > 0 && bytes + b > budget) { n_groups++; bytes = 0; }
    bytes += b;
    group[q] = n_groups - 1;
  }
  return n_groups;
}

int64_t batch_layout(int64_t n, const uint8_t *direct, const batch_row *rows, const batch_cellref *ref,
                     batch_info_fn info, void *ictx, batch_run *runs, int64_t *off, int64_t *indptr) {
  int64_t total = 0;
  size_t qd = 0;
  indptr[0] = 0;
  for (int64_t i = 0; i < n;) {
    if (direct[i] == BATCH_ROW_DIRECT) {
      int64_t nnz = -1 - rows[i].n_out;
      int64_t len = info(ictx, ref[i].tile, ref[i].chunk)->n_cells;
      runs[qd++].out_base = total;          /* direct runs are in row order */
      total += nnz;
      i += len;
      indptr[i] = total;
      continue;
    }
    off[i] = total;
    total += rows[i].n_out;
    indptr[i + 1] = total;
    i++;
  }
  return total;
}

/* ------------------------------------------------------------ row kernels */

#define ROW_BLOCK 64

int64_t batch_panel_bits(const int32_t *map, int64_t n_genes, uint64_t *bits) {
  int64_t size = 0;
  memset(bits, 0, (size_t)((n_genes + 63) / 64) * sizeof *bits);
  for (int64_t g = 0; g < n_genes; g++)
    if (map[g] >= 0) { bits[g >> 6] |= 1ull << (g & 63); size++; }
  return size;
}

static void count_block(void *arg, size_t b) {
  batch_kernel *k = arg;
  size_t end = (b + 1) * ROW_BLOCK < k->n ? (b + 1) * ROW_BLOCK : k->n;
  const uint64_t *bits = k->bits;
  uint32_t ng = (uint32_t)k->n_genes;
  for (size_t j = b * ROW_BLOCK; j < end; j++) {
    batch_row *rw = &k->rows[k->which ? k->which[j] : j];
    if (!k->map) { rw->n_out = rw->n_in; continue; }
    int64_t c = 0;
    for (uint32_t e = 0; e < rw->n_in; e++) {
      uint32_t g = (uint32_t)rw->idx[e];
      if (g >= ng) { __atomic_store_n(&k->bad, 1, __ATOMIC_RELAXED); break; }
      c += bits[g >> 6] >> (g & 63) & 1;
    }
    rw->n_out = c;
  }
}

/* Rows of at most this many panel genes are put in order by an insertion sort; longer ones
** by a scatter over the panel's positions (their order, walked word by word). */
#define FEW_OUT 16

/* Puts a row of n panel positions (and their values) in order of position, for a panel not
** in gene order; sc holds the scatter's scratch, made at its first use.  -1: out of memory. */
static int order_row(const batch_kernel *k, int32_t *di, int32_t *dv, int64_t n, batch_scratch *sc) {
  if (k->sorted || n < 2) return 0;
  if (n <= FEW_OUT) {
    for (int64_t e = 1; e < n; e++) {
      int32_t p = di[e], v = dv[e];
      int64_t at = e;
      for (; at > 0 && di[at - 1] > p; at--) { di[at] = di[at - 1]; dv[at] = dv[at - 1]; }
      di[at] = p;
      dv[at] = v;
    }
    return 0;
  }
  if (!sc->sv) {
    size_t words = (size_t)(k->panel_size + 63) / 64;
    sc->sv = malloc((size_t)(k->panel_size ? k->panel_size : 1) * sizeof *sc->sv);
    sc->occ = calloc(words ? words : 1, sizeof *sc->occ);   /* kept all zero between rows */
    if (!sc->sv || !sc->occ) return -1;
  }
  int32_t *sv = sc->sv;
  uint64_t *occ = sc->occ;
  int32_t lo = INT32_MAX, hi = 0;
  for (int64_t e = 0; e < n; e++) {
    int32_t p = di[e];
    sv[p] = dv[e];
    occ[p >> 6] |= 1ull << (p & 63);
    lo = p < lo ? p : lo;
    hi = p > hi ? p : hi;
  }
  int64_t o = 0;
  for (int32_t w = lo >> 6; w <= hi >> 6; w++) {
    for (uint64_t m = occ[w]; m; m &= m - 1) {
      int32_t p = (int32_t)(w * 64 + __builtin_ctzll(m));
      di[o] = p;
      dv[o] = sv[p];
      o++;
    }
    occ[w] = 0;
  }
  return 0;
}

void batch_scratch_free(batch_scratch *sc) {
  free(sc->sv);
  free(sc->occ);
  sc->sv = NULL;
  sc->occ = NULL;
}

static void fill_block(void *arg, size_t b) {
  batch_kernel *k = arg;
  size_t end = (b + 1) * ROW_BLOCK < k->n ? (b + 1) * ROW_BLOCK : k->n;
  batch_scratch sc = {NULL, NULL};
  for (size_t j = b * ROW_BLOCK; j < end; j++) {
    uint64_t row = k->which ? k->which[j] : j;
    batch_row *rw = &k->rows[row];
    int32_t *di = k->dst_idx + k->dst_off[row], *dv = k->dst_val + k->dst_off[row];
    if (!k->map) {
      memcpy(di, rw->idx, (size_t)rw->n_in * sizeof *di);
      memcpy(dv, rw->val, (size_t)rw->n_in * sizeof *dv);
      continue;
    }
    /* the row's panel genes in its order, without a branch per gene: each is written at o,
    ** o moves on for members only (o < n_out, so every write stays in the row) */
    int64_t o = 0, n = rw->n_out;
    for (uint32_t e = 0; e < rw->n_in && o < n; e++) {
      int32_t p = k->map[rw->idx[e]];
      di[o] = p;
      dv[o] = rw->val[e];
      o += p >= 0;
    }
    if (order_row(k, di, dv, n, &sc)) { __atomic_store_n(&k->bad, 2, __ATOMIC_RELAXED); break; }
  }
  batch_scratch_free(&sc);
}

uint32_t batch_member_mask(int64_t n_genes) {
  uint32_t m = 0;
  while ((int64_t)m + 1 < n_genes) m = m << 1 | 1;
  return m;
}

uint32_t batch_panel_member(const int32_t *map, int64_t n_genes, uint8_t *member) {
  uint32_t mask = batch_member_mask(n_genes);
  memset(member, 0, (size_t)mask + 1);
  for (int64_t g = 0; g < n_genes; g++) member[g] = map[g] >= 0;
  return mask;
}

int64_t batch_panel_inplace(const batch_kernel *k, int32_t *idx, int32_t *val, uint32_t n_in, batch_scratch *sc) {
  /* members kept (gene ids) by the byte table, without a branch per gene; then only they look
  ** up their positions in the map (4 bytes a gene of the dataset) */
  const uint8_t *in = k->member;
  const uint32_t mask = k->member_mask;
  int64_t o = 0;
  for (uint32_t e = 0; e < n_in; e++) {
    uint32_t g = (uint32_t)idx[e] & mask;
    int32_t v = val[e];
    idx[o] = (int32_t)g;
    val[o] = v;
    o += in[g];
  }
  for (int64_t e = 0; e < o; e++) idx[e] = k->map[idx[e]];
  return order_row(k, idx, val, o, sc) ? -2 : o;
}

int64_t batch_compact(int64_t n, const int64_t *src, const int64_t *cnt, int32_t *idx, void *val, size_t width,
                      int64_t dst) {
  for (int64_t i = 0; i < n; i++) {
    if (cnt[i] < 0 || src[i] < dst) return -1;
    if (src[i] != dst && cnt[i]) {
      memmove(idx + dst, idx + src[i], (size_t)cnt[i] * sizeof *idx);
      memmove((char *)val + (size_t)dst * width, (char *)val + (size_t)src[i] * width, (size_t)cnt[i] * width);
    }
    dst += cnt[i];
  }
  return dst;
}

void batch_run_kernel(dc_pool *pool, batch_kernel *k, int which) {
  void (*fn)(void *, size_t) = which == BATCH_FILL ? fill_block : count_block;
  size_t blocks = (k->n + ROW_BLOCK - 1) / ROW_BLOCK;
  if (!blocks) return;
  if (pool) { dc_pool_for(pool, blocks, fn, k); return; }
  for (size_t b = 0; b < blocks; b++) fn(k, b);
}

/* ------------------------------------------------------------ the take */

/* The smallest position of a value that does not fit, by compare-and-swap; its value is looked
** up once the threads are done (batch_run_take): a value stored beside the position could be
** another thread's, whose later position lost the race (seen under qemu on ARM64: position 56
** reported with the value of another). */
static void take_low(batch_take *t, int64_t pos) {
  int64_t cur = __atomic_load_n(&t->bad_pos, __ATOMIC_RELAXED);
  while (pos < cur && !__atomic_compare_exchange_n(&t->bad_pos, &cur, pos, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* one row's values (the stored counts: uint32), converted (-> the first index of a value the
** kind cannot hold, else -1).  int32 and float32, the loader's kinds, take one pass that also
** ORs the values: a row with a value from 2^31 on is then an error (int32) or converted again
** as unsigned (float32: AVX2 has no unsigned conversion).  Narrower kinds are checked first. */
#define TAKE_CONV(T, S, o, v, m) do { T *q_ = (T *)(o); for (uint32_t e_ = 0; e_ < (m); e_++) q_[e_] = (T)(S)(v)[e_]; } while (0)
static int64_t first_above(const uint32_t *v, uint32_t m, uint32_t hi) {
  for (uint32_t e = 0; e < m; e++) if (v[e] > hi) return e;
  return -1;
}
static int64_t take_row(int kind, void *dst, const uint32_t *v, uint32_t m) {
  uint32_t hi = UINT32_MAX, top = 0;
  switch (kind) {
    case BATCH_KIND_I32: {
      int32_t *q = dst;
      for (uint32_t e = 0; e < m; e++) { q[e] = (int32_t)v[e]; top |= v[e]; }
      return top > INT32_MAX ? first_above(v, m, INT32_MAX) : -1;
    }
    case BATCH_KIND_F32: {
      float *q = dst;
      for (uint32_t e = 0; e < m; e++) { q[e] = (float)(int32_t)v[e]; top |= v[e]; }
      if (top > INT32_MAX) TAKE_CONV(float, uint32_t, dst, v, m);
      return -1;
    }
    case BATCH_KIND_U32: memcpy(dst, v, (size_t)m * 4); return -1;
    case BATCH_KIND_F64: TAKE_CONV(double, uint32_t, dst, v, m); return -1;
    case BATCH_KIND_I64: TAKE_CONV(int64_t, uint32_t, dst, v, m); return -1;
    case BATCH_KIND_I16: hi = INT16_MAX; break;
    case BATCH_KIND_I8: hi = INT8_MAX; break;
    case BATCH_KIND_U8: hi = UINT8_MAX; break;
    default: return -1;
  }
  for (uint32_t e = 0; e < m; e++) top |= v[e];
  if (top > hi) return first_above(v, m, hi);
  switch (kind) {
    case BATCH_KIND_I16: TAKE_CONV(int16_t, uint32_t, dst, v, m); break;
    case BATCH_KIND_I8: TAKE_CONV(int8_t, uint32_t, dst, v, m); break;
    default: TAKE_CONV(uint8_t, uint32_t, dst, v, m); break;
  }
  return -1;
}

static const size_t kind_size[BATCH_KIND_N] = {4, 4, 2, 1, 1, 8, 8, 4};

static void take_block(void *arg, size_t b) {
  batch_take *t = arg;
  int64_t end = (int64_t)((b + 1) * ROW_BLOCK) < t->n ? (int64_t)((b + 1) * ROW_BLOCK) : t->n;
  size_t w = kind_size[t->kind];
  for (int64_t i = (int64_t)(b * ROW_BLOCK); i < end; i++) {
    const batch_row *rw = &t->rows[i];
    int64_t o = t->off[i];
    if (t->dst_idx) memcpy(t->dst_idx + o, rw->idx, (size_t)rw->n_in * 4);
    if (t->dst_val) {
      const uint32_t *v = (const uint32_t *)rw->val;
      int64_t e = take_row(t->kind, (char *)t->dst_val + (size_t)o * w, v, rw->n_in);
      if (e >= 0) take_low(t, o + e);
    }
  }
}

int batch_run_take(dc_pool *pool, batch_take *t) {
  if (t->kind < 0 || t->kind >= BATCH_KIND_N) return -2;
  t->bad_pos = INT64_MAX;
  t->bad_val = 0;
  size_t blocks = (size_t)((t->n + ROW_BLOCK - 1) / ROW_BLOCK);
  if (pool && blocks > 1) dc_pool_for(pool, blocks, take_block, t);
  else for (size_t b = 0; b < blocks; b++) take_block(t, b);
  if (t->bad_pos == INT64_MAX) return 0;
  for (int64_t i = 0; i < t->n; i++)           /* the row holding bad_pos: its value there */
    if (t->bad_pos >= t->off[i] && t->bad_pos - t->off[i] < (int64_t)t->rows[i].n_in) {
      t->bad_val = ((const uint32_t *)t->rows[i].val)[t->bad_pos - t->off[i]];
      break;
    }
  return -1;
}
