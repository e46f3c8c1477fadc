/*
** cv_util.h — what the files of the converter share: errors, allocation,
** the interrupt flag, the gene/string hash map.
**
** Every function that can fail returns 0 on success and -1 on failure after
** writing a message that names the thing (file, dataset, cell, tile) and the
** reason into a cv_err.  Nothing in the converter exits or aborts on bad
** input; main() prints the message and removes whatever was half written.
*/
#ifndef CV_UTIL_H
#define CV_UTIL_H
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most cells per tile convert writes (--tile-cells); append and merge refuse a dataset's
** dc_meta.tile_cells above it, verify reports it (chunks per tile: DC_MAX_CHUNKS). */
#define CV_MAX_TILE_CELLS (1 << 24)

typedef struct cv_err {
  char msg[2048];
} cv_err;

int cv_fail(cv_err *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prefixes the message already in e with "prefix: ". Returns -1. */
int cv_prefix(cv_err *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Writes s to f as text any terminal and any UTF-8 reader of stderr takes: valid UTF-8 as it is,
** control bytes and bytes that are not valid UTF-8 (a damaged input's, quoted in a message) as
** \xNN.  So a message stays one line of text, whatever it quotes. */
void cv_put_text(FILE *f, const char *s);

/* A message "FROM: ..." becomes "TO: ..." (a scratch file named as the dataset it serves). */
void cv_rename_subject(cv_err *e, const char *from, const char *to);

/* malloc/realloc that fail into a cv_err (NULL + message). */
void *cv_malloc(size_t n, cv_err *e);
void *cv_calloc(size_t n, size_t sz, cv_err *e);
/* madvise(MADV_HUGEPAGE) on the 2 MiB-aligned interior of a buffer of 4 MiB or more */
void cv_advise_huge(void *p, size_t n);
int cv_grow(void **p, size_t *cap, size_t need, size_t elem, cv_err *e);
char *cv_strdup(const char *s, cv_err *e);

/* Set by SIGINT/SIGTERM (cv_install_signals); long loops poll it. */
extern volatile sig_atomic_t cv_interrupted;
void cv_install_signals(void);
int cv_check_interrupt(cv_err *e);

/* String -> index hash map (open addressing; keys copied). */
typedef struct cv_map {
  char **keys;
  uint32_t *vals;
  size_t cap, n;
} cv_map;
/* Looks up key; returns 1 and *val if found, 0 if not. */
int cv_map_get(const cv_map *m, const char *key, uint32_t *val);
/* Pointer to the value of key, or NULL if absent. */
uint32_t *cv_map_ref(cv_map *m, const char *key);
/* Inserts key -> val (key must be absent). 0 or -1 (out of memory). */
int cv_map_put(cv_map *m, const char *key, uint32_t val, cv_err *e);
void cv_map_free(cv_map *m);

/* The identity of a gene whose name repeats, the one rule of convert, append and merge
** (docs/converter.md "Genes across inputs"): the k-th gene of a name (k = 0, 1, ...) in an
** input's original order is gene (name, k), and joins the k-th gene of that name in another.
** rep[i] = k for gene i of names[0 .. n-1] (NULL: ""), counted in the order of orig (NULL:
** the list's own order; equal orig values by index), genes with skip[i] set (skip may be
** NULL) left out and given UINT32_MAX.  An input's order is its var order; a dataset's is
** genes.orig_index (cv_dataset_gene_reps, merge_store.h), not its stored order. */
int cv_gene_repeats(const char *const *names, uint64_t n, const uint8_t *skip, const int64_t *orig, uint32_t *rep,
                    cv_err *e);

/* The tiles of one input: its n cells in k = ceil(n / tile_cells)
** consecutive tiles of tile_cells cells, the last one shorter, so that no
** tile spans two inputs (a single input's tiles are cells t * tile_cells ..).
** Rows are the input's own (local). */
typedef struct cv_split {
  uint64_t n, k, size;
} cv_split;
static inline cv_split cv_split_make(uint64_t n, uint32_t tile_cells) {
  cv_split s;
  s.n = n;
  s.size = tile_cells;
  s.k = (n + tile_cells - 1) / tile_cells;
  return s;
}
/* First row of tile t (t = k gives n). */
static inline uint64_t cv_split_start(const cv_split *s, uint64_t t) {
  return t * s->size < s->n ? t * s->size : s->n;
}
/* The tile of row r (< n). */
static inline uint64_t cv_split_tile(const cv_split *s, uint64_t r) { return r / s->size; }

/* Sorts one row's n entries (gene ix[k] < n_genes, distinct; value vx[k]) by gene, in
** place: insertion for short rows, else an LSD radix sort of (gene << 32 | value) keys whose
** digits split the gene bits evenly, at most 8 bits a pass for rows shorter than 2,048
** entries (clearing and summing a histogram costs like a row that long) and 11 beyond.  ka
** and kb: scratch of n keys each.  Linear in n; convert's and merge's one row sort. */
void cv_sort_row(uint32_t *ix, uint32_t *vx, uint64_t n, uint32_t n_genes, uint64_t *ka, uint64_t *kb);
/* Rows [i0, i1) of a CSR (indptr, ix, vx), each cell's genes mapped by remap (NULL: as they
** are) and put in order by cv_sort_row, cell by cell so the work stays in cache.  *ka, *kb:
** the caller's scratch of *kcap keys each, grown to the longest row. */
int cv_sort_rows(const uint64_t *indptr, uint32_t *ix, uint32_t *vx, uint64_t i0, uint64_t i1, const uint32_t *remap,
                 uint32_t n_genes, uint64_t **ka, uint64_t **kb, size_t *kcap, cv_err *e);

/* Monotonic seconds. */
double cv_now(void);
/* Number of online cores (at least 1). */
int cv_ncores(void);
/* 1 if s is valid UTF-8 of length n. */
int cv_utf8_valid(const char *s, size_t n);

/* The candidate closest to name (case-insensitive edit distance), or NULL
** when none is close (more than max(2, len/3) edits): "did you mean". */
const char *cv_closest(const char *name, const char *const *cands, int n);
/* 'a', 'b', 'c' into buf (cut with "... (N in all)" when it does not fit). */
void cv_list_names(char *buf, size_t cap, const char *const *names, int n);

/* s (NULL: "") as a JSON string, quoted and escaped, to o. */
void cv_json_print(FILE *o, const char *s);

/* dc_meta gene_order (go: its text, NULL when absent) against the genes table's orig_index
** column (has_col): written together, so an older dataset has neither.  One without the other,
** or an order other than 'union', is damage: returns 1 and says why in buf (verify reports it;
** export, genes and to_anndata refuse the original order then), else 0 (buf ""). */
int cv_gene_order_problem(const char *go, int has_col, char *buf, size_t cap);
/* A buffer for cv_gene_order_problem's message: room for each of them with an order name of
** up to 200 bytes. */
#define CV_GENE_ORDER_WHY 300

#endif
