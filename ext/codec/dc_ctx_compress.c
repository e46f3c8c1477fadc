/*
** dc_ctx_compress.c — encoder of the default codec `rans` (id 3): builds the
** tile's static model (per context, the symbol frequencies; written to the
** tile's shared section) and encodes chunks with it.  The model and the coder
** are described in dc_ctx.h, the bytes in docs/format.md section 2.
*/
#include "dc_ctx.h"

#include <math.h>
#include <stdlib.h>
#include <zstd.h>

#define NIDX (DC_CTX_NID + 1u)          /* joint ids, then the escape */
#define ESC_IX DC_CTX_NID

#define KM DC_CTX_KMAX
#define KM1 (DC_CTX_KMAX + 1u)          /* ranks 0..KM-1, then "not among the top KM" */
#define NPC (KM1 * KM1 + 1)             /* pair codes: (rank or K) x (K + 1) + (rank or K), escape */

typedef struct ctx_model {
  dc_ctx_model m;
  uint8_t *pk;                       /* n_ctx: K of a pair context, 0 = one symbol per step */
  uint8_t (*rk)[256];                /* n_ctx x 256: a symbol index's rank (< K), else 255 */
  uint16_t (*pfs)[NPC][2];           /* n_ctx x NPC: pair code frequency, start */
  /* per context and joint id: symbol index + 1 (0 = escaped) */
  uint8_t *six;                      /* n_ctx x NIDX */
  uint16_t (*fs)[256][2];            /* n_ctx x 256: frequency, start (index nsym = escape) */
  uint16_t *nsym;                    /* n_ctx: coded symbols (0 = unused context) */
  uint32_t *loc;                     /* with a gene map: gene -> local id (n_genes) */
  uint64_t *rcp;                     /* 0..M: the coder's reciprocals, dc_ctx_rcp */
} ctx_model;

void dc_ctx_free_model(void *model) {
  ctx_model *cm = model;
  if (!cm) return;
  free(cm->six);
  free(cm->fs);
  free(cm->nsym);
  free(cm->loc);
  free(cm->pk);
  free(cm->rk);
  free(cm->pfs);
  free(cm->rcp);
  free(cm);
}

static uint32_t choose_nq(uint64_t nnz, int level) {
  if (level > 0 && level <= (int)DC_CTX_MAXQ) return (uint32_t)level;
  if (nnz >= 12000000) return 4;
  if (nnz >= 4000000) return 3;
  if (nnz >= 1000000) return 2;
  return 1;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}
static int cmp_desc_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x > y ? -1 : x < y;
}

/* One nonzero as the model sees it. */
typedef struct nz {
  uint32_t ctx, id;                  /* context, joint id */
  uint64_t gx, cx;                   /* mantissa bits of the gap and of the count */
  uint32_t gb, cb;                   /* their widths */
} nz;

/* Walks one cell: runs BODY for every nonzero in order (gap = gene -
** previous gene - 1, the first gene of a cell counting from -1). */
#define FOR_NZ(m, loc, q, idx, val, s, t, BODY)                                 \
  do {                                                                          \
    int64_t prev_ = -1;                                                         \
    for (uint64_t j_ = (s); j_ < (t); j_++) {                                   \
      uint32_t g_ = (loc) ? (loc)[(idx)[j_]] : (idx)[j_], v_ = (val)[j_];       \
      uint32_t b_ = dc_ctx_rb(g_, (m)->shift);                                  \
      uint64_t gap_ = (uint64_t)((int64_t)g_ - prev_ - 1);                      \
      nz z_;                                                                    \
      uint32_t gc_ = dc_vcode(gap_), cc_ = dc_vcode(v_);                \
      z_.ctx = (q) * (m)->nrb + b_;                                             \
      z_.id = gc_ * DC_CTX_NCODES + cc_;                                        \
      z_.gb = dc_vbits(gc_);                                                \
      z_.cb = dc_vbits(cc_);                                                \
      z_.gx = gap_ - dc_vbase(gc_);                                         \
      z_.cx = (uint64_t)v_ - dc_vbase(cc_);                                 \
      prev_ = g_;                                                               \
      { nz *Z = &z_; (void)Z; BODY; }                                           \
    }                                                                           \
  } while (0)

/* The model's counts of (context, joint id), counted in parts of the tile's cells (on a pool:
** one array per part, uint32, summed per context when the model is built). */
typedef struct count_job {
  const dc_csr *in;
  const ctx_model *cm;
  const uint32_t *cut;     /* parts + 1 cell boundaries */
  uint32_t **part;         /* per part: n_ctx x NIDX counts */
} count_job;

static void count_part(void *v, size_t p) {
  count_job *j = v;
  const dc_csr *in = j->in;
  const ctx_model *cm = j->cm;
  const dc_ctx_model *m = &cm->m;
  uint32_t *cnt = j->part[p];
  for (uint32_t i = j->cut[p]; i < j->cut[p + 1]; i++) {
    uint64_t s = in->indptr[i], t = in->indptr[i + 1];
    uint32_t q = dc_ctx_q(m, t - s);
    FOR_NZ(m, cm->loc, q, in->indices, in->data, s, t, cnt[(size_t)Z->ctx * NIDX + Z->id]++);
  }
}

/* Version 3: the pairs each context's stream would code, counted in parts of whole chunks.  A
** chunk's stream of a context pairs its symbols (2k, 2k+1) from the chunk's start, so the counts
** are exactly the pairs the chunks code; a symbol counts by its rank among the context's KM most
** frequent (KM: not among them). */
typedef struct pair_job {
  const dc_csr *in;
  const ctx_model *cm;
  const uint32_t *first;   /* chunk cell boundaries */
  const uint32_t *pcut;    /* parts + 1 chunk boundaries */
  uint64_t **part;         /* per part: n_ctx x KM1 x KM1 counts */
} pair_job;

static void pair_part(void *v, size_t p) {
  pair_job *j = v;
  const dc_csr *in = j->in;
  const ctx_model *cm = j->cm;
  const dc_ctx_model *m = &cm->m;
  uint64_t *cnt = j->part[p];
  uint8_t pend[DC_CTX_MAXQ * DC_CTX_MAXRB];
  for (uint32_t c = j->pcut[p]; c < j->pcut[p + 1]; c++) {
    memset(pend, 0xff, sizeof pend);
    for (uint32_t i = j->first[c]; i < j->first[c + 1]; i++) {
      uint64_t s = in->indptr[i], t = in->indptr[i + 1];
      uint32_t q = dc_ctx_q(m, t - s);
      FOR_NZ(m, cm->loc, q, in->indices, in->data, s, t, {
        uint32_t k = cm->six[(size_t)Z->ctx * NIDX + Z->id];
        uint32_t r = cm->rk[Z->ctx][k ? k - 1 : cm->nsym[Z->ctx]];
        if (r == 255) r = KM;
        if (pend[Z->ctx] == 0xff) {
          pend[Z->ctx] = (uint8_t)r;
        } else {
          cnt[((size_t)Z->ctx * KM1 + pend[Z->ctx]) * KM1 + r]++;
          pend[Z->ctx] = 0xff;
        }
      });
    }
  }
}

/* A pair context's table for K: the (K + 1)^2 codes of pairs of ranks (rank K: another symbol,
** which follows raw) and the escaped pair (code (K + 1)^2: both symbols raw).  A code expected
** to get under an eighth of a slot is escaped instead: 1,089 codes on 4,096 slots would
** otherwise take much of the probability from the common ones (a quarter: the reference tile
** 0.004 bits/nnz larger with 1.7x the raw symbols, 0.88% of its nonzeros, which cost the AVX2
** decoder about 40 cycles each).  pc: KM1 x KM1 pair counts by
** rank (KM: not among the top KM); T: the pairs.  Fills f (frequencies, 0 for an unused code)
** and returns the stream's bits: the codes at their frequencies, 8 per raw symbol, and the
** table in the shared section (about a byte per used code after zstd, less for the others). */
static double pair_table(const uint64_t *pc, uint32_t K, uint64_t T, uint64_t *cnt, uint32_t *idx,
                         uint32_t *f) {
  const uint32_t nc = (K + 1) * (K + 1), esc = nc;
  memset(cnt, 0, (nc + 1) * sizeof *cnt);
  double raw = 0;
  for (uint32_t a = 0; a < KM1; a++)
    for (uint32_t b = 0; b < KM1; b++) {
      uint64_t c = pc[a * KM1 + b];
      cnt[(a < K ? a : K) * (K + 1) + (b < K ? b : K)] += c;
    }
  uint64_t lim = T / (8 * DC_CTX_M);      /* count below an eighth of a slot */
  uint32_t nu = 0;
  uint64_t nesc = 0;
  for (uint32_t i = 0; i < nc; i++) {
    if (!cnt[i]) continue;
    if (cnt[i] < lim) { nesc += cnt[i]; cnt[i] = 0; continue; }
    raw += 8.0 * (double)cnt[i] * ((i / (K + 1) == K) + (i % (K + 1) == K));
    idx[nu++] = i;
  }
  cnt[esc] = nesc;
  raw += 16.0 * (double)nesc;
  idx[nu++] = esc;                        /* the escape always has a slot */
  uint64_t cc[NPC + 1] = {0};   /* (initialised: a maybe-uninitialized warning at -O1) */
  uint32_t ff[NPC + 1];
  for (uint32_t i = 0; i < nu; i++) cc[i] = cnt[idx[i]] ? cnt[idx[i]] : 1;
  if (nu == 1) cc[nu++] = 1, idx[1] = 0;  /* never one code alone (it would get 2^12) */
  dc_normalize_freqs(cc, ff, nu, DC_CTX_M);
  memset(f, 0, (nc + 1) * sizeof *f);
  double h = raw;
  for (uint32_t i = 0; i < nu; i++) {
    f[idx[i]] = ff[i];
    if (cnt[idx[i]]) h += (double)cnt[idx[i]] * log2((double)DC_CTX_M / ff[i]);
  }
  return h + 8.0 * (K + nu + 0.25 * (nc + 1 - nu));
}
/* A context is coded in pairs when they cost at most this much more than one symbol per step
** (its stream then decodes in 0.5-0.6x the time per nonzero: docs/codec-design.md).  3% puts
** 83-100% of every real file's nonzeros and all of the reference tile's in pairs, for 0.5-1.2%
** more bytes on the real files than 1.5% (which left 2-53% of theirs in pairs) and 0.04% on the
** reference tile; their portable decode takes 0.93-0.96x the time (2026-12-07).  The real
** files' datasets, in 16 KiB pages since 2026-12-06, stay within issue 9's file-size bound. */
#define PAIR_SLACK 0.03

uint32_t dc_ctx_model_nrb(const void *model) { return ((const ctx_model *)model)->m.nrb; }

int dc_ctx_build_model(const dc_csr *in, int level, int v2, int pairs, int one_bucket, const uint32_t *first,
                       uint32_t n_chunks, dc_pool *pool, void **model, dc_buf *shared, dc_error *err) {
  *model = NULL;
  ctx_model *cm = calloc(1, sizeof *cm);
  uint64_t *cx = NULL, *key = NULL, *sc = NULL, **ppart = NULL, *pcn = NULL;
  uint32_t **part = NULL, *cut = NULL, n_parts = 0, *pcut = NULL, n_pparts = 0, *pci = NULL, *pcf = NULL;
  uint32_t *nnzs = NULL, *f = NULL, *ids = NULL;
  dc_buf raw = {0};
  int rc = DC_ENOMEM;
  if (!cm) goto done;
  dc_ctx_model *m = &cm->m;
  uint32_t C = in->n_cells;
  uint64_t nnz = in->indptr[C] - in->indptr[0];
  /* cell-size buckets at quantiles of the nonempty cells' nnz */
  m->nq = choose_nq(nnz, level);
  nnzs = malloc((C ? C : 1) * sizeof *nnzs);
  if (!nnzs) goto done;
  uint32_t ne = 0;
  for (uint32_t i = 0; i < C; i++) {
    uint64_t k = in->indptr[i + 1] - in->indptr[i];
    if (k) nnzs[ne++] = (uint32_t)k;
  }
  qsort(nnzs, ne, sizeof *nnzs, cmp_u32);
  for (uint32_t k = 0; k + 1 < m->nq; k++) {
    uint32_t q = ne ? nnzs[(uint64_t)ne * (k + 1) / m->nq] : 0;
    if (k && q <= m->q_lim[k - 1]) q = m->q_lim[k - 1] + 1;
    m->q_lim[k] = q;
  }
  m->q_lim[m->nq - 1] = UINT32_MAX;
  /* the gene map: worth it when a clear share of the genes never occurs in
  ** the tile and those are not simply the last ones */
  m->n_local = in->n_genes;
  if (in->n_genes) {
    cm->loc = malloc((size_t)in->n_genes * sizeof *cm->loc);
    if (!cm->loc) goto done;
    memset(cm->loc, 0, (size_t)in->n_genes * sizeof *cm->loc);
    for (uint64_t j = in->indptr[0]; j < in->indptr[C]; j++) cm->loc[in->indices[j]] = 1;
    uint32_t n = 0, last = 0;
    for (uint32_t g = 0; g < in->n_genes; g++)
      if (cm->loc[g]) { n++; last = g + 1; }
    if (n < DC_CTX_MAP_MIN * in->n_genes && n < last) {
      m->mapped = 1;
      m->n_local = n;
      for (uint32_t g = 0, k = 0; g < in->n_genes; g++) cm->loc[g] = cm->loc[g] ? k++ : UINT32_MAX;
    } else {
      free(cm->loc);
      cm->loc = NULL;
    }
  }
  m->shift = 4;
  while (one_bucket && m->shift < 16 && m->n_local > (1u << m->shift)) m->shift++;
  m->nrb = dc_ctx_rb(m->n_local ? m->n_local - 1 : 0, m->shift) + 1;
  m->n_ctx = m->nq * m->nrb;

  /* parts: one per pool thread, each under 2^31 nonzeros (its counts are uint32) */
  n_parts = (uint32_t)dc_pool_size(pool);
  if ((uint64_t)n_parts < nnz / 0x7fffffffu + 1) n_parts = (uint32_t)(nnz / 0x7fffffffu + 1);
  if (n_parts > C) n_parts = C ? C : 1;
  part = calloc(n_parts, sizeof *part);
  cut = malloc(((size_t)n_parts + 1) * sizeof *cut);
  cx = malloc(NIDX * sizeof *cx);
  cm->six = calloc((size_t)m->n_ctx * NIDX, 1);
  cm->fs = calloc(m->n_ctx, sizeof *cm->fs);
  cm->nsym = calloc(m->n_ctx, sizeof *cm->nsym);
  key = malloc(NIDX * sizeof *key);
  f = malloc(257 * sizeof *f);
  ids = malloc(257 * sizeof *ids);
  sc = calloc((size_t)m->n_ctx * 256, sizeof *sc);
  cm->pk = calloc(m->n_ctx, 1);
  cm->rcp = malloc((DC_CTX_M + 1) * sizeof *cm->rcp);
  cm->rk = calloc(m->n_ctx, sizeof *cm->rk);
  cm->pfs = v2 ? NULL : calloc(m->n_ctx, sizeof *cm->pfs);
  pcn = malloc(NPC * sizeof *pcn);
  pci = malloc(NPC * sizeof *pci);
  pcf = malloc(NPC * sizeof *pcf);
  if (!part || !cut || !cx || !cm->six || !cm->fs || !cm->nsym || !key || !f || !ids || !sc || !cm->pk ||
      !cm->rcp || !cm->rk || (!v2 && !cm->pfs) || !pcn || !pci || !pcf)
    goto done;
  cm->rcp[0] = 0;                            /* a frequency of 0 is never coded */
  for (uint32_t fr = 1; fr <= DC_CTX_M; fr++) cm->rcp[fr] = dc_ctx_rcp(fr);
  for (uint32_t p = 0; p < n_parts; p++)
    if (!(part[p] = calloc((size_t)m->n_ctx * NIDX, sizeof **part))) goto done;
  cut[0] = 0;
  cut[n_parts] = C;
  for (uint32_t p = 1; p < n_parts; p++) {   /* the first cell at or past p/n_parts of the nonzeros */
    uint64_t target = in->indptr[0] + nnz / n_parts * p;
    uint32_t lo = cut[p - 1], hi = C;
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (in->indptr[mid] >= target) hi = mid; else lo = mid + 1;
    }
    cut[p] = lo;
  }
  count_job cj = {in, cm, cut, part};
  if (n_parts > 1) dc_pool_for(pool, n_parts, count_part, &cj);
  else count_part(&cj, 0);

  /* per context: the most frequent ids are coded (255 in version 2, 254 in version 3), the rest
  ** escape; sc keeps each symbol index's count for the pairs */
  const uint32_t maxsym = v2 ? DC_CTX_MAXSYM : DC_CTX_MAXSYM3;
  for (uint32_t x = 0; x < m->n_ctx; x++) {
    for (uint32_t id = 0; id < NIDX; id++) cx[id] = part[0][(size_t)x * NIDX + id];
    for (uint32_t p = 1; p < n_parts; p++)
      for (uint32_t id = 0; id < NIDX; id++) cx[id] += part[p][(size_t)x * NIDX + id];
    uint32_t n = 0;
    for (uint32_t id = 0; id < DC_CTX_NID; id++)
      if (cx[id]) key[n++] = cx[id] << 13 | id;           /* ids < 2^13 */
    if (!n) continue;
    uint64_t esc = 0;
    if (n > maxsym) {
      qsort(key, n, sizeof *key, cmp_desc_u64);
      for (uint32_t k = maxsym; k < n; k++) esc += key[k] >> 13;
      n = maxsym;
    }
    for (uint32_t k = 0; k < n; k++) ids[k] = (uint32_t)(key[k] & 8191);
    qsort(ids, n, sizeof *ids, cmp_u32);
    uint64_t *c = sc + (size_t)x * 256;
    for (uint32_t k = 0; k < n; k++) c[k] = cx[ids[k]];
    c[n] = esc;                                            /* the escape, index n */
    dc_normalize_freqs(c, f, n + 1, DC_CTX_M);   /* n + 1 >= 2: no frequency reaches M */
    uint8_t *sx = cm->six + (size_t)x * NIDX;
    cm->nsym[x] = (uint16_t)n;
    uint32_t start = 0;
    for (uint32_t k = 0; k <= n; k++) {
      if (k < n) sx[ids[k]] = (uint8_t)(k + 1);
      cm->fs[x][k][0] = (uint16_t)f[k];
      cm->fs[x][k][1] = (uint16_t)start;
      start += f[k];
    }
    /* ranks by count (ties: the lower index), symbols that occur only */
    memset(cm->rk[x], 255, 256);
    for (uint32_t r = 0; r < KM; r++) {
      uint32_t best = UINT32_MAX;
      for (uint32_t k = 0; k <= n; k++)
        if (c[k] && cm->rk[x][k] == 255 && (best == UINT32_MAX || c[k] > c[best])) best = k;
      if (best == UINT32_MAX) break;
      cm->rk[x][best] = (uint8_t)r;
    }
  }

  /* version 3: the pairs of every context, counted per chunk as coded */
  if (!v2 && pairs >= 0 && n_chunks) {
    uint32_t np = n_parts < n_chunks ? n_parts : n_chunks;
    pcut = malloc(((size_t)np + 1) * sizeof *pcut);
    ppart = calloc(np, sizeof *ppart);
    if (!pcut || !ppart) goto done;
    n_pparts = np;
    for (uint32_t p = 0; p < np; p++)
      if (!(ppart[p] = calloc((size_t)m->n_ctx * KM1 * KM1, sizeof **ppart))) goto done;
    pcut[0] = 0;
    pcut[np] = n_chunks;
    for (uint32_t p = 1; p < np; p++) {      /* the first chunk at or past p/np of the nonzeros */
      uint64_t target = in->indptr[0] + nnz / np * p;
      uint32_t k = pcut[p - 1];
      while (k < n_chunks && in->indptr[first[k]] < target) k++;
      pcut[p] = k;
    }
    pair_job pj = {in, cm, first, pcut, ppart};
    if (np > 1) dc_pool_for(pool, np, pair_part, &pj);
    else pair_part(&pj, 0);
    for (uint32_t p = 1; p < np; p++)
      for (size_t i = 0; i < (size_t)m->n_ctx * KM1 * KM1; i++) ppart[0][i] += ppart[p][i];
  }

  dc_buf_put(&raw, (uint8_t[]){v2 ? 2u : DC_CTX_MODEL_VERSION, (uint8_t)m->nq, (uint8_t)m->nrb,
                               (uint8_t)m->shift, (uint8_t)m->mapped}, 5);
  for (uint32_t k = 0; k + 1 < m->nq; k++) dc_buf_varint(&raw, m->q_lim[k]);
  if (m->mapped) {               /* varint n_local, then a bitmap of the genes that occur */
    dc_buf_varint(&raw, m->n_local);
    size_t nb = ((size_t)in->n_genes + 7) / 8;
    if (dc_buf_reserve(&raw, nb)) goto done;
    memset(raw.p + raw.len, 0, nb);
    for (uint32_t g = 0; g < in->n_genes; g++)
      if (cm->loc[g] != UINT32_MAX) raw.p[raw.len + g / 8] |= (uint8_t)(1u << (g % 8));
    raw.len += nb;
  }
  for (uint32_t x = 0; x < m->n_ctx; x++) {
    uint32_t n = cm->nsym[x];
    const uint8_t *sx = cm->six + (size_t)x * NIDX;
    if (!n) { dc_buf_varint(&raw, 0); continue; }   /* unused */
    dc_buf_varint(&raw, n + 1);
    /* the id deltas (version 2: each followed by its frequency - 1, then the escape's) */
    for (uint32_t id = 0, k = 0, prev = 0; id < DC_CTX_NID; id++)
      if (sx[id]) {
        dc_buf_varint(&raw, k ? id - prev - 1 : id);
        if (v2) dc_buf_varint(&raw, cm->fs[x][k][0] - 1u);
        prev = id;
        k++;
      }
    if (v2) {
      dc_buf_varint(&raw, cm->fs[x][n][0] - 1u);
      continue;
    }
    /* version 3: then K: 0 and the frequencies - 1 (one symbol per step), or K >= 2, the symbol
    ** indices of ranks 0..K-1 and the (K + 1)^2 + 1 pair codes' frequencies */
    const uint64_t *c = sc + (size_t)x * 256, *pc = ppart ? ppart[0] + (size_t)x * KM1 * KM1 : NULL;
    uint64_t T = 0;
    uint32_t nrk = 0;                            /* symbols with a rank */
    for (uint32_t k = 0; k <= n; k++) nrk += cm->rk[x][k] != 255;
    double single = 8.0 * (n + 1);      /* the symbols at their frequencies, and the table */
    for (uint32_t k = 0; k <= n; k++)
      if (c[k]) single += (double)c[k] * log2((double)DC_CTX_M / cm->fs[x][k][0]);
    for (size_t i = 0; pc && i < KM1 * KM1; i++) T += pc[i];
    uint32_t K = 0;
    double best = pairs > 0 ? INFINITY : pairs < 0 ? -1.0 : single * (1.0 + PAIR_SLACK);
    for (uint32_t k = 2; T && k <= nrk; k += k < 8 ? 1 : 4) {
      double b = pair_table(pc, k, T, pcn, pci, pcf);
      if (b < best) { best = b; K = k; }
    }
    cm->pk[x] = (uint8_t)K;
    dc_buf_varint(&raw, K);
    if (!K) {
      for (uint32_t k = 0; k <= n; k++) dc_buf_varint(&raw, cm->fs[x][k][0] - 1u);
      continue;
    }
    for (uint32_t r = 0; r < K; r++) {
      uint32_t k = 0;
      while (k <= n && cm->rk[x][k] != r) k++;     /* K <= the symbols that occur: found */
      dc_buf_varint(&raw, k);
    }
    pair_table(pc, K, T, pcn, pci, pcf);
    uint32_t start = 0;
    for (uint32_t i = 0; i <= (K + 1) * (K + 1); i++) {
      cm->pfs[x][i][0] = (uint16_t)pcf[i];
      cm->pfs[x][i][1] = (uint16_t)start;
      start += pcf[i];
      dc_buf_varint(&raw, pcf[i]);
    }
  }
  if (raw.oom) goto done;
  dc_buf_varint(shared, raw.len);
  size_t bound = ZSTD_compressBound(raw.len);
  if (dc_buf_reserve(shared, bound)) goto done;
  size_t z = ZSTD_compress(shared->p + shared->len, bound, raw.p, raw.len, 9);
  if (ZSTD_isError(z)) goto done;
  shared->len += z;
  *model = cm;
  cm = NULL;
  rc = DC_OK;
done:
  if (rc) dc_error_set(err, rc, "encode: out of memory building the rans model");
  dc_ctx_free_model(cm);
  for (uint32_t p = 0; part && p < n_parts; p++) free(part[p]);
  free(part);
  free(cut);
  free(cx);
  free(nnzs);
  free(key);
  free(f);
  free(ids);
  free(sc);
  for (uint32_t p = 0; ppart && p < n_pparts; p++) free(ppart[p]);
  free(ppart);
  free(pcut);
  free(pcn);
  free(pci);
  free(pcf);
  dc_buf_free(&raw);
  return rc;
}

/* ------------------------------------------------------------ chunks */
/* The mantissa bits, least significant first, 32 at a time into room reserved per cell
** (MANT_MAX bytes per nonzero at most): no call per byte. */
typedef struct bitw {
  uint8_t *p;
  uint64_t acc;
  uint32_t n;
} bitw;
#define MANT_MAX 9u          /* an escape's 13 bits, a gap's up to 29 and a count's up to 30 */
static inline void bit_put(bitw *w, uint64_t v, uint32_t nb) {   /* nb <= 32, v < 2^nb */
  w->acc |= v << w->n;
  w->n += nb;
  if (w->n >= 32) {
    dc_wr32(w->p, (uint32_t)w->acc);
    w->p += 4;
    w->acc >>= 32;
    w->n -= 32;
  }
}

/* Words of a stream in reverse read order. */
typedef struct wstack { uint16_t *w; size_t n, cap; } wstack;
static int wreserve(wstack *s, size_t n) {   /* room for n words (s->n is 0) */
  if (n <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 1024;
  while (cap < n) cap *= 2;
  free(s->w);
  if (!(s->w = malloc(cap * sizeof *s->w))) { s->cap = 0; return -1; }
  s->cap = cap;
  return 0;
}

int dc_ctx_encode_chunk(const dc_chunk_in *ch, int level, const void *model, dc_buf *out, dc_error *err) {
  (void)level;
  const ctx_model *cm = model;
  const dc_ctx_model *m = &cm->m;
  uint32_t nx = m->n_ctx, nrb = m->nrb;
  uint64_t *nper = calloc(nx, sizeof *nper), *at = calloc(nx, sizeof *at);
  uint8_t *syms = malloc(ch->nnz ? (size_t)ch->nnz : 1);
  uint32_t *bc = calloc(nrb, sizeof *bc);
  /* a pair context's codes and raw symbols (at most one context's worth at a time) */
  uint16_t *pcode = malloc((ch->nnz / 2 + 1) * sizeof *pcode);
  uint8_t *side = malloc(ch->nnz ? (size_t)ch->nnz : 1);
  dc_buf counts = {0}, mant = {0}, streams = {0}, dir = {0};
  wstack ws[4] = {{0}};
  int rc = DC_OK;
  if (!nper || !at || !syms || !bc || !pcode || !side) goto oom;

  /* pass 1: per-cell bucket counts, symbols per context */
  for (uint32_t i = 0; i < ch->n_cells; i++) {
    uint64_t s = ch->indptr[i], t = ch->indptr[i + 1];
    uint32_t q = dc_ctx_q(m, t - s);
    memset(bc, 0, nrb * sizeof *bc);
    for (uint64_t j = s; j < t; j++)
      bc[dc_ctx_rb(cm->loc ? cm->loc[ch->indices[j]] : ch->indices[j], m->shift)]++;
    for (uint32_t b = 0; b < nrb; b++) {
      dc_buf_varint(&counts, bc[b]);
      nper[q * nrb + b] += bc[b];
    }
  }
  for (uint32_t x = 0, o = 0; x < nx; x++) { at[x] = o; o += (uint32_t)nper[x]; }
  /* pass 2: symbol indices grouped by context; mantissa bits in nonzero order */
  bitw bw = {NULL, 0, 0};
  for (uint32_t i = 0; i < ch->n_cells; i++) {
    uint64_t s = ch->indptr[i], t = ch->indptr[i + 1];
    uint32_t q = dc_ctx_q(m, t - s);
    if (dc_buf_reserve(&mant, (t - s) * MANT_MAX + 8)) goto oom;
    bw.p = mant.p + mant.len;
    FOR_NZ(m, cm->loc, q, ch->indices, ch->data, s, t, {
      if (!cm->nsym[Z->ctx]) goto oom;                       /* cannot happen: the model saw it */
      uint32_t k = cm->six[(size_t)Z->ctx * NIDX + Z->id];
      if (k) {
        syms[at[Z->ctx]++] = (uint8_t)(k - 1);
      } else {
        syms[at[Z->ctx]++] = (uint8_t)cm->nsym[Z->ctx];     /* escape: the joint id follows raw */
        bit_put(&bw, Z->id, DC_CTX_ESC_BITS);
      }
      bit_put(&bw, Z->gx, Z->gb);
      bit_put(&bw, Z->cx, Z->cb);
    });
    mant.len = (size_t)(bw.p - mant.p);
  }
  if (dc_buf_reserve(&mant, 4)) goto oom;
  for (bw.p = mant.p + mant.len; bw.n; bw.n = bw.n > 8 ? bw.n - 8 : 0, bw.acc >>= 8) *bw.p++ = (uint8_t)bw.acc;
  mant.len = (size_t)(bw.p - mant.p);
  dc_buf_put(&mant, (uint8_t[8]){0}, 8);                     /* read-ahead room for the decoder */

  /* pass 3: each context's stream, coded backwards; a pair context (version 3) codes the pairs
  ** (2k, 2k+1) of its symbols, one code per step, and puts the symbols outside its top K (in
  ** order) and an odd last symbol after its words, raw */
  for (uint32_t x = 0, o = 0; x < nx; x++) {
    uint32_t n = (uint32_t)nper[x];
    if (!n) continue;
    const uint8_t *sy = syms + o;
    o += n;
    uint32_t K = cm->pk[x], steps = K ? n / 2 : n;
    uint32_t nside = 0;
    if (K) {
      for (uint32_t k = 0; k < steps; k++) {
        uint32_t a = cm->rk[x][sy[2 * k]], b = cm->rk[x][sy[2 * k + 1]], esc = (K + 1) * (K + 1);
        a = a < K ? a : K;
        b = b < K ? b : K;
        uint32_t pc = a * (K + 1) + b;
        if (!cm->pfs[x][pc][0]) pc = esc;                    /* a rare pair: escaped, both raw */
        if (pc == esc || a == K) side[nside++] = sy[2 * k];
        if (pc == esc || b == K) side[nside++] = sy[2 * k + 1];
        pcode[k] = (uint16_t)pc;
      }
      if (n & 1) side[nside++] = sy[n - 1];
    }
    uint32_t st[DC_CTX_LANES];
    for (uint32_t l = 0; l < DC_CTX_LANES; l++) st[l] = DC_CTX_L;
    /* a lane group's words: at most one per step of its 8 lanes, room made first, so that the
    ** renormalisation (taken about half the time) writes its word whether taken or not and
    ** keeps it by moving the pointer: no branch to mispredict */
    size_t gmax = ((size_t)steps / DC_CTX_LANES + 1) * 8 + 1;
    uint16_t *wp[4];
    for (uint32_t g = 0; g < 4; g++) {
      if (wreserve(&ws[g], gmax)) goto oom;
      wp[g] = ws[g].w;
    }
    const uint16_t (*fs)[2] = K ? (const uint16_t (*)[2])cm->pfs[x] : (const uint16_t (*)[2])cm->fs[x];
    const uint64_t *rcp = cm->rcp;
    for (uint32_t i = steps; i-- > 0;) {
      uint32_t sv = K ? pcode[i] : sy[i];
      uint32_t l = i % DC_CTX_LANES, fr = fs[sv][0], start = fs[sv][1];
      uint32_t xs = st[l];
      uint32_t r = xs >= fr << 20;                            /* xmax = ((L >> PREC) << 16) * f */
      *wp[l / 8] = (uint16_t)xs;                              /* lane group l/8's stream */
      wp[l / 8] += r;
      xs >>= r << 4;
      uint32_t qt = dc_ctx_rcp_div(xs, rcp[fr]);
      st[l] = (qt << DC_CTX_PREC) + (xs - qt * fr) + start;
    }
    for (uint32_t g = 0; g < 4; g++) ws[g].n = (size_t)(wp[g] - ws[g].w);
    size_t before = streams.len;
    uint32_t k = steps < DC_CTX_LANES ? steps : DC_CTX_LANES;
    for (uint32_t l = 0; l < k; l++) {
      uint8_t b4[4];
      dc_wr32(b4, st[l]);
      dc_buf_put(&streams, b4, 4);
    }
    for (uint32_t g = 0; g < 4; g++) {
      if (dc_buf_reserve(&streams, ws[g].n * 2)) goto oom;
      for (size_t i = ws[g].n; i-- > 0;) {
        dc_wr16(streams.p + streams.len, ws[g].w[i]);
        streams.len += 2;
      }
    }
    if (K) dc_buf_put(&streams, side, nside);
    dc_buf_varint(&dir, streams.len - before);
    for (uint32_t g = 0; g < 3; g++) dc_buf_varint(&dir, ws[g].n);
    if (K) dc_buf_varint(&dir, nside);
  }

  /* payload: counts (zstd), mantissa bits, stream directory, streams */
  size_t bound = ZSTD_compressBound(counts.len);
  dc_buf zc = {0};
  if (dc_buf_reserve(&zc, bound)) goto oom;
  size_t z = ZSTD_compress(zc.p, bound, counts.p, counts.len, 19);
  if (ZSTD_isError(z)) { dc_buf_free(&zc); goto oom; }
  zc.len = z;
  /* the payload's exact size at once: no regrowth (a copy into fresh memory) as it is put */
  if (dc_buf_reserve(out, 5 * 10 + zc.len + dir.len + mant.len + streams.len)) { dc_buf_free(&zc); goto oom; }
  dc_buf_varint(out, counts.len);
  dc_buf_varint(out, zc.len);
  dc_buf_put(out, zc.p, zc.len);
  dc_buf_free(&zc);
  dc_buf_varint(out, mant.len);
  dc_buf_varint(out, dir.len);
  dc_buf_put(out, dir.p, dir.len);
  dc_buf_put(out, mant.p, mant.len);
  dc_buf_put(out, streams.p, streams.len);
  if (counts.oom || mant.oom || streams.oom || dir.oom || out->oom) goto oom;
  goto done;
oom:
  rc = DC_ENOMEM;
  dc_error_set(err, rc, "out of memory encoding a chunk of %llu nonzeros", (unsigned long long)ch->nnz);
done:
  free(nper);
  free(at);
  free(syms);
  free(bc);
  free(pcode);
  free(side);
  for (uint32_t g = 0; g < 4; g++) free(ws[g].w);
  dc_buf_free(&counts);
  dc_buf_free(&mant);
  dc_buf_free(&streams);
  dc_buf_free(&dir);
  return rc;
}
