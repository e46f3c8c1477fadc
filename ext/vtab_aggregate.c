/*
** vtab_aggregate.c — dc_aggregate and dc_aggregate_wide: count statistics
** per (group of cells, gene), computed in C in one pass over the tiles
** (modules deltacells_aggregate and deltacells_aggregate_wide).
**
**   CREATE VIRTUAL TABLE dc_aggregate USING deltacells_aggregate;            -- in the dataset
**   CREATE VIRTUAL TABLE dc_aggregate_wide USING deltacells_aggregate_wide;
**   SELECT label, gene, mean, frac_expressing FROM dc_aggregate('cell_type') WHERE gene = 'CD3E';
**   SELECT * FROM dc_aggregate('cell_type', NULL, '["CD3E", "MS4A1"]');     -- a gene panel
**   SELECT * FROM dc_aggregate(NULL, (SELECT json_group_array(cell_id) FROM cells WHERE donor = 'D01'));
**
** A dataset made before these tables existed can declare them in temp, with
** the schema to read as the argument:
**   CREATE VIRTUAL TABLE temp.dc_aggregate USING deltacells_aggregate(main);
**
** Arguments (hidden columns, all optional, in this order):
**   group_by  the name of a column of `cells` (text), or NULL: one group of all
**             the cells.  Cells whose value is NULL form their own group.
**   cells     the cells to aggregate, as for dc_batch: a blob of int64 LE ids or
**             a JSON array (each cell at most once); NULL = every cell.
**   genes     a gene panel, as for dc_batch: a JSON array of gene names or an
**             int32 LE blob of gene ids; NULL = every gene.
**
** dc_aggregate: one row per (group, gene), groups in order (a category
** column's dictionary order, else by value; the NULL group last), genes in
** gene_id order or panel order:
**   label            the group's value of group_by (NULL for the NULL group and
**                    when group_by is NULL)
**   gene_id, gene    the gene's id and name
**   n_cells          cells of the group (in the selection)
**   sum              the sum of the gene's counts over those cells
**   mean             sum / n_cells: the mean INCLUDING the cells with count 0
**   n_expressing     cells with a count > 0
**   frac_expressing  n_expressing / n_cells
**   mean_log1p_cpm   the mean over the group's cells of log1p(count / the
**                    cell's total count (all genes) * 10,000); computed only
**                    when the statement uses the column
** Every (group, gene) pair has a row, zeros included.  Only groups with at
** least one selected cell appear.
**
** dc_aggregate_wide: one row per group:
**   label, n_cells, n_genes (genes per row), gene_ids (int32 LE blob: the
**   genes in output order), sum, n_expressing (int64 LE blobs), mean_log1p_cpm
**   (float64 LE blob; computed only when used).  The Python package uses it.
**
** How (xFilter, on the querying thread except the marked step): the tiles
** holding selected cells are taken in windows of at most decode_mb/4 of
** tile bytes; for a window the group_by values of its cells are read from
** `cells` (a cell_id range query) and turned into group numbers, the blobs
** of its chunks that hold selected cells are read (ext/reader.c; chunks
** already in the decoded-chunk cache are used as they are), and the chunks
** are decoded and accumulated on the pool [threads] by ext/agg/dc_agg.c,
** which never sees SQLite.  With a gene panel, the chunks of a tile whose gene
** map shows none of the panel's genes are not read: their cells go to dc_agg
** as cells without a count (they count in n_cells and in the means).
** Memory: the accumulators, threads x groups x genes x 16 bytes (24 with
** mean_log1p_cpm), at most 4 x decode_mb (else an error naming group_by),
** plus one window; nothing per cell of the dataset.  Decoded chunks are not
** put in the cache (a whole-dataset pass would only evict what other queries
** use).
**
** Plans: the shared plan codec (dc_plan.h): the arguments as exact terms on the hidden
** columns, then the words "log1p" (mean_log1p_cpm is used) and "names" (gene names are
** used), e.g. `#9 "group_by" = ?1, #11 "genes" = ?2, names`; "scan" for none.
*/
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "dc_agg.h"
#include "agg_groups.h"
#include "dc_plan.h"
#include "dc_select.h"

enum { L_LABEL, L_GENE_ID, L_GENE, L_NCELLS, L_SUM, L_MEAN, L_NEXPR, L_FRAC, L_LOG1P, L_NCOLS };
enum { W_LABEL, W_NCELLS, W_NGENES, W_GENE_IDS, W_SUM, W_NEXPR, W_LOG1P, W_NCOLS };

typedef struct agg_vtab {
  sqlite3_vtab base;
  sqlite3 *db;
  dc_conn *conn;
  dc_reader *reader;
  int wide;
  char *schema;              /* the dataset schema read */
  dc_panel panel;
  dc_agg *spare;             /* accumulators kept between calls (mapped memory) */
} agg_vtab;

typedef struct agg_cursor {
  sqlite3_vtab_cursor base;
  int eof;
  dc_agg *agg;
  dc_agg_result res;
  dc_gval *groups;           /* by group number (agg_groups.h) */
  uint32_t n_groups;
  uint32_t *order;           /* output groups (n_cells > 0), in order */
  uint32_t n_order;
  int32_t *gene_ids;         /* output genes */
  char **names;              /* their names (NULL unless used) */
  int64_t row, n_rows;
} agg_cursor;


/* the table's name in its error messages */
#define AGG_NAME(v) ((v)->wide ? "dc_aggregate_wide" : "dc_aggregate")

/* ------------------------------------------------ connect / disconnect */
static int agg_init(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **ppVtab, char **pzErr,
                    int wide) {
  const char *mod = wide ? "deltacells_aggregate_wide" : "deltacells_aggregate";
  if (argc > 4) {
    *pzErr = sqlite3_mprintf("%s: takes at most one argument, the schema to read (default: its own)", mod);
    return SQLITE_ERROR;
  }
  int rc = sqlite3_declare_vtab(db, wide
      ? "CREATE TABLE x(label, n_cells INTEGER, n_genes INTEGER, gene_ids BLOB, sum BLOB, n_expressing BLOB,"
        " mean_log1p_cpm BLOB, group_by HIDDEN, cells HIDDEN, genes HIDDEN)"
      : "CREATE TABLE x(label, gene_id INTEGER, gene TEXT, n_cells INTEGER, sum INTEGER, mean REAL,"
        " n_expressing INTEGER, frac_expressing REAL, mean_log1p_cpm REAL, group_by HIDDEN, cells HIDDEN,"
        " genes HIDDEN)");
  if (rc != SQLITE_OK) return rc;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  agg_vtab *v = sqlite3_malloc64(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->db = db;
  v->conn = aux;
  v->wide = wide;
  if (argc == 4) {
    const char *s = argv[3];
    size_t n = strlen(s);
    if (n >= 2 && (s[0] == '"' || s[0] == '\'' || s[0] == '[') ) v->schema = sqlite3_mprintf("%.*s", (int)n - 2, s + 1);
    else v->schema = sqlite3_mprintf("%s", s);
  } else {
    v->schema = sqlite3_mprintf("%s", argv[1]);
  }
  if (!v->schema) { sqlite3_free(v); return SQLITE_NOMEM; }
  rc = dc_reader_open(db, v->conn, v->schema, wide ? "dc_aggregate_wide" : "dc_aggregate", &v->reader, pzErr);
  if (rc != SQLITE_OK) { sqlite3_free(v->schema); sqlite3_free(v); return rc; }
  *ppVtab = &v->base;
  return SQLITE_OK;
}
static int aggl_create(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **e) {
  return agg_init(db, aux, argc, argv, pp, e, 0);
}
static int aggl_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **e) {
  return agg_init(db, aux, argc, argv, pp, e, 0);
}
static int aggw_create(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **e) {
  return agg_init(db, aux, argc, argv, pp, e, 1);
}
static int aggw_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **e) {
  return agg_init(db, aux, argc, argv, pp, e, 1);
}

static int agg_disconnect(sqlite3_vtab *p) {
  agg_vtab *v = (agg_vtab *)p;
  dc_reader_free(v->reader);
  dc_panel_clear(&v->panel);
  dc_agg_free(v->spare);
  sqlite3_free(v->schema);
  sqlite3_free(v);
  return SQLITE_OK;
}

/* ------------------------------------------------ plans */
static const char *const l_names[] = {"label", "gene_id", "gene", "n_cells", "sum", "mean", "n_expressing",
                                     "frac_expressing", "mean_log1p_cpm", "group_by", "cells", "genes"};
static const char *const w_names[] = {"label", "n_cells", "n_genes", "gene_ids", "sum", "n_expressing",
                                     "mean_log1p_cpm", "group_by", "cells", "genes"};
static const char *plan_col_name(void *ctx, int col) { return (((agg_vtab *)ctx)->wide ? w_names : l_names)[col]; }
static const dc_plan_word plan_words[] = {{"log1p", 0}, {"names", 0}};
enum { ITEM_LOG1P = 1, ITEM_NAMES = 2 };
static void plan_table(agg_vtab *v, dc_plan_table *t) {
  t->ncols = (v->wide ? W_NCOLS : L_NCOLS) + 3;
  t->name = plan_col_name;
  t->ctx = v;
  t->words = plan_words;
  t->nwords = 2;
}

static int agg_best_index(sqlite3_vtab *p, sqlite3_index_info *info) {
  agg_vtab *v = (agg_vtab *)p;
  int first_arg = v->wide ? W_NCOLS : L_NCOLS;
  int idx[3] = { -1, -1, -1 }, unusable = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    int a = c->iColumn - first_arg;
    if (a < 0 || a > 2 || c->op != SQLITE_INDEX_CONSTRAINT_EQ) continue;
    if (!c->usable) { unusable |= 1 << a; continue; }
    if (idx[a] < 0) idx[a] = i;
  }
  for (int a = 0; a < 3; a++)
    if ((unusable >> a & 1) && idx[a] < 0) return SQLITE_CONSTRAINT;
  dc_plan_item items[5];
  int n = 0, n_items = 0;
  for (int a = 0; a < 3; a++) {
    if (idx[a] < 0) continue;
    info->aConstraintUsage[idx[a]].argvIndex = ++n;
    info->aConstraintUsage[idx[a]].omit = 1;
    items[n_items++] = (dc_plan_item){DC_ITEM_TERM, first_arg + a, DC_OP_EQ, 1, n - 1};
  }
  int log1p_col = v->wide ? W_LOG1P : L_LOG1P;
  if (info->colUsed & ((sqlite3_uint64)1 << log1p_col)) items[n_items++] = (dc_plan_item){ITEM_LOG1P, -1, 0, 1, -1};
  if (!v->wide && (info->colUsed & ((sqlite3_uint64)1 << L_GENE)))
    items[n_items++] = (dc_plan_item){ITEM_NAMES, -1, 0, 1, -1};
  dc_plan_table pt;
  plan_table(v, &pt);
  if (dc_plan_set(info, &pt, items, n_items, n) != SQLITE_OK) return SQLITE_NOMEM;
  info->estimatedCost = 1e7;
  info->estimatedRows = v->wide ? 20 : 500000;
  return SQLITE_OK;
}

/* ------------------------------------------------ group values */
_Static_assert(DC_GV_INTEGER == SQLITE_INTEGER && DC_GV_FLOAT == SQLITE_FLOAT && DC_GV_TEXT == SQLITE_TEXT &&
               DC_GV_BLOB == SQLITE_BLOB && DC_GV_NULL == SQLITE_NULL, "agg_groups.h uses SQLite's type codes");

/* The group number of value x (a new group if unseen); -1 on OOM. */
static int64_t group_of(dc_groups *m, sqlite3_value *x) {
  int t = sqlite3_value_type(x);
  switch (t) {
    case SQLITE_INTEGER: return dc_groups_get(m, t, sqlite3_value_int64(x), 0, NULL, 0);
    case SQLITE_FLOAT: return dc_groups_get(m, t, 0, sqlite3_value_double(x), NULL, 0);
    case SQLITE_TEXT: {
      const unsigned char *s = sqlite3_value_text(x);
      return dc_groups_get(m, t, 0, 0, s, sqlite3_value_bytes(x));
    }
    case SQLITE_BLOB: {
      const void *s = sqlite3_value_blob(x);
      return dc_groups_get(m, t, 0, 0, s, sqlite3_value_bytes(x));
    }
    default: return dc_groups_get(m, SQLITE_NULL, 0, 0, NULL, 0);
  }
}

/* ------------------------------------------------ cursor */
static void cursor_clear(agg_cursor *c, agg_vtab *v) {
  if (c->agg) {
    if (!v->spare) v->spare = c->agg; else dc_agg_free(c->agg);
    c->agg = NULL;
  }
  dc_gvals_free(c->groups, c->n_groups);
  c->groups = NULL; c->n_groups = 0;
  if (c->names) sqlite3_free(c->names);
  c->names = NULL;
  sqlite3_free(c->order); c->order = NULL; c->n_order = 0;
  sqlite3_free(c->gene_ids); c->gene_ids = NULL;
  memset(&c->res, 0, sizeof c->res);
  c->row = c->n_rows = 0;
  c->eof = 1;
}

static int agg_open(sqlite3_vtab *p, sqlite3_vtab_cursor **pp) {
  (void)p;
  agg_cursor *c = sqlite3_malloc64(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->eof = 1;
  *pp = &c->base;
  return SQLITE_OK;
}
static int agg_close(sqlite3_vtab_cursor *cur) {
  cursor_clear((agg_cursor *)cur, (agg_vtab *)cur->pVtab);
  sqlite3_free(cur);
  return SQLITE_OK;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Category dictionary ranks of the group_by column, when it is one: the
** labels are seeded into the map in code order (group number = code). */
static int seed_categories(agg_vtab *v, dc_groups *m, const char *col) {
  sqlite3_stmt *st = NULL;
  char *sql = sqlite3_mprintf("SELECT d.value FROM \"%w\".cells_dict d JOIN \"%w\".cells_columns c ON c.col = d.col"
                              " WHERE c.name = ?1 COLLATE NOCASE AND c.kind = 'category' ORDER BY d.code", v->schema, v->schema);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) return SQLITE_OK;   /* no dictionary tables: order by value */
  sqlite3_bind_text(st, 1, col, -1, SQLITE_STATIC);
  int64_t code = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t g = group_of(m, sqlite3_column_value(st, 0));
    if (g < 0) { sqlite3_finalize(st); return SQLITE_NOMEM; }
    if (m->g[g].rank < 0) m->g[g].rank = code;
    code++;
  }
  sqlite3_finalize(st);
  return SQLITE_OK;
}

/* group_by must name a column of cells (a double-quoted unknown name would
** silently be read as a string literal). */
static int check_column(agg_vtab *v, const char *col) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(v->db, "SELECT name FROM pragma_table_info('cells', ?1)", -1, &st, NULL);
  if (rc != SQLITE_OK) return dc_err(&v->base.zErrMsg, rc, AGG_NAME(v), "group_by: cannot list the columns of cells: %s", sqlite3_errmsg(v->db));
  sqlite3_bind_text(st, 1, v->schema, -1, SQLITE_STATIC);
  sqlite3_str *names = sqlite3_str_new(NULL);
  int found = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *n = (const char *)sqlite3_column_text(st, 0);
    if (!n) continue;
    if (sqlite3_stricmp(n, col) == 0) found = 1;
    sqlite3_str_appendf(names, "%s%s", sqlite3_str_length(names) ? ", " : "", n);
  }
  sqlite3_finalize(st);
  char *list = sqlite3_str_finish(names);
  if (rc != SQLITE_DONE) rc = dc_err(&v->base.zErrMsg, rc, AGG_NAME(v), "group_by: cannot list the columns of cells: %s", sqlite3_errmsg(v->db));
  else if (!found) rc = dc_err(&v->base.zErrMsg, SQLITE_ERROR, AGG_NAME(v), "group_by: cells has no column '%s' (columns: %s)", col, list ? list : "");
  else rc = SQLITE_OK;
  sqlite3_free(list);
  return rc;
}

static int agg_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc, sqlite3_value **argv) {
  agg_cursor *c = (agg_cursor *)cur;
  agg_vtab *v = (agg_vtab *)cur->pVtab;
  dc_reader *r = v->reader;
  int rc = SQLITE_OK;
  char *err = NULL;
  int64_t *sel = NULL, n_sel = 0;
  dc_groups gm;
  dc_groups_init(&gm);
  sqlite3_stmt *st = NULL;
  int32_t *labels = NULL;
  size_t labels_cap = 0;
  dc_agg_job *jobs = NULL;
  dc_chunkkey *keys = NULL;
  dc_chunk_data **cached = NULL;
  dc_tilebytes *tb = NULL;
  size_t ntb = 0, n_cached = 0;
  char *group_col = NULL;
  int64_t *nothing = NULL;           /* zeros: the indptr of a chunk whose tile holds no panel gene */
  uint8_t *none = NULL;              /* per key: its tile holds no panel gene (not decoded) */

  cursor_clear(c, v);
  /* the plan: the arguments by hidden column, and what the statement uses */
  sqlite3_value *a_group = NULL, *a_cells = NULL, *a_genes = NULL;
  int use_log1p = 0, use_names = 0;
  {
    dc_plan_item items[DC_PLAN_MAX_ITEMS];
    int n_items;
    char why[200] = "";
    dc_plan_table pt;
    plan_table(v, &pt);
    if (dc_plan_take(&pt, idxNum, idxStr, argc, items, &n_items, why, sizeof why))
      return dc_err(&v->base.zErrMsg, SQLITE_ERROR, AGG_NAME(v), "unknown plan '%s'%s%s", idxStr ? idxStr : "", why[0] ? ": " : "", why);
    int first_arg = v->wide ? W_NCOLS : L_NCOLS;
    for (int i = 0; i < n_items; i++) {
      const dc_plan_item *it = &items[i];
      if (it->kind == ITEM_LOG1P) { use_log1p = 1; continue; }
      if (it->kind == ITEM_NAMES) { use_names = 1; continue; }
      int a = it->col - first_arg;
      sqlite3_value **slot = a == 0 ? &a_group : a == 1 ? &a_cells : a == 2 ? &a_genes : NULL;
      if (!slot || it->op != DC_OP_EQ || *slot)
        return dc_err(&v->base.zErrMsg, SQLITE_ERROR, AGG_NAME(v), "unknown plan '%s': item %d is not an argument", idxStr, i + 1);
      *slot = argv[it->arg];
    }
  }
  const char *what = v->wide ? "dc_aggregate_wide" : "dc_aggregate";
  if ((rc = dc_reader_begin(r, &err)) != SQLITE_OK) goto done;

  /* group_by */
  if (a_group && sqlite3_value_type(a_group) != SQLITE_NULL) {
    if (sqlite3_value_type(a_group) != SQLITE_TEXT) {
      rc = dc_err(&v->base.zErrMsg, SQLITE_MISMATCH, AGG_NAME(v), "group_by must be the name of a column of cells (text) or NULL, not %s",
                  dc_type_name(sqlite3_value_type(a_group)));
      goto done;
    }
    group_col = sqlite3_mprintf("%s", (const char *)sqlite3_value_text(a_group));
    if (!group_col) { rc = SQLITE_NOMEM; goto done; }
    if ((rc = check_column(v, group_col)) != SQLITE_OK) goto done;
    char *sql = sqlite3_mprintf("SELECT cell_id, \"%w\" FROM \"%w\".cells WHERE cell_id >= ?1 AND cell_id < ?2",
                                group_col, v->schema);
    if (!sql) { rc = SQLITE_NOMEM; goto done; }
    rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) {
      const char *m = sqlite3_errmsg(v->db);
      if (strstr(m, "no such column"))
        rc = dc_err(&v->base.zErrMsg, SQLITE_ERROR, AGG_NAME(v), "group_by: cells has no column '%s'", group_col);
      else
        rc = dc_err(&v->base.zErrMsg, rc, AGG_NAME(v), "group_by '%s': cannot read cells: %s", group_col, m);
      goto done;
    }
    if ((rc = seed_categories(v, &gm, group_col)) != SQLITE_OK) goto done;
  }

  /* cells */
  if (a_cells && sqlite3_value_type(a_cells) != SQLITE_NULL) {
    if ((rc = dc_parse_cells(r, a_cells, what, &sel, &n_sel, &err)) != SQLITE_OK) goto done;
    qsort(sel, (size_t)n_sel, sizeof *sel, cmp_i64);
    for (int64_t i = 1; i < n_sel; i++)
      if (sel[i] == sel[i - 1]) {
        rc = dc_err(&v->base.zErrMsg, SQLITE_ERROR, AGG_NAME(v), "cells: cell id %lld appears twice (each cell counts once in a group)",
                    (long long)sel[i]);
        goto done;
      }
  }

  /* genes */
  const int32_t *panel = NULL;
  int64_t n_out = r->n_genes;
  if (a_genes && sqlite3_value_type(a_genes) != SQLITE_NULL) {
    if ((rc = dc_panel_parse(&v->panel, v->db, r, a_genes, what, &err)) != SQLITE_OK) goto done;
    panel = v->panel.map;
    n_out = v->panel.size;
  }
  c->gene_ids = sqlite3_malloc64((uint64_t)(n_out ? n_out : 1) * sizeof *c->gene_ids);
  if (!c->gene_ids) { rc = SQLITE_NOMEM; goto done; }
  if (panel) memcpy(c->gene_ids, v->panel.ids, (size_t)n_out * sizeof *c->gene_ids);   /* the panel's own */
  else for (int64_t g = 0; g < n_out; g++) c->gene_ids[g] = (int32_t)g;
  if (use_names) {
    /* names copied (the reader may reload them later) */
    int64_t bytes = 0;
    const char *nm;
    for (int64_t j = 0; j < n_out; j++) {
      if ((rc = dc_reader_gene_name(r, c->gene_ids[j], &nm, &err)) != SQLITE_OK) goto done;
      bytes += (int64_t)strlen(nm) + 1;
    }
    c->names = sqlite3_malloc64((uint64_t)(n_out ? n_out : 1) * sizeof(char *) + (uint64_t)bytes);
    if (!c->names) { rc = SQLITE_NOMEM; goto done; }
    char *p = (char *)(c->names + (n_out ? n_out : 1));
    for (int64_t j = 0; j < n_out; j++) {
      dc_reader_gene_name(r, c->gene_ids[j], &nm, &err);
      size_t l = strlen(nm) + 1;
      memcpy(p, nm, l);
      c->names[j] = p;
      p += l;
    }
  }

  /* the accumulators */
  dc_pool *pool = dc_conn_pool(v->conn);
  if (!pool) { rc = SQLITE_NOMEM; goto done; }
  dc_agg_opts o = { (uint32_t)r->n_genes, panel, (uint32_t)n_out, use_log1p, 1e4, dc_pool_size(pool) };
  uint64_t per_group = dc_agg_group_bytes(&o);
  int64_t limit = 4 * v->conn->work_bytes;
  {
    dc_error de;
    if (v->spare) { c->agg = v->spare; v->spare = NULL; rc = dc_agg_reset(c->agg, &o, &de); }
    else { c->agg = dc_agg_new(&o, &de); rc = c->agg ? DC_OK : de.code; }
    if (rc != DC_OK) { rc = dc_err(&v->base.zErrMsg, rc == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR, AGG_NAME(v), "%s", de.msg); goto done; }
  }
  if (!group_col) gm.null_group = 0;   /* one group, label NULL */

  /* the windows of tiles */
  {
    uint32_t t = 0;
    int64_t si = 0;                    /* next selected cell */
    int64_t window_bytes = v->conn->work_bytes / 4;
    while (t < r->n_tiles) {
      /* skip tiles without selected cells */
      if (sel) {
        if (si >= n_sel) break;
        int64_t tt = dc_reader_tile_of(r, sel[si]);
        if (tt < 0) { rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, AGG_NAME(v), "cell %lld has no tile", (long long)sel[si]); goto done; }
        t = (uint32_t)tt;
      }
      if (r->tiles[t].n_cells == 0) { t++; continue; }
      /* the window: tiles t .. t_end-1 */
      uint32_t t_end = t;
      int64_t bytes = 0;
      size_t n_keys = 0, keys_cap = 0;
      int64_t first = r->tiles[t].first_cell;
      int64_t k = si;                  /* selected cells in the window so far */
      while (t_end < r->n_tiles && (t_end == t || bytes < window_bytes)) {
        const dc_tilehead *h;
        if ((rc = dc_reader_head(r, t_end, &h, &err)) != SQLITE_OK) goto done;
        bytes += (int64_t)h->blob_len;
        t_end++;
        if (sel) {
          /* the next tile with a selected cell must follow at once to join */
          int64_t end = r->tiles[t_end - 1].first_cell + r->tiles[t_end - 1].n_cells;
          while (k < n_sel && sel[k] < end) k++;
          if (k >= n_sel || dc_reader_tile_of(r, sel[k]) != (int64_t)t_end) break;
        }
      }
      int64_t end_cell = r->tiles[t_end - 1].first_cell + r->tiles[t_end - 1].n_cells;
      size_t nw = (size_t)(end_cell - first);
      if (nw > labels_cap) {
        sqlite3_free(labels);
        labels = sqlite3_malloc64(nw * sizeof *labels);
        if (!labels) { rc = SQLITE_NOMEM; goto done; }
        labels_cap = nw;
      }
      /* selection mask: -2 = selected (group to be filled), -1 = not */
      if (sel) {
        for (size_t i = 0; i < nw; i++) labels[i] = -1;
        while (si < n_sel && sel[si] < end_cell) labels[sel[si++] - first] = -2;
      } else {
        for (size_t i = 0; i < nw; i++) labels[i] = -2;
      }
      /* group numbers */
      if (!group_col) {
        for (size_t i = 0; i < nw; i++) if (labels[i] == -2) labels[i] = 0;
      } else {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, first);
        sqlite3_bind_int64(st, 2, end_cell);
        size_t seen = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
          int64_t id = sqlite3_column_int64(st, 0) - first;
          if (id < 0 || (size_t)id >= nw) continue;
          seen++;
          if (labels[id] != -2) continue;
          int64_t g = group_of(&gm, sqlite3_column_value(st, 1));
          if (g < 0) { rc = SQLITE_NOMEM; goto done; }
          labels[id] = (int32_t)g;
        }
        if (rc != SQLITE_DONE) { rc = dc_err(&v->base.zErrMsg, rc, AGG_NAME(v), "group_by '%s': reading cells: %s", group_col, sqlite3_errmsg(v->db)); goto done; }
        rc = SQLITE_OK;
        if (seen != nw) {
          rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, AGG_NAME(v), "cells holds %lld rows for cells %lld..%lld, expected %lld",
                      (long long)seen, (long long)first, (long long)end_cell - 1, (long long)nw);
          goto done;
        }
      }
      /* groups: every number in use; the memory bound */
      uint32_t n_groups = gm.n > 0 ? gm.n : 1;
      if ((uint64_t)n_groups * per_group > (uint64_t)limit) {
        rc = dc_err(&v->base.zErrMsg, SQLITE_TOOBIG, AGG_NAME(v), "group_by '%s' gives %u groups: %u groups x %lld genes need %lld MiB of "
                    "accumulators (%d threads), more than 4 x dc_config('decode_mb') = %lld MiB; pass a gene panel, "
                    "group by a coarser column, or raise decode_mb", group_col ? group_col : "", n_groups, n_groups,
                    (long long)n_out, (long long)((n_groups * per_group) >> 20), o.slots, (long long)(limit >> 20));
        goto done;
      }
      {
        dc_error de;
        if (dc_agg_set_groups(c->agg, n_groups, &de) != DC_OK) { rc = dc_err(&v->base.zErrMsg, SQLITE_NOMEM, AGG_NAME(v), "%s", de.msg); goto done; }
      }
      /* the chunks holding selected cells */
      for (uint32_t tt = t; tt < t_end; tt++) {
        const dc_tilehead *h = r->heads[tt];
        int64_t base = r->tiles[tt].first_cell - first;
        for (uint32_t ch = 0; ch < h->hdr.n_chunks; ch++) {
          const dc_chunk_info *ci = &h->hdr.chunk[ch];
          int any = 0;
          for (uint32_t k = 0; k < ci->n_cells && !any; k++) any = labels[base + ci->first_cell + k] >= 0;
          if (!any) continue;
          if (n_keys == keys_cap) {
            keys_cap = keys_cap ? keys_cap * 2 : 64;
            dc_chunkkey *nk = sqlite3_realloc64(keys, keys_cap * sizeof *nk);
            if (!nk) { rc = SQLITE_NOMEM; goto done; }
            keys = nk;
          }
          keys[n_keys].tile = tt;
          keys[n_keys].chunk = ch;
          n_keys++;
        }
      }
      if (n_keys) {
        jobs = sqlite3_malloc64(n_keys * sizeof *jobs);
        cached = sqlite3_malloc64(n_keys * sizeof *cached);
        dc_chunkkey *miss = sqlite3_malloc64(n_keys * sizeof *miss);
        if (!jobs || !cached || !miss) { sqlite3_free(miss); rc = SQLITE_NOMEM; goto done; }
        memset(jobs, 0, n_keys * sizeof *jobs);
        /* with a panel, a tile whose gene map shows none of its genes is not read: its selected
        ** cells count as cells without a count of any panel gene (dc_reader_tile_may_hold) */
        sqlite3_free(none);
        if (!(none = sqlite3_malloc64(n_keys))) { sqlite3_free(miss); rc = SQLITE_NOMEM; goto done; }
        uint32_t most = 0;
        for (size_t q = 0; q < n_keys; q++) {
          int may = 1;
          if (panel && (q == 0 || keys[q].tile != keys[q - 1].tile) &&
              (rc = dc_reader_tile_may_hold(r, keys[q].tile, c->gene_ids, n_out, &may, &err)) != SQLITE_OK) {
            sqlite3_free(miss);
            goto done;
          }
          none[q] = q > 0 && keys[q].tile == keys[q - 1].tile ? none[q - 1] : !may;
          uint32_t nc = r->heads[keys[q].tile]->hdr.chunk[keys[q].chunk].n_cells;
          if (none[q] && nc > most) most = nc;
        }
        if (most) {
          sqlite3_free(nothing);
          if (!(nothing = sqlite3_malloc64(((uint64_t)most + 1) * sizeof *nothing))) { sqlite3_free(miss); rc = SQLITE_NOMEM; goto done; }
          memset(nothing, 0, ((size_t)most + 1) * sizeof *nothing);
        }
        struct dc_cache *cache = dc_conn_cache(v->conn);
        size_t n_miss = 0;
        n_cached = n_keys;
        for (size_t q = 0; q < n_keys; q++) {
          cached[q] = cache && !none[q] ? dc_cache_get(cache, r->ns, keys[q].tile, keys[q].chunk) : NULL;
          if (!cached[q] && !none[q]) miss[n_miss++] = keys[q];
        }
        rc = dc_reader_read(r, miss, n_miss, &tb, &ntb, &err);
        sqlite3_free(miss);
        if (rc != SQLITE_OK) goto done;
        size_t b = 0;
        for (size_t q = 0; q < n_keys; q++) {
          const dc_tilehead *h = r->heads[keys[q].tile];
          const dc_chunk_info *ci = &h->hdr.chunk[keys[q].chunk];
          dc_agg_job *j = &jobs[q];
          j->chunk = keys[q].chunk;
          j->group = labels + (r->tiles[keys[q].tile].first_cell - first) + ci->first_cell;
          if (none[q]) {
            j->n_cells = ci->n_cells;
            j->indptr = nothing;
          } else if (cached[q]) {
            if (cached[q]->n_cells != ci->n_cells) {
              rc = dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, AGG_NAME(v), "tile %u chunk %u: cached chunk has %u cells, expected %u",
                          keys[q].tile, keys[q].chunk, cached[q]->n_cells, ci->n_cells);
              goto done;
            }
            j->n_cells = ci->n_cells;
            j->indptr = cached[q]->indptr;
            j->indices = cached[q]->indices;
            j->values = cached[q]->values;
          } else {
            while (b < ntb && tb[b].tile < keys[q].tile) b++;
            if (b >= ntb || tb[b].tile != keys[q].tile) { rc = dc_err(&v->base.zErrMsg, SQLITE_INTERNAL, AGG_NAME(v), "tile %u not read", keys[q].tile); goto done; }
            j->buf = tb[b].buf;
            j->len = (size_t)h->blob_len;
            j->hdr = &h->hdr;
          }
        }
        if (dc_agg_run(c->agg, pool, jobs, n_keys) != DC_OK) {
          for (size_t q = 0; q < n_keys; q++)
            if (jobs[q].rc != DC_OK) {
              rc = dc_err(&v->base.zErrMsg, jobs[q].rc == DC_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT_VTAB, AGG_NAME(v), "tile %u %s",
                          keys[q].tile, jobs[q].err.msg[0] ? jobs[q].err.msg : dc_strerror(jobs[q].rc));
              break;
            }
          goto done;
        }
        dc_reader_read_free(tb, ntb); tb = NULL; ntb = 0;
        for (size_t q = 0; q < n_cached; q++) dc_chunk_release(cached[q]);
        sqlite3_free(cached); cached = NULL; n_cached = 0;
        sqlite3_free(jobs); jobs = NULL;
      }
      t = t_end;
    }
  }

  /* results */
  {
    dc_error de;
    if (dc_agg_finish(c->agg, &c->res, &de) != DC_OK) { rc = dc_err(&v->base.zErrMsg, SQLITE_NOMEM, AGG_NAME(v), "%s", de.msg); goto done; }
    uint32_t ng = c->res.n_groups;
    c->order = sqlite3_malloc64((uint64_t)(ng ? ng : 1) * sizeof *c->order);
    if (!c->order) { rc = SQLITE_NOMEM; goto done; }
    for (uint32_t g = 0; g < ng; g++) if (c->res.n_cells[g] > 0) c->order[c->n_order++] = g;
    if (group_col) {
      qsort_r(c->order, c->n_order, sizeof *c->order, dc_group_cmp, gm.g);   /* no global: connections in threads */
      c->groups = dc_groups_take(&gm, &c->n_groups);
    }
    c->n_rows = v->wide ? (int64_t)c->n_order : (int64_t)c->n_order * n_out;
    c->row = 0;
    c->eof = c->n_rows == 0;
  }

done:
  dc_reader_end(r);
  if (err) {
    sqlite3_free(v->base.zErrMsg);
    v->base.zErrMsg = err;
  }
  if (cached) for (size_t q = 0; q < n_cached; q++) dc_chunk_release(cached[q]);
  sqlite3_free(cached);
  dc_reader_read_free(tb, ntb);
  sqlite3_free(jobs);
  sqlite3_free(keys);
  sqlite3_free(none);
  sqlite3_free(nothing);
  sqlite3_free(labels);
  sqlite3_finalize(st);
  sqlite3_free(group_col);
  sqlite3_free(sel);
  dc_groups_free(&gm);
  if (rc != SQLITE_OK) cursor_clear(c, v);
  return rc;
}

static int agg_next(sqlite3_vtab_cursor *cur) {
  agg_cursor *c = (agg_cursor *)cur;
  if (++c->row >= c->n_rows) c->eof = 1;
  return SQLITE_OK;
}
static int agg_eof(sqlite3_vtab_cursor *cur) { return ((agg_cursor *)cur)->eof; }

static void result_u64(sqlite3_context *ctx, uint64_t x) {
  if (x <= (uint64_t)INT64_MAX) sqlite3_result_int64(ctx, (sqlite3_int64)x);
  else sqlite3_result_double(ctx, (double)x);
}

static void result_label(agg_cursor *c, sqlite3_context *ctx, uint32_t g) {
  const dc_gval *x = c->groups && g < c->n_groups ? &c->groups[g] : NULL;
  switch (x ? x->type : SQLITE_NULL) {
    case SQLITE_INTEGER: sqlite3_result_int64(ctx, x->i); break;
    case SQLITE_FLOAT: sqlite3_result_double(ctx, x->f); break;
    case SQLITE_TEXT: sqlite3_result_text(ctx, (const char *)x->s, x->n, SQLITE_TRANSIENT); break;
    case SQLITE_BLOB: sqlite3_result_blob(ctx, x->s, x->n, SQLITE_TRANSIENT); break;
    default: sqlite3_result_null(ctx); break;
  }
}

static int aggl_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  agg_cursor *c = (agg_cursor *)cur;
  uint32_t n_out = c->res.n_out;
  uint32_t g = c->order[c->row / n_out];
  uint32_t j = (uint32_t)(c->row % n_out);
  size_t k = (size_t)g * n_out + j;
  double n = (double)c->res.n_cells[g];
  switch (col) {
    case L_LABEL: result_label(c, ctx, g); break;
    case L_GENE_ID: sqlite3_result_int(ctx, c->gene_ids[j]); break;
    case L_GENE:
      if (c->names) sqlite3_result_text(ctx, c->names[j], -1, SQLITE_STATIC);
      else sqlite3_result_null(ctx);
      break;
    case L_NCELLS: result_u64(ctx, c->res.n_cells[g]); break;
    case L_SUM: result_u64(ctx, c->res.acc[2 * k]); break;
    case L_MEAN: sqlite3_result_double(ctx, (double)c->res.acc[2 * k] / n); break;
    case L_NEXPR: result_u64(ctx, c->res.acc[2 * k + 1]); break;
    case L_FRAC: sqlite3_result_double(ctx, (double)c->res.acc[2 * k + 1] / n); break;
    case L_LOG1P:
      if (c->res.sum_log1p) sqlite3_result_double(ctx, c->res.sum_log1p[k] / n);
      else sqlite3_result_null(ctx);
      break;
    default: sqlite3_result_null(ctx); break;
  }
  return SQLITE_OK;
}

static int aggw_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  agg_cursor *c = (agg_cursor *)cur;
  uint32_t n_out = c->res.n_out;
  uint32_t g = c->order[c->row];
  size_t k0 = (size_t)g * n_out;
  switch (col) {
    case W_LABEL: result_label(c, ctx, g); break;
    case W_NCELLS: result_u64(ctx, c->res.n_cells[g]); break;
    case W_NGENES: sqlite3_result_int64(ctx, n_out); break;
    case W_GENE_IDS: {
      uint8_t *b = sqlite3_malloc64((uint64_t)n_out * 4 + 1);
      if (!b) { sqlite3_result_error_nomem(ctx); break; }
      for (uint32_t j = 0; j < n_out; j++) {
        uint32_t x = (uint32_t)c->gene_ids[j];
        b[4 * j] = (uint8_t)x; b[4 * j + 1] = (uint8_t)(x >> 8); b[4 * j + 2] = (uint8_t)(x >> 16); b[4 * j + 3] = (uint8_t)(x >> 24);
      }
      sqlite3_result_blob64(ctx, b, (uint64_t)n_out * 4, sqlite3_free);
      break;
    }
    case W_SUM: case W_NEXPR: {
      int64_t *b = sqlite3_malloc64((uint64_t)n_out * 8 + 1);
      if (!b) { sqlite3_result_error_nomem(ctx); break; }
      const uint64_t *a = c->res.acc + 2 * k0 + (col == W_NEXPR);
      for (uint32_t j = 0; j < n_out; j++) b[j] = (int64_t)a[2 * j];   /* little-endian hosts (x86-64, arm64) */
      sqlite3_result_blob64(ctx, b, (uint64_t)n_out * 8, sqlite3_free);
      break;
    }
    case W_LOG1P: {
      if (!c->res.sum_log1p) { sqlite3_result_null(ctx); break; }
      double *b = sqlite3_malloc64((uint64_t)n_out * 8 + 1);
      if (!b) { sqlite3_result_error_nomem(ctx); break; }
      double n = (double)c->res.n_cells[g];
      for (uint32_t j = 0; j < n_out; j++) b[j] = c->res.sum_log1p[k0 + j] / n;
      sqlite3_result_blob64(ctx, b, (uint64_t)n_out * 8, sqlite3_free);
      break;
    }
    default: sqlite3_result_null(ctx); break;
  }
  return SQLITE_OK;
}

static int agg_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((agg_cursor *)cur)->row;
  return SQLITE_OK;
}

static sqlite3_module aggl_module = {
  3, aggl_create, aggl_connect, agg_best_index, agg_disconnect, agg_disconnect,
  agg_open, agg_close, agg_filter, agg_next, agg_eof, aggl_column, agg_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};
static sqlite3_module aggw_module = {
  3, aggw_create, aggw_connect, agg_best_index, agg_disconnect, agg_disconnect,
  agg_open, agg_close, agg_filter, agg_next, agg_eof, aggw_column, agg_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};

int dc_register_aggregate(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  int rc = sqlite3_create_module_v2(db, "deltacells_aggregate", &aggl_module, conn, dc_conn_unref);
  if (rc != SQLITE_OK) return rc;
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_aggregate_wide", &aggw_module, conn, dc_conn_unref);
}
