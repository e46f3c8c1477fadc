/*
** dc_seal.c — seals binding stored content to its place (dc_seal.h).
*/
#include "dc_seal.h"
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int dc_seal_begin(dc_seal *s, uint64_t dataset_id, const char *tag) {
  XXH3_state_t *st = XXH3_createState();
  s->st = st;
  if (!st) return -1;
  if (XXH3_64bits_reset_withSeed(st, (XXH64_hash_t)dataset_id) == XXH_ERROR) {
    XXH3_freeState(st);
    s->st = NULL;
    return -1;
  }
  dc_seal_bytes(s, tag, strlen(tag));
  return 0;
}

void dc_seal_int(dc_seal *s, int64_t v) {
  uint8_t b[8];
  put_u64(b, (uint64_t)v);
  if (s->st) XXH3_64bits_update((XXH3_state_t *)s->st, b, 8);
}

void dc_seal_bytes(dc_seal *s, const void *p, size_t n) {
  dc_seal_int(s, (int64_t)n);
  if (s->st && n) XXH3_64bits_update((XXH3_state_t *)s->st, p, n);
}

void dc_seal_value(dc_seal *s, const dc_sealval *v) {
  int type = v ? v->type : DC_SV_NULL;
  dc_seal_int(s, type);
  switch (type) {
    case DC_SV_INT: dc_seal_int(s, v->i); break;
    case DC_SV_REAL: {
      uint64_t bits;
      double f = v->f == 0 ? 0.0 : v->f;   /* -0.0 and 0.0 compare equal: one seal */
      memcpy(&bits, &f, 8);
      dc_seal_int(s, (int64_t)bits);
      break;
    }
    case DC_SV_TEXT: case DC_SV_BLOB: dc_seal_bytes(s, v->p, v->n); break;
    default: break;
  }
}

int dc_seal_end(dc_seal *s, int64_t *out) {
  if (!s->st) return -1;
  *out = (int64_t)XXH3_64bits_digest((XXH3_state_t *)s->st);
  XXH3_freeState((XXH3_state_t *)s->st);
  s->st = NULL;
  return 0;
}

int dc_seal_tile(uint64_t dataset_id, int64_t tile, int64_t first_cell, int64_t n_cells, int64_t nnz,
                 int64_t chunks, uint64_t blob_len, const uint8_t *head, size_t head_len, int64_t *out) {
  dc_seal s;
  dc_seal_begin(&s, dataset_id, "deltacells tile");
  dc_seal_int(&s, tile);
  dc_seal_int(&s, first_cell);
  dc_seal_int(&s, n_cells);
  dc_seal_int(&s, nnz);
  dc_seal_int(&s, chunks);
  dc_seal_int(&s, (int64_t)blob_len);
  dc_seal_bytes(&s, head, head_len);
  return dc_seal_end(&s, out);
}

int dc_seal_block(uint64_t dataset_id, const dc_blockplace *pl, const dc_sealval *mn, const dc_sealval *mx,
                  const dc_sealval *present, uint64_t blob_len, const uint8_t *head, int64_t *out) {
  dc_seal s;
  dc_seal_begin(&s, dataset_id, "deltacells block");
  dc_seal_bytes(&s, pl->table, strlen(pl->table));
  dc_seal_int(&s, pl->col);
  dc_seal_bytes(&s, pl->col_name, strlen(pl->col_name));
  dc_seal_int(&s, pl->kind);
  dc_seal_int(&s, pl->n_categories);
  dc_seal_int(&s, pl->block);
  dc_seal_int(&s, pl->first);
  dc_seal_int(&s, pl->n);
  dc_seal_int(&s, pl->null_count);
  dc_seal_value(&s, mn);
  dc_seal_value(&s, mx);
  dc_seal_value(&s, present);
  dc_seal_int(&s, (int64_t)blob_len);
  dc_seal_bytes(&s, head, blob_len < DC_SEAL_OBS_HEAD ? (size_t)blob_len : DC_SEAL_OBS_HEAD);
  return dc_seal_end(&s, out);
}

int dc_seal_dict_begin(dc_seal *s, uint64_t dataset_id, const dc_blockplace *pl) {
  int r = dc_seal_begin(s, dataset_id, "deltacells dictionary");
  dc_seal_bytes(s, pl->table, strlen(pl->table));
  dc_seal_int(s, pl->col);
  dc_seal_bytes(s, pl->col_name, strlen(pl->col_name));
  dc_seal_int(s, pl->kind);
  dc_seal_int(s, pl->n_categories);
  return r;
}

int dc_seal_parse_id(const char *text, size_t n, uint64_t *id) {
  if (!text || n != 16) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < 16; i++) {
    char c = text[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *id = v;
  return 0;
}

int dc_seal_new_id(uint64_t *id) {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof v) {
    ssize_t r = getrandom((uint8_t *)&v + got, sizeof v - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)r;
  }
  *id = v;
  return 0;
}
