/*
** dc_agg.c — count statistics per (group, gene); see dc_agg.h.
**
** Slots.  dc_pool_for gives an item no thread number, so an item takes a
** free slot (compare-and-swap on its busy flag) for the time it runs and
** gives it back: at most dc_pool_size items run at once, so with that many
** slots a free one is always found at once (with fewer, an item waits for
** one).  A slot holds its accumulators, sized lazily to the groups in use
** (zeroed by the thread that first uses the slot in a run, so the zeroing is
** spread over the pool), its decoder and its decoded-chunk scratch.
*/
#include "dc_agg.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
  uint64_t *acc;          /* 2 per entry: sum, n_expr */
  double *lsum;
  uint64_t *ncells;
  size_t acc_cap, ls_cap, nc_cap;   /* entries allocated */
  uint32_t ready;         /* groups zeroed for the current options */
  dc_decoder *dec;
  int64_t *ip;
  int32_t *ix, *vx;
  size_t ip_cap, ix_cap, vx_cap;
  uint32_t *cnt;          /* a chunk decoded in part: its cells' nonzeros, */
  void **rowp;            /* each cell's place (n_cells row addresses, then value addresses) */
  uint8_t *keep;          /* and which cells it places (dc_part_rows) */
  size_t cnt_cap, rowp_cap, keep_cap;
  int busy;               /* atomic */
  int failed;             /* out of memory growing (set on the slot's thread) */
} slot;

struct dc_agg {
  dc_agg_opts o;
  uint32_t n_groups;
  int n_slots;
  slot *slots;
};

uint64_t dc_agg_group_bytes(const dc_agg_opts *o) {
  uint64_t per = 16 + (o->log1p ? 8 : 0);
  return (uint64_t)o->n_out * per * (uint64_t)(o->slots > 0 ? o->slots : 1) + 8;
}

static int check_opts(const dc_agg_opts *o, dc_error *err) {
  if (!o->panel && o->n_out != o->n_genes) {
    dc_error_set(err, DC_EARG, "aggregate: %u output genes without a panel, but %u genes", o->n_out, o->n_genes);
    return DC_EARG;
  }
  if (o->slots < 1 || o->slots > 4096) {
    dc_error_set(err, DC_EARG, "aggregate: slots must be 1..4096, got %d", o->slots);
    return DC_EARG;
  }
  if (o->log1p && !(o->scale > 0)) {
    dc_error_set(err, DC_EARG, "aggregate: the log1p scale must be > 0");
    return DC_EARG;
  }
  if (o->panel) {
    for (uint32_t g = 0; g < o->n_genes; g++)
      if (o->panel[g] < -1 || (o->panel[g] >= 0 && (uint32_t)o->panel[g] >= o->n_out)) {
        dc_error_set(err, DC_EARG, "aggregate: panel entry of gene %u is %d, outside -1..%u", g, o->panel[g],
                     o->n_out ? o->n_out - 1 : 0);
        return DC_EARG;
      }
  }
  return DC_OK;
}

static void slot_free(slot *s) {
  free(s->acc); free(s->lsum); free(s->ncells);
  free(s->ip); free(s->ix); free(s->vx); free(s->cnt); free(s->rowp); free(s->keep);
  dc_decoder_free(s->dec);
  memset(s, 0, sizeof *s);
}

dc_agg *dc_agg_new(const dc_agg_opts *o, dc_error *err) {
  if (check_opts(o, err) != DC_OK) return NULL;
  dc_agg *a = calloc(1, sizeof *a);
  if (!a) { dc_error_set(err, DC_ENOMEM, "aggregate: out of memory"); return NULL; }
  if (dc_agg_reset(a, o, err) != DC_OK) { dc_agg_free(a); return NULL; }
  return a;
}

void dc_agg_free(dc_agg *a) {
  if (!a) return;
  for (int k = 0; k < a->n_slots; k++) slot_free(&a->slots[k]);
  free(a->slots);
  free(a);
}

int dc_agg_reset(dc_agg *a, const dc_agg_opts *o, dc_error *err) {
  if (check_opts(o, err) != DC_OK) return DC_EARG;
  if (o->slots > a->n_slots) {
    slot *ns = realloc(a->slots, (size_t)o->slots * sizeof *ns);
    if (!ns) { dc_error_set(err, DC_ENOMEM, "aggregate: out of memory"); return DC_ENOMEM; }
    memset(ns + a->n_slots, 0, (size_t)(o->slots - a->n_slots) * sizeof *ns);
    a->slots = ns;
    a->n_slots = o->slots;
  }
  a->o = *o;
  a->n_groups = 0;
  for (int k = 0; k < a->n_slots; k++) { a->slots[k].ready = 0; a->slots[k].failed = 0; a->slots[k].busy = 0; }
  return DC_OK;
}

int dc_agg_set_groups(dc_agg *a, uint32_t n_groups, dc_error *err) {
  if (n_groups <= a->n_groups) return DC_OK;
  if ((uint64_t)n_groups * a->o.n_out > ((uint64_t)1 << 40)) {
    dc_error_set(err, DC_ENOMEM, "aggregate: %u groups x %u genes is too many", n_groups, a->o.n_out);
    return DC_ENOMEM;
  }
  a->n_groups = n_groups;
  return DC_OK;
}

uint32_t dc_agg_groups(const dc_agg *a) { return a->n_groups; }

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need == 0) need = 1;             /* never a NULL array */
  if (need <= *cap) return 1;
  size_t n = need + need / 4;
  void *q = realloc(*p, n * elem);
  if (!q) return 0;
  *p = q;
  *cap = n;
  return 1;
}

/* Sizes and zeroes the slot for the current groups (on the slot's thread). */
static int slot_ready(dc_agg *a, slot *s) {
  uint32_t G = a->n_groups;
  if (s->ready >= G) return 1;
  size_t n_out = a->o.n_out, from = (size_t)s->ready * n_out, to = (size_t)G * n_out;
  if (!grow((void **)&s->acc, &s->acc_cap, 2 * to, sizeof *s->acc)) return 0;
  if (!grow((void **)&s->ncells, &s->nc_cap, G, sizeof *s->ncells)) return 0;
  if (a->o.log1p && !grow((void **)&s->lsum, &s->ls_cap, to, sizeof *s->lsum)) return 0;
  memset(s->acc + 2 * from, 0, 2 * (to - from) * sizeof *s->acc);
  memset(s->ncells + s->ready, 0, (size_t)(G - s->ready) * sizeof *s->ncells);
  if (a->o.log1p) memset(s->lsum + from, 0, (to - from) * sizeof *s->lsum);
  s->ready = G;
  return 1;
}

/* The kernel: rows of one decoded chunk into slot s. */
static int add_rows(const dc_agg *a, slot *s, uint32_t n_cells, const int64_t *ip, const int32_t *ix,
                    const int32_t *vx, const int32_t *group, uint32_t chunk, dc_error *err) {
  const uint32_t n_genes = a->o.n_genes, n_out = a->o.n_out;
  const int32_t *panel = a->o.panel;
  const int log1p_on = a->o.log1p;
  const double scale = a->o.scale;
  for (uint32_t c = 0; c < n_cells; c++) {
    int32_t g = group[c];
    if (g < 0) continue;
    if ((uint32_t)g >= a->n_groups) {
      dc_error_set(err, DC_EARG, "chunk %u: cell %u has group %d, but there are %u groups", chunk, c, g, a->n_groups);
      return DC_EARG;
    }
    int64_t lo = ip[c], hi = ip[c + 1];
    if (hi < lo) {
      dc_error_set(err, DC_ECORRUPT, "chunk %u: row offsets decrease at cell %u", chunk, c);
      return DC_ECORRUPT;
    }
    s->ncells[g]++;
    uint64_t *A = s->acc + 2 * (size_t)g * n_out;
    if (!panel && !log1p_on) {
      for (int64_t e = lo; e < hi; e++) {
        uint32_t j = (uint32_t)ix[e], v = (uint32_t)vx[e];
        if (j >= n_genes) goto bad_gene;
        A[2 * (size_t)j] += v;
        A[2 * (size_t)j + 1] += v != 0;
      }
      continue;
    }
    if (log1p_on) {
      uint64_t total = 0;
      for (int64_t e = lo; e < hi; e++) total += (uint32_t)vx[e];
      double *L = s->lsum + (size_t)g * n_out;
      for (int64_t e = lo; e < hi; e++) {
        uint32_t j = (uint32_t)ix[e], v = (uint32_t)vx[e];
        if (j >= n_genes) goto bad_gene;
        int64_t p = panel ? panel[j] : (int64_t)j;
        if (p < 0) continue;
        A[2 * p] += v;
        A[2 * p + 1] += v != 0;
        if (v) L[p] += log1p((double)v / (double)total * scale);
      }
    } else {
      for (int64_t e = lo; e < hi; e++) {
        uint32_t j = (uint32_t)ix[e], v = (uint32_t)vx[e];
        if (j >= n_genes) goto bad_gene;
        int32_t p = panel[j];
        if (p < 0) continue;
        A[2 * (size_t)p] += v;
        A[2 * (size_t)p + 1] += v != 0;
      }
    }
  }
  return DC_OK;
bad_gene:
  dc_error_set(err, DC_ECORRUPT, "chunk %u: a gene index is >= the dataset's %u genes", chunk, n_genes);
  return DC_ECORRUPT;
}

/* Pointer p moved by -k elements without array arithmetic (the decoder adds
** k back before writing), as ext/reader.c does. */
#define SHIFT_BACK(T, p, k) ((T *)((uintptr_t)(p) - (uintptr_t)(k) * sizeof(T)))

/* A rans chunk of whose cells at most three quarters are in a group: the streams of the whole
** chunk decoded, only those cells placed (dc_chunk_place; the others' rows stay empty, and
** add_rows passes them by).  Placing skips the cell loop of the cells left out, most of a
** decode: a pseudobulk of one cell type, whose cells are spread over every chunk, decodes a
** fraction.  Measured on the reference data: 0.65x the time at 2-12% of the cells, 0.84x at
** 52%, 0.92x at 70%, 0.98x at 86% (docs/codec-design.md, stop 67). */
static int run_part(dc_agg *a, slot *s, dc_agg_job *j, const dc_chunk_info *ci) {
  const uint32_t n = ci->n_cells;
  if (!grow((void **)&s->cnt, &s->cnt_cap, (size_t)n + 1, sizeof *s->cnt) ||
      !grow((void **)&s->rowp, &s->rowp_cap, 2 * (size_t)n + 2, sizeof *s->rowp) ||
      !grow((void **)&s->ip, &s->ip_cap, (size_t)n + 1, sizeof *s->ip) ||
      !grow((void **)&s->keep, &s->keep_cap, (size_t)n, 1))
    goto oom;
  int rc = dc_chunk_cell_nnz(s->dec, j->buf, j->len, j->hdr, j->chunk, s->cnt, &j->err);
  if (rc != DC_OK) return rc;
  for (uint32_t c = 0; c < n; c++) s->keep[c] = j->group[c] >= 0;
  int64_t total = dc_part_nnz(s->cnt, s->keep, n, ci->nnz);
  if (total < 0) {
    dc_error_set(&j->err, DC_ECORRUPT, "chunk %u: its cells' counts exceed its %llu nonzeros", j->chunk,
                 (unsigned long long)ci->nnz);
    return DC_ECORRUPT;
  }
  if (!grow((void **)&s->ix, &s->ix_cap, (size_t)total, sizeof *s->ix) ||
      !grow((void **)&s->vx, &s->vx_cap, (size_t)total, sizeof *s->vx))
    goto oom;
  int32_t **ix = (int32_t **)s->rowp;
  void **val = s->rowp + n;
  dc_part_rows(s->cnt, s->keep, n, s->ix, s->vx, s->ip, ix, val);
  dc_place pl = { (int32_t *const *)ix, (void *const *)val, 0, NULL, NULL, NULL };
  if ((rc = dc_chunk_place(s->dec, j->buf, j->len, j->hdr, j->chunk, &pl, &j->err)) != DC_OK) return rc;
  return add_rows(a, s, n, s->ip, s->ix, s->vx, j->group, j->chunk, &j->err);
oom:
  dc_error_set(&j->err, DC_ENOMEM, "chunk %u: out of memory for its decoded rows", j->chunk);
  return DC_ENOMEM;
}

static int run_job(dc_agg *a, slot *s, dc_agg_job *j) {
  if (!slot_ready(a, s)) {
    dc_error_set(&j->err, DC_ENOMEM, "chunk %u: out of memory for %u groups x %u genes", j->chunk, a->n_groups,
                 a->o.n_out);
    return DC_ENOMEM;
  }
  if (!j->group) {
    dc_error_set(&j->err, DC_EARG, "chunk %u: no groups given", j->chunk);
    return DC_EARG;
  }
  if (!j->buf) {
    if (!j->indptr || (!j->indices && j->indptr[j->n_cells] > 0) || (!j->values && j->indptr[j->n_cells] > 0)) {
      dc_error_set(&j->err, DC_EARG, "chunk %u: neither bytes nor decoded rows", j->chunk);
      return DC_EARG;
    }
    return add_rows(a, s, j->n_cells, j->indptr, j->indices, j->values, j->group, j->chunk, &j->err);
  }
  const dc_tile_hdr *h = j->hdr;
  if (!h || j->chunk >= h->n_chunks) {
    dc_error_set(&j->err, DC_EARG, "chunk %u: not a chunk of the tile", j->chunk);
    return DC_EARG;
  }
  if (h->n_genes > a->o.n_genes) {
    dc_error_set(&j->err, DC_ECORRUPT, "chunk %u: the tile has %u genes, the dataset %u", j->chunk, h->n_genes,
                 a->o.n_genes);
    return DC_ECORRUPT;
  }
  const dc_chunk_info *ci = &h->chunk[j->chunk];
  if (!s->dec && !(s->dec = dc_decoder_new())) goto oom;
  if (h->codec == DC_CODEC_RANS) {
    uint32_t in = 0;
    for (uint32_t c = 0; c < ci->n_cells; c++) in += j->group[c] >= 0;
    if ((uint64_t)in * 4 <= (uint64_t)ci->n_cells * 3) return run_part(a, s, j, ci);
  }
  if (!grow((void **)&s->ip, &s->ip_cap, (size_t)ci->n_cells + 1, sizeof *s->ip)) goto oom;
  if (!grow((void **)&s->ix, &s->ix_cap, ci->nnz ? (size_t)ci->nnz : 1, sizeof *s->ix)) goto oom;
  if (!grow((void **)&s->vx, &s->vx_cap, ci->nnz ? (size_t)ci->nnz : 1, sizeof *s->vx)) goto oom;
  s->ip[0] = (int64_t)ci->nnz_before;
  dc_out out;
  out.indptr = SHIFT_BACK(int64_t, s->ip, ci->first_cell);
  out.indices = SHIFT_BACK(int32_t, s->ix, ci->nnz_before);
  out.values = SHIFT_BACK(int32_t, s->vx, ci->nnz_before);
  out.values_f32 = 0;
  int rc = dc_chunk_decode(s->dec, j->buf, j->len, h, j->chunk, &out, &j->err);
  if (rc != DC_OK) return rc;
  int64_t base = s->ip[0], prev = 0;
  for (uint32_t c = 0; c <= ci->n_cells; c++) {
    int64_t v = s->ip[c] - base;
    if (v < prev || (uint64_t)v > ci->nnz) {
      dc_error_set(&j->err, DC_ECORRUPT, "chunk %u: decoded row offsets are inconsistent", j->chunk);
      return DC_ECORRUPT;
    }
    s->ip[c] = prev = v;
  }
  if ((uint64_t)prev != ci->nnz) {
    dc_error_set(&j->err, DC_ECORRUPT, "chunk %u: decoded row offsets are inconsistent", j->chunk);
    return DC_ECORRUPT;
  }
  return add_rows(a, s, ci->n_cells, s->ip, s->ix, s->vx, j->group, j->chunk, &j->err);
oom:
  dc_error_set(&j->err, DC_ENOMEM, "chunk %u: out of memory for its decoded rows", j->chunk);
  return DC_ENOMEM;
}

typedef struct run_ctx { dc_agg *a; dc_agg_job *jobs; } run_ctx;

static slot *acquire(dc_agg *a) {
  for (;;) {
    for (int k = 0; k < a->n_slots; k++) {
      int z = 0;
      if (__atomic_load_n(&a->slots[k].busy, __ATOMIC_RELAXED) == 0 &&
          __atomic_compare_exchange_n(&a->slots[k].busy, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return &a->slots[k];
    }
  }
}

static void run_item(void *arg, size_t i) {
  run_ctx *rc = arg;
  slot *s = acquire(rc->a);
  dc_agg_job *j = &rc->jobs[i];
  j->rc = run_job(rc->a, s, j);
  if (j->rc != DC_OK) j->err.code = j->rc;
  __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

int dc_agg_run(dc_agg *a, dc_pool *p, dc_agg_job *jobs, size_t n_jobs) {
  run_ctx ctx = { a, jobs };
  for (size_t i = 0; i < n_jobs; i++) { jobs[i].rc = DC_OK; jobs[i].err.code = DC_OK; jobs[i].err.msg[0] = 0; }
  if (p) dc_pool_for(p, n_jobs, run_item, &ctx);
  else for (size_t i = 0; i < n_jobs; i++) run_item(&ctx, i);
  for (size_t i = 0; i < n_jobs; i++)
    if (jobs[i].rc != DC_OK) return jobs[i].rc;
  return DC_OK;
}

int dc_agg_finish(dc_agg *a, dc_agg_result *out, dc_error *err) {
  slot *s0 = &a->slots[0];
  if (!slot_ready(a, s0)) {
    dc_error_set(err, DC_ENOMEM, "aggregate: out of memory for %u groups x %u genes", a->n_groups, a->o.n_out);
    return DC_ENOMEM;
  }
  size_t n_out = a->o.n_out;
  for (int k = 1; k < a->n_slots; k++) {
    slot *s = &a->slots[k];
    if (!s->ready) continue;
    size_t n = (size_t)s->ready * n_out;
    for (size_t e = 0; e < 2 * n; e++) s0->acc[e] += s->acc[e];
    for (uint32_t g = 0; g < s->ready; g++) s0->ncells[g] += s->ncells[g];
    if (a->o.log1p)
      for (size_t e = 0; e < n; e++) s0->lsum[e] += s->lsum[e];
    s->ready = 0;          /* zeroed again on its next use */
  }
  out->n_groups = a->n_groups;
  out->n_out = a->o.n_out;
  out->n_cells = s0->ncells;
  out->acc = s0->acc;
  out->sum_log1p = a->o.log1p ? s0->lsum : NULL;
  return DC_OK;
}
