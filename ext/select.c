/*
** select.c — the arguments that name cells and genes, shared by dc_batch and
** dc_aggregate (see dc_select.h).  Runs on the querying thread.
*/
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "dc_select.h"
#include "batch_plan.h"   /* batch_panel_bits */

/* Sets *pzErr to "WHAT: message" and returns rc. */

void dc_panel_clear(dc_panel *p) {
  sqlite3_free(p->arg);
  sqlite3_free(p->map);
  sqlite3_free(p->ids);
  sqlite3_free(p->bits);
  p->arg = NULL; p->map = NULL; p->ids = NULL; p->bits = NULL;
  p->type = 0; p->arg_len = 0; p->size = 0;
}

const char *dc_type_name(int t) {
  switch (t) {
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "a blob";
    default: return "NULL";
  }
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

/* A JSON array of integers -> ids (sqlite3_malloc64). */
static int parse_json_ids(const char *what, char **pzErr, const char *s, int n, int64_t **out, int64_t *out_n) {
  int64_t cap = 64, m = 0;
  int64_t *ids = sqlite3_malloc64((uint64_t)cap * sizeof *ids);
  int i = 0;
  if (!ids) return SQLITE_NOMEM;
  while (i < n && is_ws(s[i])) i++;
  if (i >= n || s[i] != '[') goto bad;
  i++;
  while (i < n && is_ws(s[i])) i++;
  if (i < n && s[i] == ']') { i++; goto end; }
  for (;;) {
    while (i < n && is_ws(s[i])) i++;
    int start = i, neg = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    if (i >= n || s[i] < '0' || s[i] > '9') goto bad_elem;
    uint64_t x = 0;
    int digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      if (x > (UINT64_MAX - 9) / 10) goto bad_elem;
      x = x * 10 + (uint64_t)(s[i] - '0');
      i++; digits++;
    }
    if (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E')) goto bad_elem;
    if (x > (uint64_t)INT64_MAX) goto bad_elem;
    (void)start; (void)digits;
    if (m == cap) {
      cap *= 2;
      int64_t *ni = sqlite3_realloc64(ids, (uint64_t)cap * sizeof *ids);
      if (!ni) { sqlite3_free(ids); return SQLITE_NOMEM; }
      ids = ni;
    }
    ids[m++] = neg ? -(int64_t)x : (int64_t)x;
    while (i < n && is_ws(s[i])) i++;
    if (i < n && s[i] == ',') { i++; continue; }
    if (i < n && s[i] == ']') { i++; break; }
    goto bad;
  }
end:
  while (i < n && is_ws(s[i])) i++;
  if (i != n) goto bad;
  *out = ids;
  *out_n = m;
  return SQLITE_OK;
bad_elem:
  sqlite3_free(ids);
  return dc_err(pzErr, SQLITE_ERROR, what, "cells: element %lld of the JSON array is not an integer cell id",
                (long long)m);
bad:
  sqlite3_free(ids);
  return dc_err(pzErr, SQLITE_ERROR, what, "cells: not a JSON array of integers (error at character %d)", i);
}

int dc_parse_cells(dc_reader *r, sqlite3_value *val, const char *what, int64_t **out, int64_t *out_n, char **pzErr) {
  int t = sqlite3_value_type(val);
  int64_t *ids = NULL, n = 0;
  int rc;
  if (t == SQLITE_BLOB) {
    int len = sqlite3_value_bytes(val);
    const uint8_t *b = sqlite3_value_blob(val);
    if (len % 8 != 0)
      return dc_err(pzErr, SQLITE_ERROR, what, "cells blob has %d bytes, not a multiple of 8 "
                    "(expected little-endian int64 cell ids)", len);
    n = len / 8;
    ids = sqlite3_malloc64((uint64_t)(n ? n : 1) * sizeof *ids);
    if (!ids) return SQLITE_NOMEM;
    for (int64_t i = 0; i < n; i++) {
      uint64_t x = 0;
      for (int k = 7; k >= 0; k--) x = x << 8 | b[i * 8 + k];
      ids[i] = (int64_t)x;
    }
  } else if (t == SQLITE_TEXT) {
    rc = parse_json_ids(what, pzErr, (const char *)sqlite3_value_text(val), sqlite3_value_bytes(val), &ids, &n);
    if (rc != SQLITE_OK) return rc;
  } else {
    return dc_err(pzErr, SQLITE_MISMATCH, what, "cells must be a blob of little-endian int64 cell ids "
                  "or a JSON array, not %s", dc_type_name(t));
  }
  int64_t nc = r->n_cells;
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= nc) {
      long long bad = (long long)ids[i];
      sqlite3_free(ids);
      return dc_err(pzErr, SQLITE_RANGE, what, "cell id %lld (element %lld) is out of range: the dataset has "
                    "cells 0..%lld", bad, (long long)i, (long long)nc - 1);
    }
  }
  *out = ids;
  *out_n = n;
  return SQLITE_OK;
}

int dc_panel_parse(dc_panel *v, sqlite3 *db, dc_reader *r, sqlite3_value *val, const char *what, char **pzErr) {
  int t = sqlite3_value_type(val);
  int len = sqlite3_value_bytes(val);
  const void *bytes = t == SQLITE_BLOB ? sqlite3_value_blob(val) : (const void *)sqlite3_value_text(val);
  int rc = SQLITE_OK;
  sqlite3_stmt *st = NULL;
  if (t != SQLITE_BLOB && t != SQLITE_TEXT)
    return dc_err(pzErr, SQLITE_MISMATCH, what, "genes must be a JSON array of gene names or a blob of "
                  "int32 gene ids, not %s", dc_type_name(t));
  if (v->type == t && v->ns == r->ns && v->arg_len == len &&
      (len == 0 || memcmp(v->arg, bytes, (size_t)len) == 0))
    return SQLITE_OK;
  dc_panel_clear(v);
  int32_t *map = sqlite3_malloc64((uint64_t)(r->n_genes ? r->n_genes : 1) * sizeof *map);
  if (!map) return SQLITE_NOMEM;
  for (int64_t g = 0; g < r->n_genes; g++) map[g] = -1;
  int64_t pos = 0, last = -1;
  int sorted = 1;
  if (t == SQLITE_BLOB) {
    if (len % 4 != 0) {
      rc = dc_err(pzErr, SQLITE_ERROR, what, "genes blob has %d bytes, not a multiple of 4 "
                  "(expected little-endian int32 gene ids)", len);
      goto fail;
    }
    const uint8_t *b = bytes;
    for (int i = 0; i < len / 4; i++) {
      int32_t g = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                            (uint32_t)b[4 * i + 3] << 24);
      if (g < 0 || g >= r->n_genes) {
        rc = dc_err(pzErr, SQLITE_RANGE, what, "gene id %d (element %d of genes) is out of range: the dataset "
                    "has genes 0..%lld", g, i, (long long)r->n_genes - 1);
        goto fail;
      }
      if (map[g] >= 0) {
        rc = dc_err(pzErr, SQLITE_ERROR, what, "gene id %d appears twice in the panel", g);
        goto fail;
      }
      if (g < last) sorted = 0;
      last = g;
      map[g] = (int32_t)pos++;
    }
  } else {
    char *sql = sqlite3_mprintf("SELECT type, value FROM json_each(?1)");
    if (!sql) { rc = SQLITE_NOMEM; goto fail; }
    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) { rc = dc_err(pzErr, rc, what, "genes: %s", sqlite3_errmsg(db)); goto fail; }
    sqlite3_bind_value(st, 1, val);
    {
      const char *s = bytes;
      int i = 0;
      while (i < len && is_ws(s[i])) i++;
      if (i >= len || s[i] != '[') {
        rc = dc_err(pzErr, SQLITE_ERROR, what, "genes is text but not a JSON array of gene names");
        goto fail;
      }
    }
    int64_t k = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      const char *ty = (const char *)sqlite3_column_text(st, 0);
      if (!ty || strcmp(ty, "text") != 0) {
        rc = dc_err(pzErr, SQLITE_MISMATCH, what, "element %lld of genes is not a gene name (JSON %s)",
                    (long long)k, ty ? ty : "null");
        goto fail;
      }
      const char *name = (const char *)sqlite3_column_text(st, 1);
      int nlen = sqlite3_column_bytes(st, 1);
      int64_t g;
      char *err = NULL;
      rc = dc_reader_gene_id(r, name ? name : "", nlen, &g, &err);
      if (rc != SQLITE_OK) { if (err) { sqlite3_free(*pzErr); *pzErr = err; } else dc_err(pzErr, rc, what, "reading genes"); goto fail; }
      if (g == -1) { rc = dc_err(pzErr, SQLITE_ERROR, what, "unknown gene '%.*s'", nlen, name); goto fail; }
      if (g == -2) {
        rc = dc_err(pzErr, SQLITE_ERROR, what, "gene name '%.*s' is not unique in this dataset; pass gene ids "
                    "as an int32 blob", nlen, name);
        goto fail;
      }
      if (map[g] >= 0) { rc = dc_err(pzErr, SQLITE_ERROR, what, "gene '%.*s' appears twice in the panel", nlen, name); goto fail; }
      if (g < last) sorted = 0;
      last = g;
      map[g] = (int32_t)pos++;
      k++;
    }
    if (rc != SQLITE_DONE) {
      rc = dc_err(pzErr, rc, what, "genes is not valid JSON: %s", sqlite3_errmsg(db));
      goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
  }
  v->ids = sqlite3_malloc64((uint64_t)(pos ? pos : 1) * sizeof *v->ids);
  v->bits = sqlite3_malloc64((uint64_t)((r->n_genes + 63) / 64 + 1) * sizeof *v->bits);
  v->arg = sqlite3_malloc64((uint64_t)(len ? len : 1));
  if (!v->arg || !v->ids || !v->bits) {
    sqlite3_free(v->ids); sqlite3_free(v->bits); sqlite3_free(v->arg);
    v->ids = NULL; v->bits = NULL; v->arg = NULL;
    rc = SQLITE_NOMEM;
    goto fail;
  }
  for (int64_t g = 0; g < r->n_genes; g++) if (map[g] >= 0) v->ids[map[g]] = (int32_t)g;
  batch_panel_bits(map, r->n_genes, v->bits);
  if (len) memcpy(v->arg, bytes, (size_t)len);
  v->arg_len = len;
  v->type = t;
  v->ns = r->ns;
  v->map = map;
  v->size = pos;
  v->sorted = sorted;
  return SQLITE_OK;
fail:
  sqlite3_finalize(st);
  sqlite3_free(map);
  return rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_ERROR : rc;
}

