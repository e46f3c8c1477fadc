/*
** bench_decode.c — size and decode speed of the tile codec.
**
**   build/bench_decode [--csr DIR] [--threads 1,2] [--codec rans|zstd] [--level N]
**                      [--chunks N] [--tile-cells N] [--runs N] [--no-zstd] [--rans-v2]
**                      [--one-bucket auto|on|off] [--pairs auto|on|off] [--json]
**
** Without --csr it generates the reference tile (10,000 cells x 61,497 genes,
** about 23.46 M nonzeros: lognormal gene abundances sigma 2.2, lognormal
** library sizes of mean 3,500 sigma 0.6, multinomial counts, fixed seed).
** With --csr DIR it reads raw little-endian indptr.u64 (n_cells+1),
** indices.u32 and data.u32 (bench/dump_csr.py writes them from an h5ad).
** Either way genes are renumbered by decreasing total counts first, as the
** converter does, and tiles hold 10,000 cells (--tile-cells N: N each, the
** last one shorter; a tile that lacks a clear share of the genes then has a
** gene map, as the small tiles of a dataset of many small inputs have).
**
** Reports bits per nonzero, encode time, decode time of all tiles (median of
** --runs) for each thread count, memset of the int32 output (indices+values)
** in the same run as the baseline, the time to gather 5,000 shuffled cells out
** of a decoded tile, and the same size/decode numbers for the published zstd
** design (zstd level 19 over byte planes, as many chunks) unless --no-zstd;
** the zstd decodes are interleaved with the others run by run, so that load
** from other processes hits both alike.  It prints the decoder path that ran
** (DC_SIMD=avx512|avx2|scalar forces one; "simd" in the JSON).
** With --json the last line is one JSON object.  --cpu times with the calling
** thread's CPU time instead of the wall clock (for 1-thread runs on a busy
** machine; multi-thread numbers are then meaningless).  --one-bucket on|off
** forces the rans model's one rank bucket on or off (dc_encode_opts
** .rans_one_bucket; "one_bucket" in the JSON); auto, the default, lets the
** encoder choose as the converter's does.  --pairs on|off codes every context
** that can be in pairs, or none (dc_encode_opts .rans_pairs; "pairs" in the
** JSON); auto, the default, pairs a context where that pays (the converter's).
** Chunks per tile: by default the converter's (dc_encode_chunks: 8, one per
** DC_CHUNK_NNZ nonzeros in tiles of more, at most DC_CHUNKS_MAX, at least
** DC_CHUNK_CELLS cells each where a tile has room for two; the reference tile
** gets 19); --chunks N gives exactly N.  The JSON's "chunks": the first tile's.
*/
#include "dc_codec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t tile_cells = 10000u;   /* --tile-cells */

#ifdef DC_CTX_PROFILE
extern uint64_t dc_ctx_prof[4];   /* ext/codec/dc_ctx_decompress.c, in the stages build */
#endif
static clockid_t bench_clock = CLOCK_MONOTONIC;   /* --cpu: this thread's CPU time */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(bench_clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) { fprintf(stderr, "bench_decode: out of memory (%zu bytes)\n", n); exit(2); }
  return p;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------ matrix */
typedef struct {
  uint32_t n_cells, n_genes;
  uint64_t *indptr;
  uint32_t *indices, *data;
} csr_t;

static uint64_t rng_s = 1;   /* --seed; seed 1 gives 23,472,816 nonzeros */
static inline uint64_t rng(void) {   /* xoshiro-ish splitmix */
  uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double unif(void) { return (double)(rng() >> 11) * (1.0 / 9007199254740992.0); }
static double normal(void) {
  double u = unif(), v = unif();
  if (u < 1e-300) u = 1e-300;
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Walker alias table over n weights. */
typedef struct { double *prob; uint32_t *alias; uint32_t n; } alias_t;
static void alias_build(alias_t *a, const double *w, uint32_t n) {
  double s = 0;
  for (uint32_t i = 0; i < n; i++) s += w[i];
  a->n = n;
  a->prob = xmalloc(n * sizeof(double));
  a->alias = xmalloc(n * sizeof(uint32_t));
  uint32_t *small = xmalloc(n * sizeof(uint32_t)), *large = xmalloc(n * sizeof(uint32_t));
  uint32_t ns = 0, nl = 0;
  for (uint32_t i = 0; i < n; i++) {
    a->prob[i] = w[i] * n / s;
    if (a->prob[i] < 1) small[ns++] = i; else large[nl++] = i;
  }
  while (ns && nl) {
    uint32_t l = small[--ns], g = large[--nl];
    a->alias[l] = g;
    a->prob[g] -= 1 - a->prob[l];
    if (a->prob[g] < 1) small[ns++] = g; else large[nl++] = g;
  }
  while (nl) { uint32_t g = large[--nl]; a->prob[g] = 1; a->alias[g] = g; }
  while (ns) { uint32_t l = small[--ns]; a->prob[l] = 1; a->alias[l] = l; }
  free(small); free(large);
}
static inline uint32_t alias_draw(const alias_t *a) {
  uint64_t r = rng();
  uint32_t i = (uint32_t)(((r >> 32) * a->n) >> 32);
  double u = (double)(r & 0xffffffffu) * (1.0 / 4294967296.0);
  return u < a->prob[i] ? i : a->alias[i];
}

/* The reference tile (genes in generation order; renumbered later). */
static void make_reference(csr_t *m) {
  const uint32_t C = 10000, G = 61497;
  double *w = xmalloc(G * sizeof(double));
  for (uint32_t g = 0; g < G; g++) w[g] = exp(2.2 * normal());
  alias_t al;
  alias_build(&al, w, G);
  free(w);
  const double sigma = 0.6, mu = log(3500.0);   /* library sizes: exp(N(log 3500, 0.6)) */
  uint32_t *cnt = calloc(G, sizeof(uint32_t));
  uint32_t *touched = xmalloc(G * sizeof(uint32_t));
  size_t cap = 32u << 20;
  m->n_cells = C; m->n_genes = G;
  m->indptr = xmalloc((C + 1) * sizeof(uint64_t));
  m->indices = xmalloc(cap * sizeof(uint32_t));
  m->data = xmalloc(cap * sizeof(uint32_t));
  uint64_t k = 0;
  m->indptr[0] = 0;
  for (uint32_t c = 0; c < C; c++) {
    uint32_t lib = (uint32_t)llround(exp(mu + sigma * normal()));
    uint32_t nt = 0;
    for (uint32_t r = 0; r < lib; r++) {
      uint32_t g = alias_draw(&al);
      if (cnt[g]++ == 0) touched[nt++] = g;
    }
    if (k + nt > cap) {
      cap *= 2;
      m->indices = realloc(m->indices, cap * sizeof(uint32_t));
      m->data = realloc(m->data, cap * sizeof(uint32_t));
      if (!m->indices || !m->data) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    for (uint32_t t = 0; t < nt; t++) {
      m->indices[k + t] = touched[t];
      m->data[k + t] = cnt[touched[t]];
      cnt[touched[t]] = 0;
    }
    k += nt;
    m->indptr[c + 1] = k;
  }
  free(cnt); free(touched); free(al.prob); free(al.alias);
}

static int read_file(const char *dir, const char *name, void **p, size_t *n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "bench_decode: %s: %s\n", path, strerror(errno)); return -1; }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  *p = xmalloc((size_t)sz);
  if (sz > 0 && fread(*p, 1, (size_t)sz, f) != (size_t)sz) {
    fprintf(stderr, "bench_decode: %s: short read\n", path);
    fclose(f);
    return -1;
  }
  fclose(f);
  *n = (size_t)sz;
  return 0;
}

static int load_csr(const char *dir, csr_t *m) {
  void *ip, *ix, *dt;
  size_t nip, nix, ndt;
  if (read_file(dir, "indptr.u64", &ip, &nip) || read_file(dir, "indices.u32", &ix, &nix) ||
      read_file(dir, "data.u32", &dt, &ndt))
    return -1;
  if (nip < 8 || nip % 8 || nix % 4 || nix != ndt) {
    fprintf(stderr, "bench_decode: %s: inconsistent file sizes\n", dir);
    return -1;
  }
  m->indptr = ip; m->indices = ix; m->data = dt;
  m->n_cells = (uint32_t)(nip / 8 - 1);
  uint64_t nnz = nix / 4;
  if (m->indptr[0] != 0 || m->indptr[m->n_cells] != nnz) {
    fprintf(stderr, "bench_decode: %s: indptr does not span the data\n", dir);
    return -1;
  }
  uint32_t mx = 0;
  for (uint64_t j = 0; j < nnz; j++) if (m->indices[j] > mx) mx = m->indices[j];
  m->n_genes = nnz ? mx + 1 : 0;
  return 0;
}

static const uint64_t *g_tot;
static int cmp_gene(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  if (g_tot[x] != g_tot[y]) return g_tot[x] > g_tot[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Renumbers genes by decreasing total counts; cells come out sorted because
** the nonzeros go through a counting sort by new gene number (to CSC) and
** back (to CSR), both stable: O(nnz + genes + cells). */
static void renumber(csr_t *m) {
  uint32_t G = m->n_genes, C = m->n_cells;
  uint64_t nnz = m->indptr[C];
  uint64_t *tot = calloc(G + 1, sizeof(uint64_t));
  uint32_t *order = xmalloc((G + 1) * sizeof(uint32_t));
  uint32_t *rank = xmalloc((G + 1) * sizeof(uint32_t));
  for (uint64_t j = 0; j < nnz; j++) tot[m->indices[j]] += m->data[j];
  for (uint32_t g = 0; g < G; g++) order[g] = g;
  g_tot = tot;
  qsort(order, G, sizeof *order, cmp_gene);
  for (uint32_t r = 0; r < G; r++) rank[order[r]] = r;
  /* CSR -> CSC by rank (cell ids and values) */
  uint64_t *cp = calloc((size_t)G + 1, sizeof(uint64_t));
  uint32_t *cc = xmalloc(nnz * sizeof(uint32_t) + 4), *cv = xmalloc(nnz * sizeof(uint32_t) + 4);
  for (uint64_t j = 0; j < nnz; j++) cp[rank[m->indices[j]] + 1]++;
  for (uint32_t g = 0; g < G; g++) cp[g + 1] += cp[g];
  for (uint32_t c = 0; c < C; c++)
    for (uint64_t j = m->indptr[c]; j < m->indptr[c + 1]; j++) {
      uint64_t d = cp[rank[m->indices[j]]]++;
      cc[d] = c;
      cv[d] = m->data[j];
    }
  /* CSC -> CSR: walking genes in rank order appends to each cell in order */
  uint64_t *fill = xmalloc(((size_t)C + 1) * sizeof(uint64_t));
  memcpy(fill, m->indptr, ((size_t)C + 1) * sizeof(uint64_t));
  uint64_t j = 0;
  for (uint32_t g = 0; g < G; g++)
    for (; j < cp[g]; j++) {     /* cp[g] is now the end of column g */
      uint64_t d = fill[cc[j]]++;
      m->indices[d] = g;
      m->data[d] = cv[j];
    }
  free(fill); free(cc); free(cv); free(cp); free(tot); free(order); free(rank);
}

/* ------------------------------------------------------------ one codec */
typedef struct {
  uint32_t n_tiles;
  uint8_t **blob;
  size_t *len;
  dc_tile_hdr *hdr;
  uint64_t bytes;
  double encode_ms;
} encoded_t;

typedef struct {     /* decoded output of every tile */
  int64_t **indptr;
  int32_t **indices, **values;
} outbufs_t;

static int rans_v2;   /* --rans-v2: the version-2 model (one symbol per step), for comparison */
static int one_bucket; /* --one-bucket on|off: one rank bucket forced (1) or never (-1); auto 0 */
static int pairs;      /* --pairs on|off: pair contexts everywhere they can be (1) or nowhere (-1); auto 0 */
/* chunks: at most that many per tile, at least DC_CHUNK_CELLS cells each as the converter makes
** them (0), or exactly that many (--chunks N) */
static uint32_t chunks_exact;
static void encode_all(const csr_t *m, int codec, int level, uint32_t chunks, encoded_t *e) {
  e->n_tiles = (m->n_cells + tile_cells - 1) / tile_cells;
  if (!e->n_tiles) e->n_tiles = 1;
  e->blob = xmalloc(e->n_tiles * sizeof *e->blob);
  e->len = xmalloc(e->n_tiles * sizeof *e->len);
  e->hdr = xmalloc(e->n_tiles * sizeof *e->hdr);
  e->bytes = 0;
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  o.codec = codec;
  o.level = level;
  o.n_chunks = chunks;
  if (chunks_exact) o.chunk_cells = 0;
  o.threads = 0;
  o.rans_v2 = rans_v2;
  o.rans_one_bucket = one_bucket;
  o.rans_pairs = pairs;
  double t0 = now_ms();
  for (uint32_t t = 0; t < e->n_tiles; t++) {
    uint32_t a = t * tile_cells, n = m->n_cells - a < tile_cells ? m->n_cells - a : tile_cells;
    dc_csr in = {n, m->n_genes, m->indptr + a, m->indices, m->data};
    dc_error err;
    if (dc_tile_encode(&in, &o, &e->blob[t], &e->len[t], &err) != DC_OK) {
      fprintf(stderr, "bench_decode: encode (%s) tile %u: %s\n", dc_codec_name(codec), t, err.msg);
      exit(1);
    }
    if (dc_tile_parse(e->blob[t], e->len[t], &e->hdr[t], &err) != DC_OK) {
      fprintf(stderr, "bench_decode: parse tile %u: %s\n", t, err.msg);
      exit(1);
    }
    e->bytes += e->len[t];
  }
  e->encode_ms = now_ms() - t0;
}

static void free_encoded(encoded_t *e) {
  for (uint32_t t = 0; t < e->n_tiles; t++) free(e->blob[t]);
  free(e->blob); free(e->len); free(e->hdr);
}

static void alloc_out(const encoded_t *e, outbufs_t *o) {
  o->indptr = xmalloc(e->n_tiles * sizeof *o->indptr);
  o->indices = xmalloc(e->n_tiles * sizeof *o->indices);
  o->values = xmalloc(e->n_tiles * sizeof *o->values);
  for (uint32_t t = 0; t < e->n_tiles; t++) {
    o->indptr[t] = xmalloc((e->hdr[t].n_cells + 1) * sizeof(int64_t));
    o->indices[t] = xmalloc(e->hdr[t].nnz * sizeof(int32_t));
    o->values[t] = xmalloc(e->hdr[t].nnz * sizeof(int32_t));
    memset(o->indices[t], 0, e->hdr[t].nnz * sizeof(int32_t));   /* fault pages in */
    memset(o->values[t], 0, e->hdr[t].nnz * sizeof(int32_t));
  }
}
static void free_out(const encoded_t *e, outbufs_t *o) {
  for (uint32_t t = 0; t < e->n_tiles; t++) { free(o->indptr[t]); free(o->indices[t]); free(o->values[t]); }
  free(o->indptr); free(o->indices); free(o->values);
}

#ifdef DC_AB
/* make bench-ab: the core library of revision BASE, its symbols renamed base_ (scripts/bench-ab.sh) */
dc_pool *base_dc_pool_new(int n_threads);
int base_dc_pool_decode(dc_pool *p, dc_job *jobs, size_t n);
void base_dc_pool_free(dc_pool *p);
#endif

/* Decodes every chunk of every tile with pool p through run (dc_pool_decode, or BASE's); ms. */
static double decode_with(const encoded_t *e, const outbufs_t *o, dc_pool *p, dc_job *jobs,
                          int (*run)(dc_pool *, dc_job *, size_t)) {
  size_t nj = 0;
  for (uint32_t t = 0; t < e->n_tiles; t++)
    for (uint32_t c = 0; c < e->hdr[t].n_chunks; c++) {
      dc_job *j = &jobs[nj++];
      memset(j, 0, sizeof *j);
      j->buf = e->blob[t]; j->len = e->len[t]; j->hdr = &e->hdr[t]; j->chunk = c;
      j->out.indptr = o->indptr[t]; j->out.indices = o->indices[t]; j->out.values = o->values[t];
    }
  double t0 = now_ms();
  int rc = run(p, jobs, nj);
  double ms = now_ms() - t0;
  if (rc != DC_OK) {
    for (size_t i = 0; i < nj; i++)
      if (jobs[i].rc) { fprintf(stderr, "bench_decode: decode: %s\n", jobs[i].err.msg); break; }
    exit(1);
  }
  return ms;
}

static double decode_all(const encoded_t *e, const outbufs_t *o, dc_pool *p, dc_job *jobs) {
  return decode_with(e, o, p, jobs, dc_pool_decode);
}

static size_t n_jobs_of(const encoded_t *e) {
  size_t n = 0;
  for (uint32_t t = 0; t < e->n_tiles; t++) n += e->hdr[t].n_chunks;
  return n ? n : 1;
}

static void verify(const csr_t *m, const encoded_t *e, const outbufs_t *o, const char *what) {
  for (uint32_t t = 0; t < e->n_tiles; t++) {
    uint64_t base = m->indptr[(uint64_t)t * tile_cells];
    for (uint32_t c = 0; c <= e->hdr[t].n_cells; c++)
      if ((uint64_t)o->indptr[t][c] != m->indptr[(uint64_t)t * tile_cells + c] - base) {
        fprintf(stderr, "bench_decode: %s: tile %u cell %u: indptr mismatch\n", what, t, c);
        exit(1);
      }
    for (uint64_t j = 0; j < e->hdr[t].nnz; j++)
      if ((uint32_t)o->indices[t][j] != m->indices[base + j] || (uint32_t)o->values[t][j] != m->data[base + j]) {
        fprintf(stderr, "bench_decode: %s: tile %u nonzero %llu: mismatch\n", what, t, (unsigned long long)j);
        exit(1);
      }
  }
}

/* ------------------------------------------------------------ main */
int main(int argc, char **argv) {
  char simd_msg[192];
  if (dc_simd_env_check(simd_msg, sizeof simd_msg)) {
    fprintf(stderr, "bench_decode: %s\n", simd_msg);
    return 2;
  }
  const char *csr_dir = NULL;
  int gen_only = 0, threads[16], n_threads = 0, codec = DC_CODEC_RANS, level = 0, runs = 7, json = 0, cmp_zstd = 1;
  uint32_t chunks = DC_CHUNKS_MAX;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--csr") && v) { csr_dir = v; i++; }
    else if (!strcmp(a, "--threads") && v) {
      char *s = strdup(v), *tok, *save = NULL;
      for (tok = strtok_r(s, ",", &save); tok && n_threads < 16; tok = strtok_r(NULL, ",", &save))
        threads[n_threads++] = atoi(tok) > 0 ? atoi(tok) : 1;
      free(s);
      i++;
    } else if (!strcmp(a, "--codec") && v) {
      codec = dc_codec_from_name(v);
      if (!codec) { fprintf(stderr, "bench_decode: unknown codec '%s' (rans|zstd|rans-v1)\n", v); return 2; }
      i++;
    } else if (!strcmp(a, "--level") && v) { level = atoi(v); i++; }
    else if (!strcmp(a, "--chunks") && v) { chunks = (uint32_t)atoi(v); chunks_exact = 1; i++; }
    else if (!strcmp(a, "--tile-cells") && v && atoi(v) > 0) { tile_cells = (uint32_t)atoi(v); i++; }
    else if (!strcmp(a, "--runs") && v) { runs = atoi(v) > 0 ? atoi(v) : 1; i++; }
    else if (!strcmp(a, "--no-zstd")) cmp_zstd = 0;
    else if (!strcmp(a, "--rans-v2")) rans_v2 = 1;
    else if (!strcmp(a, "--one-bucket") && v && (!strcmp(v, "auto") || !strcmp(v, "on") || !strcmp(v, "off"))) {
      one_bucket = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? -1 : 0;
      i++;
    }
    else if (!strcmp(a, "--pairs") && v && (!strcmp(v, "auto") || !strcmp(v, "on") || !strcmp(v, "off"))) {
      pairs = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? -1 : 0;
      i++;
    }
    else if (!strcmp(a, "--seed") && v) { rng_s = strtoull(v, NULL, 0); i++; }
    else if (!strcmp(a, "--gen-only")) gen_only = 1;
    else if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--cpu")) bench_clock = CLOCK_THREAD_CPUTIME_ID;
    else {
      fprintf(stderr, "usage: %s [--csr DIR] [--threads 1,2] [--codec rans|zstd] [--level N] "
                      "[--chunks N] [--tile-cells N] [--runs N] [--no-zstd] [--rans-v2] [--one-bucket auto|on|off] [--pairs auto|on|off] [--json]\n",
              argv[0]);
      return 2;
    }
  }
  if (!n_threads) { threads[0] = 1; threads[1] = 2; n_threads = 2; }
  if (codec == DC_CODEC_ZSTD) cmp_zstd = 0;

  csr_t m;
  double t0 = now_ms();
  if (csr_dir) { if (load_csr(csr_dir, &m)) return 1; }
  else make_reference(&m);
  double gen_ms = now_ms() - t0;
  t0 = now_ms();
  renumber(&m);
  double renum_ms = now_ms() - t0;
  uint64_t nnz = m.indptr[m.n_cells];
  printf("input: %s, %u cells x %u genes, %llu nonzeros (%.1f nnz/cell); load %.0f ms, renumber %.0f ms\n",
         csr_dir ? csr_dir : "reference tile", m.n_cells, m.n_genes, (unsigned long long)nnz,
         m.n_cells ? (double)nnz / m.n_cells : 0.0, gen_ms, renum_ms);

  if (gen_only) return 0;
  encoded_t e;
  encode_all(&m, codec, level, chunks, &e);
  double bpn = nnz ? 8.0 * e.bytes / nnz : 0;
  printf("%s: %llu bytes in %u tile(s) of %llu chunk(s) in all, %.3f bits/nnz, encode %.0f ms\n", dc_codec_name(codec),
         (unsigned long long)e.bytes, e.n_tiles, (unsigned long long)n_jobs_of(&e), bpn, e.encode_ms);
  outbufs_t o;
  alloc_out(&e, &o);
  dc_job *jobs = xmalloc(n_jobs_of(&e) * sizeof(dc_job));

  /* warm-up and correctness check */
  dc_pool *p1 = dc_pool_new(1);
  decode_all(&e, &o, p1, jobs);
  verify(&m, &e, &o, dc_codec_name(codec));

  /* the published design, encoded now so that its decodes interleave */
  double z_bpn = 0, z_dec[16] = {0}, z_enc = 0;
  uint64_t z_bytes = 0;
  int z_level = 19;
  encoded_t z;
  dc_job *zj = NULL;
  if (cmp_zstd) {
    encode_all(&m, DC_CODEC_ZSTD, z_level, chunks, &z);
    z_bytes = z.bytes;
    z_bpn = nnz ? 8.0 * z.bytes / nnz : 0;
    z_enc = z.encode_ms;
    zj = xmalloc(n_jobs_of(&z) * sizeof(dc_job));
    decode_all(&z, &o, p1, zj);
    verify(&m, &z, &o, "zstd");
  }
  const char *simd = dc_simd_name(dc_simd_level());
  printf("decoder path: %s (best on this CPU: %s; DC_SIMD forces one)\n", simd,
         dc_simd_name(dc_simd_supported(DC_SIMD_AVX512) ? DC_SIMD_AVX512
                      : dc_simd_supported(DC_SIMD_AVX2) ? DC_SIMD_AVX2 : DC_SIMD_SCALAR));

  dc_pool *pools[16];
  for (int k = 0; k < n_threads; k++) pools[k] = dc_pool_new(threads[k]);
  double *tv = xmalloc((size_t)runs * sizeof(double));
  double dec_ms[16], memset_ms;
  double *ms_v = xmalloc((size_t)runs * sizeof(double));
  double (*dv)[64] = calloc(16, sizeof *dv), (*zdv)[64] = calloc(16, sizeof *zdv);
  /* interleave the measurements so that load from other processes hits all alike */
  for (int r = 0; r < runs && r < 64; r++) {
    double a = now_ms();
    for (uint32_t t = 0; t < e.n_tiles; t++) {
      memset(o.indices[t], r & 0xff, e.hdr[t].nnz * sizeof(int32_t));
      memset(o.values[t], r & 0xff, e.hdr[t].nnz * sizeof(int32_t));
    }
    ms_v[r] = now_ms() - a;
    for (int k = 0; k < n_threads; k++) dv[k][r] = decode_all(&e, &o, pools[k], jobs);
    if (cmp_zstd)
      for (int k = 0; k < n_threads; k++) zdv[k][r] = decode_all(&z, &o, pools[k], zj);
  }
  if (runs > 64) runs = 64;
  memset_ms = median(ms_v, runs);   /* median() sorts: [0] is then the minimum */
  double memset_min = ms_v[0], dec_min[16];
  for (int k = 0; k < n_threads; k++) { dec_ms[k] = median(dv[k], runs); dec_min[k] = dv[k][0]; }
  if (cmp_zstd) decode_all(&e, &o, p1, jobs);
  verify(&m, &e, &o, dc_codec_name(codec));
  printf("memset of the int32 output (%.1f MB): %.2f ms (median of %d)\n", nnz * 8 / 1e6, memset_ms, runs);
  for (int k = 0; k < n_threads; k++)
    printf("decode %d thread(s): %.2f ms = %.2fx memset, %.3f ns/nnz, speed-up %.2fx vs %d thread(s)"
           " (fastest run %.2f ms = %.2fx the fastest memset)\n",
           threads[k], dec_ms[k], dec_ms[k] / memset_ms, nnz ? dec_ms[k] * 1e6 / nnz : 0, dec_ms[0] / dec_ms[k],
           threads[0], dec_min[k], dec_min[k] / memset_min);

#ifdef DC_AB
  /* this tree's decoder against BASE's, the two alternating run by run (ABBA) on the same tiles
  ** and output buffers (BASE's output checked first) */
  for (int k = 0; k < n_threads; k++) {
    dc_pool *bp = base_dc_pool_new(threads[k]);
    if (!bp) { fprintf(stderr, "bench_decode: no pool\n"); return 1; }
    decode_with(&e, &o, bp, jobs, base_dc_pool_decode);
    verify(&m, &e, &o, "BASE's decoder");
    double bv[64], tv2[64];
    int nb = 0, nt = 0;
    for (int r = 0; r < 2 * runs; r++) {       /* ABBA: neither goes first more often */
      if ((r & 3) == 1 || (r & 3) == 2) tv2[nt++] = decode_all(&e, &o, pools[k], jobs);
      else bv[nb++] = decode_with(&e, &o, bp, jobs, base_dc_pool_decode);
    }
    verify(&m, &e, &o, dc_codec_name(codec));
    double bmed = median(bv, runs), tmed = median(tv2, runs);
    printf("A/B %d thread(s), %d alternating runs each: BASE %.2f ms, this tree %.2f ms (medians): %.3fx the time;"
           " fastest %.2f and %.2f ms: %.3fx\n", threads[k], runs, bmed, tmed, tmed / bmed, bv[0], tv2[0],
           tv2[0] / bv[0]);
    base_dc_pool_free(bp);
  }
#endif

  /* where one decode's time goes: the codec's stage timers, in the build made for it */
  double stage_ms[3] = {0, 0, 0};
  int stages = 0;
#ifdef DC_CTX_PROFILE
  if (codec == DC_CODEC_RANS) {
    stages = 1;
    for (int r = 0; r < runs; r++) {
      for (int i = 0; i < 3; i++) __atomic_store_n(&dc_ctx_prof[i], 0, __ATOMIC_RELAXED);
      decode_all(&e, &o, p1, jobs);
      for (int i = 0; i < 3; i++) {
        double v = (double)__atomic_load_n(&dc_ctx_prof[i], __ATOMIC_RELAXED) / 1e6;
        if (r == 0 || v < stage_ms[i]) stage_ms[i] = v;
      }
    }
    static const char *const names[3] = {"tables and bucket counts", "streams", "cells (stage 3)"};
    printf("stages of a decode on 1 thread (thread CPU time, the minimum of %d per stage):", runs);
    for (int i = 0; i < 3; i++)
      printf("%s %s %.2f ms = %.3f ns/nnz", i ? "," : "", names[i], stage_ms[i], nnz ? stage_ms[i] * 1e6 / nnz : 0);
    printf("\n");
  }
#endif

  /* gather 5,000 shuffled cells out of the first decoded tile */
  uint32_t tc = e.hdr[0].n_cells, ng = 5000;
  double gather_ms = 0;
  if (tc) {
    uint32_t *cells = xmalloc(ng * sizeof(uint32_t)), *tiles = calloc(ng, sizeof(uint32_t));
    for (uint32_t i = 0; i < ng; i++) cells[i] = i < tc ? i : (uint32_t)(rng() % tc);
    for (uint32_t i = ng - 1; i > 0; i--) {
      uint32_t j = (uint32_t)(rng() % (i + 1)), x = cells[i];
      cells[i] = cells[j]; cells[j] = x;
    }
    dc_decoded src = {tc, o.indptr[0], o.indices[0], o.values[0]};
    uint64_t gn = dc_gather_nnz(&src, tiles, cells, ng);
    int64_t *gip = xmalloc((ng + 1) * sizeof(int64_t));
    int32_t *gix = xmalloc(gn * 4), *gvv = xmalloc(gn * 4);
    for (int r = 0; r < runs; r++) {
      double a = now_ms();
      dc_gather(p1, &src, tiles, cells, ng, gip, gix, gvv);
      tv[r] = now_ms() - a;
    }
    gather_ms = median(tv, runs);
    printf("gather 5,000 shuffled cells (%llu nonzeros) from a decoded tile, 1 thread: %.2f ms\n",
           (unsigned long long)gn, gather_ms);
    free(cells); free(tiles); free(gip); free(gix); free(gvv);
  }

  /* the published design, timed in the same runs */
  if (cmp_zstd) {
    printf("zstd-%d byte planes (published design): %llu bytes, %.3f bits/nnz (%.2fx of %s), encode %.0f ms\n",
           z_level, (unsigned long long)z_bytes, z_bpn, bpn / z_bpn, dc_codec_name(codec), z_enc);
    for (int k = 0; k < n_threads; k++) {
      z_dec[k] = median(zdv[k], runs);
      printf("  zstd decode %d thread(s): %.2f ms = %.2fx memset; %s is %.2fx faster\n",
             threads[k], z_dec[k], z_dec[k] / memset_ms, dc_codec_name(codec), z_dec[k] / dec_ms[k]);
    }
    free(zj);
    free_encoded(&z);
  }

  if (json) {
    printf("{\"input\":\"%s\",\"codec\":\"%s\",\"level\":%d,\"chunks\":%u,\"n_tiles\":%u,"
           "\"nnz\":%llu,\"n_cells\":%u,\"n_genes\":%u,\"bytes\":%llu,\"bits_per_nnz\":%.4f,"
           "\"encode_ms\":%.1f,\"memset_ms\":%.3f,\"runs\":%d,\"simd\":\"%s\",\"tile_cells\":%u",
           csr_dir ? csr_dir : "reference", dc_codec_name(codec), level, e.n_tiles ? e.hdr[0].n_chunks : 0, e.n_tiles,
           (unsigned long long)nnz, m.n_cells, m.n_genes, (unsigned long long)e.bytes, bpn, e.encode_ms,
           memset_ms, runs, simd, tile_cells);
    for (int k = 0; k < n_threads; k++) printf(",\"decode_%dt_ms\":%.3f", threads[k], dec_ms[k]);
    for (int k = 0; k < n_threads; k++)
      if (threads[k] == 1) printf(",\"decode_1t_over_memset\":%.3f", dec_ms[k] / memset_ms);
    if (n_threads >= 2) printf(",\"speedup_%dt\":%.3f", threads[1], dec_ms[0] / dec_ms[1]);
    if (one_bucket) printf(",\"one_bucket\":\"%s\"", one_bucket > 0 ? "on" : "off");
    if (pairs) printf(",\"pairs\":\"%s\"", pairs > 0 ? "on" : "off");
    printf(",\"gather_5000_ms\":%.3f", gather_ms);
    if (stages)
      printf(",\"stage_tables_counts_ms\":%.3f,\"stage_streams_ms\":%.3f,\"stage_cells_ms\":%.3f", stage_ms[0],
             stage_ms[1], stage_ms[2]);
    if (cmp_zstd) {
      printf(",\"zstd_level\":%d,\"zstd_bytes\":%llu,\"zstd_bits_per_nnz\":%.4f,\"zstd_encode_ms\":%.1f", z_level,
             (unsigned long long)z_bytes, z_bpn, z_enc);
      for (int k = 0; k < n_threads; k++) printf(",\"zstd_decode_%dt_ms\":%.3f", threads[k], z_dec[k]);
    }
    printf("}\n");
  }
  for (int k = 0; k < n_threads; k++) dc_pool_free(pools[k]);
  dc_pool_free(p1);
  free(jobs); free(tv); free(ms_v); free(dv); free(zdv);
  free_out(&e, &o);
  free_encoded(&e);
  free(m.indptr); free(m.indices); free(m.data);
  return 0;
}
