/*
** reader_names.c — the gene-name map of a reader (see dc_reader.h): genes' names loaded on
** first use into an open-addressing table over gene ids (a name held by two genes is marked
** not unique), owned by the shared tile index so that the readers of a schema load it once.
*/
#include <stdlib.h>
#include <string.h>
#include "reader_int.h"

static uint64_t name_hash(const char *s, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
  return h ^ (h >> 31);
}

static int load_gene_names(dc_reader *r, char **pzErr) {
  int64_t ng = r->n_genes;
  uint64_t size = 16;
  while (size < (uint64_t)ng * 2) size <<= 1;
  r->gm_slot = sqlite3_malloc64(size * sizeof *r->gm_slot);
  r->gm_name = sqlite3_malloc64((uint64_t)(ng ? ng : 1) * sizeof *r->gm_name);
  if (!r->gm_slot || !r->gm_name) return SQLITE_NOMEM;
  memset(r->gm_slot, 0, size * sizeof *r->gm_slot);
  memset(r->gm_name, 0, (uint64_t)(ng ? ng : 1) * sizeof *r->gm_name);
  r->gm_mask = (uint32_t)(size - 1);
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT gene_id, name FROM \"%w\".genes ORDER BY gene_id", r->schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    dc_err(pzErr, 0, NULL, "%s: cannot read genes (schema %s): %s", r->what, r->schema, sqlite3_errmsg(r->db));
    return rc;
  }
  int64_t i = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 1);
    int len = sqlite3_column_bytes(st, 1);
    if (sqlite3_column_int64(st, 0) != i || i >= ng || !name) {
      dc_err(pzErr, 0, NULL, "%s: genes table is inconsistent at gene_id %lld", r->what, (long long)sqlite3_column_int64(st, 0));
      rc = SQLITE_CORRUPT_VTAB;
      break;
    }
    r->gm_name[i] = sqlite3_mprintf("%.*s", len, name);
    if (!r->gm_name[i]) { rc = SQLITE_NOMEM; break; }
    uint64_t h = name_hash(name, len) & r->gm_mask;
    for (;;) {
      int64_t v = r->gm_slot[h];
      if (v == 0) { r->gm_slot[h] = i + 1; break; }
      int64_t g = v > 0 ? v - 1 : -v - 1;
      if ((int)strlen(r->gm_name[g]) == len && memcmp(r->gm_name[g], name, (size_t)len) == 0) {
        r->gm_slot[h] = -(g + 1);         /* name not unique */
        break;
      }
      h = (h + 1) & r->gm_mask;
    }
    i++;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE && i != ng) {
    dc_err(pzErr, 0, NULL, "%s: genes holds %lld rows but dc_meta.n_genes is %lld", r->what, (long long)i, (long long)ng);
    rc = SQLITE_CORRUPT_VTAB;
  }
  if (rc == SQLITE_DONE) { r->gm_loaded = 1; return SQLITE_OK; }
  if (rc == SQLITE_ROW || rc == SQLITE_OK) rc = SQLITE_ERROR;
  if (!*pzErr) dc_err(pzErr, 0, NULL, "%s: reading genes: %s", r->what, sqlite3_errmsg(r->db));
  return rc;
}

static int names_ready(dc_reader *r, char **pzErr) {
  dc_index *ix = r->ix;
  if (ix && ix->gm_loaded) {   /* loaded by a reader sharing the index */
    r->gm_loaded = 1; r->gm_mask = ix->gm_mask; r->gm_slot = ix->gm_slot; r->gm_name = ix->gm_name;
    return SQLITE_OK;
  }
  if (!r->gm_loaded) {
    /* r->gm_* are the index's (NULL) or left over from a failed load of this reader */
    if (!ix || r->gm_slot != ix->gm_slot) {
      sqlite3_free(r->gm_slot);
      if (r->gm_name) for (int64_t i = 0; i < r->n_genes; i++) sqlite3_free(r->gm_name[i]);
      sqlite3_free(r->gm_name);
    }
    r->gm_slot = NULL; r->gm_name = NULL;
    int rc = load_gene_names(r, pzErr);
    if (ix) {   /* the index owns them, loaded or not (a failed load is freed with it, or retried) */
      if (rc == SQLITE_OK) {
        ix->gm_loaded = 1; ix->gm_mask = r->gm_mask; ix->gm_slot = r->gm_slot; ix->gm_name = r->gm_name;
      } else {
        sqlite3_free(r->gm_slot);
        if (r->gm_name) for (int64_t i = 0; i < r->n_genes; i++) sqlite3_free(r->gm_name[i]);
        sqlite3_free(r->gm_name);
        r->gm_slot = NULL; r->gm_name = NULL; r->gm_loaded = 0;
      }
    }
    return rc;
  }
  return SQLITE_OK;
}

int dc_reader_gene_name(dc_reader *r, int64_t id, const char **name, char **pzErr) {
  int rc = names_ready(r, pzErr);
  if (rc != SQLITE_OK) return rc;
  if (id < 0 || id >= r->n_genes) {
    dc_err(pzErr, 0, NULL, "%s: no gene %lld", r->what, (long long)id);
    return SQLITE_RANGE;
  }
  *name = r->gm_name[id];
  return SQLITE_OK;
}
int dc_reader_gene_id(dc_reader *r, const char *name, int n, int64_t *id, char **pzErr) {
  int rc = names_ready(r, pzErr);
  if (rc != SQLITE_OK) return rc;
  uint64_t h = name_hash(name, n) & r->gm_mask;
  for (;;) {
    int64_t v = r->gm_slot[h];
    if (v == 0) { *id = -1; return SQLITE_OK; }
    int64_t g = v > 0 ? v - 1 : -v - 1;
    if ((int)strlen(r->gm_name[g]) == n && memcmp(r->gm_name[g], name, (size_t)n) == 0) {
      *id = v > 0 ? g : -2;
      return SQLITE_OK;
    }
    h = (h + 1) & r->gm_mask;
  }
}
