/*
** dc_ctx_tables.c — the decoding tables of codec `rans` (id 3): read a tile's model (its
** shared section) and build the slot tables of the stream decoders (single and pair contexts,
** vector and portable layouts) and the symbol records of stage 3 (dc_ctx_tables.h), with a
** cache per decoder of the last few tiles' tables.  The model's layout: docs/format.md.
*/
#include <stdlib.h>
#include <string.h>
#include "dc_ctx_tables.h"

/* A decoder keeps the tables of its last few tiles: a thread of a pool
** decodes chunks of several tiles in turn (a batch of shuffled cells, a
** merged dataset), and building a tile's tables again for every chunk made
** decoding 1.2-1.6x slower on tiles of 1,000 cells (tables take ~25-65 us). */
#define TAB_SETS 4
typedef struct ctx_cache {
  ctx_state set[TAB_SETS];
  uint64_t used[TAB_SETS];           /* last use, 0: empty */
  uint64_t clock;
} ctx_cache;

static void state_clear(ctx_state *s) {
  free(s->key);
  dc_mem_free(s->blk, s->blk_map);
  free(s->map);
  memset(s, 0, sizeof *s);
}

void dc_ctx_decoder_free(void *state) {
  ctx_cache *cc = state;
  if (!cc) return;
  for (int i = 0; i < TAB_SETS; i++) state_clear(&cc->set[i]);
  free(cc);
}

static void set_info(dc_ctx_sinfo *o, uint32_t id, int esc) {
  memset(o, 0, sizeof *o);
  o->nb = DC_CTX_SLOW;
  if (esc) { o->gmask = 2; return; }
  uint32_t gc = id / DC_CTX_NCODES, cc = id % DC_CTX_NCODES;
  uint32_t gb = dc_vbits(gc), cb = dc_vbits(cc);
  uint64_t gbase = dc_vbase(gc), cbase = dc_vbase(cc);
  o->gbase = (uint16_t)gc;
  o->cbase = (uint16_t)cc;
  o->gmask = 1;
  if (gbase + (1ull << gb) > (1u << 16) || cbase + (1ull << cb) > (1u << 16) || gb + cb > 28) return;
  o->gbase = (uint16_t)gbase;
  o->cbase = (uint16_t)cbase;
  o->gmask = (uint16_t)((1u << gb) - 1);
  o->nb = (uint8_t)(gb + cb);
  o->gb = (uint8_t)gb;
}

/* Fills slots [start, start + f) of one context's table with symbol i of
** frequency f.  In blocks of 16 (loops of a constant count, which compilers
** vectorise) while the last block stays inside the context's slots: a block
** may run past start + f into slots that the next symbols fill afterwards.
** The fill was most of a table set's build (52 contexts x 4,096 slots). */
static void fill_slots(uint8_t *t, int vec, uint32_t start, uint32_t f, uint32_t i) {
  uint32_t j = 0;
  if (vec) {
    uint32_t *t32 = (uint32_t *)(void *)t + start, e0 = f | i << 24;
    for (; j < f && start + j + 16 <= DC_CTX_M; j += 16) {
      uint32_t b[16];
      for (uint32_t k = 0; k < 16; k++) b[k] = e0 + ((j + k) << 12);
      memcpy(t32 + j, b, sizeof b);
    }
    for (; j < f; j++) t32[j] = e0 + (j << 12);
  } else {
    uint16_t *tf = (uint16_t *)(void *)t + start, *tb = (uint16_t *)(void *)t + DC_CTX_M + start;
    uint8_t *ts = t + 4 * DC_CTX_M + start;
    for (; j < f && start + j + 16 <= DC_CTX_M; j += 16) {
      uint16_t bf[16], bb[16];
      uint8_t bs[16];
      for (uint32_t k = 0; k < 16; k++) {
        bf[k] = (uint16_t)f;
        bb[k] = (uint16_t)(j + k);
        bs[k] = (uint8_t)i;
      }
      memcpy(tf + j, bf, sizeof bf);
      memcpy(tb + j, bb, sizeof bb);
      memcpy(ts + j, bs, sizeof bs);
    }
    for (; j < f; j++) {
      tf[j] = (uint16_t)f;
      tb[j] = (uint16_t)j;
      ts[j] = (uint8_t)i;
    }
  }
}

/* Fills slots [start, start + f) of a pair context's table with the pair (s0, s1). */
static void fill_pairs(uint8_t *t, int vec, uint32_t start, uint32_t f, uint32_t s0, uint32_t s1) {
  if (vec) {
    uint32_t *t32 = (uint32_t *)(void *)t + start, e0 = f | s0 << 24;
    uint8_t *t1 = t + 4 * DC_CTX_M + start;
    for (uint32_t j = 0; j < f; j++) {
      t32[j] = e0 + (j << 12);
      t1[j] = (uint8_t)s1;
    }
  } else {
    uint16_t *tf = (uint16_t *)(void *)t + start, *tb = (uint16_t *)(void *)t + DC_CTX_M + start;
    uint8_t *ts = t + 4 * DC_CTX_M + 2 * (size_t)start;
    for (uint32_t j = 0; j < f; j++) {
      tf[j] = (uint16_t)f;
      tb[j] = (uint16_t)j;
      ts[2 * j] = (uint8_t)s0;
      ts[2 * j + 1] = (uint8_t)s1;
    }
  }
}

/* build_tables' readers of the model: the next varint into V, or fail as truncated; the next
** frequency - 1 into fr[I] */
#define NEXT_VARINT(V)                                                          \
  do {                                                                          \
    why = "truncated";                                                          \
    if (!(k = dc_get_varint(p, pe, &(V)))) goto fail;                           \
    p += k;                                                                     \
  } while (0)
#define NEXT_FREQ(I)                                                            \
  do {                                                                          \
    uint64_t fv_;                                                               \
    NEXT_VARINT(fv_);                                                           \
    why = "frequencies do not sum to 2^12";                                     \
    if (fv_ >= DC_CTX_M - 1) goto fail;                                         \
    fr[I] = (uint32_t)fv_ + 1;                                                  \
  } while (0)

/* The model's head (docs/format.md, the shared section): version, buckets, shift, map flag,
** cell-size limits and the gene map, checked.  *map: the map's bitmap (n_genes bits) among p's
** bytes, or NULL when the tile has none; m->n_local is set.  Returns the bytes after the head, or
** NULL with *why.  Both the decoder's tables and dc_ctx_gene_set read it here. */
static const uint8_t *model_head(const uint8_t *p, const uint8_t *pe, uint32_t n_genes, uint32_t *ver,
                                 dc_ctx_model *m, const uint8_t **map, const char **why) {
  size_t k;
  *map = NULL;
  *why = "truncated";
  if (pe - p < 5) return NULL;
  *why = "unknown model version";
  *ver = p[0];
  if (*ver != 2 && *ver != 3) return NULL;
  m->nq = p[1];
  m->nrb = p[2];
  m->shift = p[3];
  m->mapped = p[4];
  p += 5;
  *why = "bad context counts";
  if (m->nq < 1 || m->nq > DC_CTX_MAXQ || m->nrb < 1 || m->nrb > DC_CTX_MAXRB || m->shift < 1 ||
      m->shift > 16 || m->nrb + m->shift > 33 || m->mapped > 1)
    return NULL;
  m->n_ctx = m->nq * m->nrb;
  for (uint32_t b = 0; b + 1 < m->nq; b++) {
    uint64_t v;
    *why = "truncated";
    if (!(k = dc_get_varint(p, pe, &v))) return NULL;
    p += k;
    *why = "bad cell-size buckets";
    if (v > UINT32_MAX || (b && v <= m->q_lim[b - 1])) return NULL;
    m->q_lim[b] = (uint32_t)v;
  }
  m->q_lim[m->nq - 1] = UINT32_MAX;
  m->n_local = n_genes;
  if (m->mapped) {
    uint64_t nl, set = 0;
    *why = "truncated";
    if (!(k = dc_get_varint(p, pe, &nl))) return NULL;
    p += k;
    size_t nb = ((size_t)n_genes + 7) / 8;
    *why = "bad gene map";
    if (nl > n_genes || (size_t)(pe - p) < nb) return NULL;
    for (size_t i = 0; i < nb; i += 8) {                /* 8 bytes at a time, no call per byte */
      uint64_t w = 0;
      memcpy(&w, p + i, nb - i < 8 ? nb - i : 8);
      w = w - ((w >> 1) & 0x5555555555555555ull);
      w = (w & 0x3333333333333333ull) + ((w >> 2) & 0x3333333333333333ull);
      set += (((w + (w >> 4)) & 0x0f0f0f0f0f0f0f0full) * 0x0101010101010101ull) >> 56;
    }
    if (set != nl || (n_genes % 8 && p[nb - 1] >> (n_genes % 8))) return NULL;
    *map = p;
    p += nb;
    m->n_local = (uint32_t)nl;
  }
  *why = "bad context counts";
  if (m->nrb != dc_ctx_rb(m->n_local ? m->n_local - 1 : 0, m->shift) + 1) return NULL;
  return p;
}

int dc_ctx_gene_set(const uint8_t *sh, size_t sh_len, uint32_t n_genes, uint8_t **set, dc_error *err) {
  size_t raw_len;
  *set = NULL;
  uint8_t *raw = dc_unpack_shared(NULL, sh, sh_len, 16u << 20, 0, &raw_len, err);
  if (!raw) return err->code;
  dc_ctx_model m;
  uint32_t ver;
  const uint8_t *map;
  const char *why;
  int rc = DC_OK;
  if (!model_head(raw, raw + raw_len, n_genes, &ver, &m, &map, &why)) {
    rc = DC_ECORRUPT;
    dc_error_set(err, rc, "rans tables: %s", why);
  } else if (map) {
    size_t nb = ((size_t)n_genes + 7) / 8;
    if ((*set = malloc(nb ? nb : 1))) memcpy(*set, map, nb);
    else dc_error_set(err, rc = DC_ENOMEM, "out of memory");
  }
  free(raw);
  return rc;
}

static int build_tables(dc_decoder *d, ctx_state *s, const uint8_t *sh, size_t sh_len, uint32_t n_genes,
                        int vec, uint32_t c, dc_error *err) {
  size_t raw_len, k;
  const char *why;
  uint8_t *raw = dc_unpack_shared(d, sh, sh_len, 16u << 20, c, &raw_len, err);
  if (!raw) return err->code;
  int rc = DC_ECORRUPT;
  const uint8_t *p = raw, *pe = raw + raw_len, *bits;
  dc_ctx_model *m = &s->m;
  uint32_t ver;
  free(s->map);
  s->map = NULL;
  if (!(p = model_head(p, pe, n_genes, &ver, m, &bits, &why))) goto fail;
  s->ver = ver;
  s->tstride = TAB_BYTES(vec, ver);
  if (bits) {
    s->map = malloc((m->n_local ? m->n_local : 1) * sizeof *s->map);
    if (!s->map) { rc = DC_ENOMEM; why = "out of memory"; goto fail; }
    uint32_t n = 0;
    for (uint32_t g = 0; g < n_genes; g++)
      if (bits[g / 8] >> (g % 8) & 1) s->map[n++] = g;
  }
  /* the set's arrays in one block, 64-byte aligned each: in huge pages (a fresh process built
  ** its first sets 4 KiB page by page: a quarter of a new DataLoader worker's page faults), and
  ** kept for the next tile this set serves when it is large enough */
  {
    size_t o_tab = ((size_t)m->n_ctx * (sizeof *s->nsym + 1) + 63) & ~(size_t)63;
    size_t o_inf = o_tab + (((size_t)m->n_ctx * s->tstride + 63) & ~(size_t)63);
    size_t o_pinf = o_inf + (((size_t)m->n_ctx * 256 * sizeof *s->inf + 63) & ~(size_t)63);
    size_t o_nbt = o_pinf + (vec ? 0 : (((size_t)m->nq * PF_BYTES + 63) & ~(size_t)63));
    size_t o_slow = o_nbt + (vec ? (((size_t)m->n_ctx * 256 + 63) & ~(size_t)63) : 0);
    size_t need = o_slow + 2 * (size_t)m->n_ctx;
    if (need > s->blk_cap) {
      dc_mem_free(s->blk, s->blk_map);
      s->blk = dc_mem_alloc_huge(need, &s->blk_map);
      s->blk_cap = s->blk ? (s->blk_map ? s->blk_map : need) : 0;
    }
    s->nsym = NULL; s->pk = NULL; s->tab = NULL; s->inf = NULL; s->pinf = NULL; s->nbt = NULL; s->has_slow = NULL;
    s->pesc = NULL;
    if (!s->blk) { s->blk_map = 0; rc = DC_ENOMEM; why = "out of memory"; goto fail; }
    uint8_t *b = s->blk;
    memset(b, 0, o_tab);                       /* nsym: 0 = an unused context; pk */
    memset(b + o_inf, 0, need - o_inf);        /* inf, pinf, nbt, has_slow (the slot table is filled) */
    s->nsym = (uint16_t *)(void *)b;
    s->pk = b + (size_t)m->n_ctx * sizeof *s->nsym;
    s->tab = b + o_tab;
    s->inf = (dc_ctx_sinfo *)(void *)(b + o_inf);
    s->pinf = vec ? NULL : b + o_pinf;
    s->nbt = vec ? b + o_nbt : NULL;
    s->has_slow = b + o_slow;
    s->pesc = b + o_slow + m->n_ctx;
  }
  s->vec = vec;
  for (uint32_t x = 0; x < m->n_ctx; x++) {
    uint64_t n1;
    why = "truncated";
    if (!(k = dc_get_varint(p, pe, &n1))) goto fail;
    p += k;
    why = "too many symbols in a context";
    if (n1 > (ver == 2 ? DC_CTX_MAXSYM : DC_CTX_MAXSYM3) + 1) goto fail;
    if (n1 == 0) continue;                    /* unused: a stream that uses it is corrupt */
    uint32_t n = (uint32_t)n1 - 1;
    uint8_t *t = s->tab + (size_t)x * s->tstride;
    dc_ctx_sinfo *inf = s->inf + (size_t)x * 256;
    /* the portable stage 3's fields of this context: rank bucket x % nrb of
    ** cell-size bucket x / nrb (entries k0 + symbol) */
    uint32_t *p32 = vec ? NULL : (uint32_t *)(void *)(s->pinf + (size_t)(x / m->nrb) * PF_BYTES);
    uint8_t *p8 = vec ? NULL : (uint8_t *)(p32 + PF_U32);
    const uint32_t k0 = (x % m->nrb) * 256;
    /* the symbols (version 2: each followed by its frequency - 1; version 3: all first) */
    uint32_t fr[DC_CTX_MAXSYM + 1];
    int64_t prev = -1;
    for (uint32_t i = 0; i <= n; i++) {
      uint64_t dv = 0;
      if (i < n) {
        why = "truncated";
        if (!(k = dc_get_varint(p, pe, &dv))) goto fail;
        p += k;
        why = "bad symbol";
        if (dv >= DC_CTX_NID || prev + 1 + (int64_t)dv >= (int64_t)DC_CTX_NID) goto fail;
        prev = prev + 1 + (int64_t)dv;
      }
      if (ver == 2) NEXT_FREQ(i);
      set_info(&inf[i], (uint32_t)prev, i == n);
      if (vec) s->nbt[(size_t)x * 256 + i] = inf[i].nb;
      if (!vec) {
        const dc_ctx_sinfo *e = &inf[i];
        uint32_t k = k0 + i;
        p32[k] = e->gbase + 1u;
        p32[PF_GM + k] = e->gmask;
        p32[PF_CB + k] = e->cbase;
        p32[PF_CM + k] = e->nb == DC_CTX_SLOW ? 0 : (1u << (e->nb - e->gb)) - 1;
        p8[k] = e->nb;
        p8[PF_GB + k] = e->gb;
      }
      s->has_slow[x] |= i < n && inf[i].nb == DC_CTX_SLOW;
    }
    uint64_t K = 0;
    if (ver == 3) {
      NEXT_VARINT(K);
      why = "bad pair table";
      if (K == 1 || K > DC_CTX_KMAX || K > n1) goto fail;
    }
    uint32_t start = 0;
    if (!K) {                                 /* one symbol per step */
      for (uint32_t i = 0; i <= n; i++) {
        if (ver == 3) NEXT_FREQ(i);
        why = "frequencies do not sum to 2^12";
        if (start + fr[i] > DC_CTX_M) goto fail;
        fill_slots(t, vec, start, fr[i], i);
        start += fr[i];
      }
    } else {                                  /* pairs: ranks -> symbols, then (K + 1)^2 + 1 codes */
      uint8_t sym[DC_CTX_KMAX];
      uint8_t seen[DC_CTX_MAXSYM + 1] = {0};
      for (uint32_t r = 0; r < K; r++) {
        uint64_t v;
        NEXT_VARINT(v);
        why = "bad pair table";
        if (v >= n1 || seen[v]) goto fail;
        seen[v] = 1;
        sym[r] = (uint8_t)v;
        if (v == n) s->pesc[x] = 1;           /* the escape is one of the pair codes' symbols */
      }
      for (uint32_t i = 0; i <= (K + 1) * (K + 1); i++) {
        uint64_t fv;
        NEXT_VARINT(fv);
        why = "frequencies do not sum to 2^12";
        if (fv > DC_CTX_M - start || fv == DC_CTX_M) goto fail;
        uint32_t a = i / (K + 1), b = i % (K + 1);   /* the last code: a = K + 1, the escape */
        fill_pairs(t, vec, start, (uint32_t)fv, a < K ? sym[a] : DC_CTX_PAIR_ESC, a < K + 1 && b < K ? sym[b] : DC_CTX_PAIR_ESC);
        start += (uint32_t)fv;
      }
    }
    why = "frequencies do not sum to 2^12";
    if (start != DC_CTX_M) goto fail;
    s->nsym[x] = (uint16_t)n1;
    s->pk[x] = (uint8_t)K;
  }
  why = "trailing bytes";
  if (p != pe) goto fail;
  free(raw);
  return DC_OK;
fail:
  free(raw);
  dc_error_set(err, rc, "chunk %u: rans tables: %s", c, why);
  return rc;
}

int dc_ctx_get_tables(dc_decoder *d, const uint8_t *sh, size_t sh_len, uint32_t n_genes, int vec,
                      uint32_t c, ctx_state **out, dc_error *err) {
  ctx_cache *cc = d->ctx;
  if (!cc) {
    cc = d->ctx = calloc(1, sizeof *cc);
    if (!cc) {
      dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory", c);
      return DC_ENOMEM;
    }
  }
  int victim = 0;
  for (int i = 0; i < TAB_SETS; i++) {
    ctx_state *t = &cc->set[i];
    if (t->key && t->key_len == sh_len && t->key_genes == n_genes && t->vec == vec && !memcmp(t->key, sh, sh_len)) {
      cc->used[i] = ++cc->clock;
      *out = t;
      return DC_OK;
    }
    if (cc->used[i] < cc->used[victim]) victim = i;
  }
  ctx_state *s = &cc->set[victim];
  cc->used[victim] = 0;             /* empty until built */
  free(s->key);
  s->key = NULL;
  s->key_len = 0;
  int rc = build_tables(d, s, sh, sh_len, n_genes, vec, c, err);
  if (rc) return rc;
  s->key = malloc(sh_len ? sh_len : 1);
  if (!s->key) {
    dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory", c);
    return DC_ENOMEM;
  }
  memcpy(s->key, sh, sh_len);
  s->key_len = sh_len;
  s->key_genes = n_genes;
  cc->used[victim] = ++cc->clock;
  *out = s;
  return DC_OK;
}
