/*
** cells_blocks.c — the decoded-block cache of a schema's obs statistics (dc_obsstats.h) (cells_blocks.h).
** Pure C: no SQLite.
*/
#include "cells_blocks.h"
#include "dc_spare.h"

#include <stdlib.h>
#include <string.h>

#define HEAD ((sizeof(cells_dblock) + 15) / 16 * 16)

/* the block, its order and the scratch come from the process's reserve of spare buffers
** (dc_spare.h): a new connection's first queries then reuse memory a closed one had touched */
static void dblock_free(cells_dblock *d) {
  dc_spare_free(d->order);
  dc_spare_free(d);
}

void cells_dblock_release(cells_dblock *d) {
  if (d && --d->n_ref == 0 && d->dropped) dblock_free(d);
}

int cells_bcache_init(cells_bcache *c, int n_cols, int64_t n_blocks) {
  memset(c, 0, sizeof *c);
  size_t n = (size_t)(n_blocks ? n_blocks : 1) * (size_t)(n_cols ? n_cols : 1);
  c->ent = calloc(n, sizeof *c->ent);
  if (!c->ent) return -1;
  c->n_cols = n_cols;
  c->n_blocks = n_blocks;
  return 0;
}

static void drop(cells_bcache *c, cells_dblock *d) {
  if (d->prev) d->prev->next = d->next; else c->head = d->next;
  if (d->next) d->next->prev = d->prev; else c->tail = d->prev;
  d->prev = d->next = NULL;
  c->ent[(int64_t)d->k * c->n_blocks + d->b] = NULL;
  c->bytes -= (int64_t)d->bytes;
  if (d->n_ref == 0) dblock_free(d); else d->dropped = 1;
}

void cells_bcache_fit(cells_bcache *c, int64_t budget) {
  while (c->bytes > budget && c->tail) drop(c, c->tail);
}

void cells_bcache_clear(cells_bcache *c) {
  if (c->ent) cells_bcache_fit(c, -1);
  free(c->ent);
  dc_spare_free(c->scratch);
  dc_obs_decoder_free(c->dec);
  memset(c, 0, sizeof *c);
}

void *cells_bcache_scratch(cells_bcache *c, size_t bytes) {
  if (bytes > c->scratch_cap || !c->scratch) {
    if (!bytes) bytes = 16;
    dc_spare_free(c->scratch);   /* nothing in it to keep */
    c->scratch = dc_spare_alloc(bytes);
    c->scratch_cap = c->scratch ? bytes : 0;
  }
  return c->scratch;
}

dc_obs_decoder *cells_bcache_decoder(cells_bcache *c) {
  if (!c->dec) c->dec = dc_obs_decoder_new();
  return c->dec;
}

cells_dblock *cells_bcache_get(cells_bcache *c, int k, int64_t b) {
  if (!c->ent || k < 0 || k >= c->n_cols || b < 0 || b >= c->n_blocks) return NULL;
  cells_dblock *d = c->ent[(int64_t)k * c->n_blocks + b];
  if (!d) return NULL;
  d->n_ref++;
  if (d != c->head) {   /* to the front */
    d->prev->next = d->next;
    if (d->next) d->next->prev = d->prev; else c->tail = d->prev;
    d->prev = NULL;
    d->next = c->head;
    c->head->prev = d;
    c->head = d;
  }
  return d;
}

cells_dblock *cells_dblock_new(int k, int64_t b, size_t bytes) {
  cells_dblock *d = dc_spare_alloc(HEAD + bytes);
  if (!d) return NULL;
  memset(d, 0, sizeof *d);
  d->k = k;
  d->b = b;
  d->n_ref = 1;
  d->dropped = 1;   /* until cached */
  d->bytes = HEAD + bytes;
  return d;
}

void *cells_dblock_arrays(cells_dblock *d) { return (uint8_t *)d + HEAD; }

cells_dblock *cells_bcache_add(cells_bcache *c, cells_dblock *d, int64_t budget) {
  int k = d->k;
  int64_t b = d->b;
  int in_range = c->ent && k >= 0 && k < c->n_cols && b >= 0 && b < c->n_blocks;
  cells_dblock **slot = in_range ? &c->ent[(int64_t)k * c->n_blocks + b] : NULL;
  if (slot && !*slot && (int64_t)d->bytes <= budget) {
    cells_bcache_fit(c, budget - (int64_t)d->bytes);
    d->dropped = 0;
    d->next = c->head;
    if (c->head) c->head->prev = d; else c->tail = d;
    c->head = d;
    *slot = d;
    c->bytes += (int64_t)d->bytes;
  }
  return d;
}

cells_dblock *cells_bcache_put(cells_bcache *c, int k, int64_t b, const dc_obs_block *src, int64_t budget) {
  cells_dblock *d = cells_dblock_new(k, b, dc_obs_block_size(src));
  if (!d) return NULL;
  dc_obs_block_copy(src, cells_dblock_arrays(d), &d->blk);
  return cells_bcache_add(c, d, budget);
}

void cells_bcache_grow(cells_bcache *c, cells_dblock *d, size_t extra) {
  d->bytes += extra;
  if (!d->dropped) c->bytes += (int64_t)extra;
}
