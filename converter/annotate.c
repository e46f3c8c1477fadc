/*
** annotate.c — the `annotate` command (docs/converter.md): obs columns from a CSV table
** joined to a dataset's cells by name or cell_id, added or replaced in place.
*/
#include "merge.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cv_dtype.h"
#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "dc_seal.h"
#include "merge_store.h"

/* ------------------------------------------------------------ annotate */
/* A CSV table in memory: fields of each record (RFC 4180: quotes, "" inside quotes, CRLF). */
typedef struct csvrec {
  char **fld;         /* fld[c]: NUL-terminated field (in the table's buffer) */
  uint8_t *quoted;    /* quoted[c]: the field was quoted */
  uint32_t n_fld;
  int64_t line;       /* the line the record starts on (1-based) */
} csvrec;
typedef struct csvtab {
  char *buf;
  size_t n_rec, cap_rec;
  csvrec *rec;
} csvtab;

static void csv_free(csvtab *t) {
  for (size_t r = 0; r < t->n_rec; r++) { free(t->rec[r].fld); free(t->rec[r].quoted); }
  free(t->rec); free(t->buf);
  memset(t, 0, sizeof *t);
}

static int csv_read(const char *path, csvtab *t, cv_err *e) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) return cv_fail(e, "%s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0, k;
  char *b = malloc(cap + 1);
  while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) { char *nb = realloc(b, cap * 2 + 1); if (!nb) { free(b); b = NULL; break; } b = nb; cap *= 2; }
  }
  int err = ferror(f);
  fclose(f);
  if (!b) return cv_fail(e, "%s: out of memory", path);
  if (err) { free(b); return cv_fail(e, "%s: read error", path); }
  b[n] = 0;
  t->buf = b;
  size_t i = 0;
  int64_t line = 1;
  if (n >= 3 && (unsigned char)b[0] == 0xEF && (unsigned char)b[1] == 0xBB && (unsigned char)b[2] == 0xBF) i = 3;  /* BOM */
  while (i < n) {
    int64_t start_line = line;
    char **fl = NULL;
    uint8_t *ql = NULL;
    size_t nf = 0, fcap = 0, qcap = 0;
    for (;;) {  /* one field */
      char *out = b + i, *w = out;
      int q = i < n && b[i] == '"';
      if (q) {
        i++;
        for (;;) {
          if (i >= n) { free(fl); free(ql); return cv_fail(e, "%s: line %lld: a quoted field is not closed before the end of the file", path, (long long)start_line); }
          if (b[i] == '"') {
            if (i + 1 < n && b[i + 1] == '"') { *w++ = '"'; i += 2; continue; }
            i++;
            break;
          }
          if (b[i] == '\n') line++;
          *w++ = b[i++];
        }
        if (i < n && b[i] != ',' && b[i] != '\n' && b[i] != '\r') {
          free(fl);
          free(ql);
          return cv_fail(e, "%s: line %lld: text after a closing quote (a quote inside a quoted field is written \"\")", path, (long long)line);
        }
      } else {
        while (i < n && b[i] != ',' && b[i] != '\n' && b[i] != '\r') {
          if (b[i] == '"') { free(fl); free(ql); return cv_fail(e, "%s: line %lld: a quote inside an unquoted field", path, (long long)line); }
          *w++ = b[i++];
        }
      }
      char sep = i < n ? b[i] : '\n';
      if (memchr(out, 0, (size_t)(w - out))) {   /* it would end the field there, unseen */
        free(fl);
        free(ql);
        return cv_fail(e, "%s: line %lld: field %zu holds a NUL byte (not a text file, or a damaged one)", path,
                       (long long)line, nf + 1);
      }
      *w = 0;   /* overwrites the separator or the quote, both already read */
      if (cv_grow((void **)&fl, &fcap, nf + 1, sizeof *fl, e) || cv_grow((void **)&ql, &qcap, nf + 1, 1, e)) { free(fl); free(ql); return -1; }
      ql[nf] = (uint8_t)q;
      fl[nf++] = out;
      if (!cv_utf8_valid(out, strlen(out))) { free(fl); free(ql); return cv_fail(e, "%s: line %lld: field %zu is not UTF-8 text", path, (long long)line, nf); }
      if (sep == ',') { i++; continue; }
      if (i < n) i++;   /* the '\r' or '\n' (overwritten by the NUL above) */
      if (sep == '\r' && i < n && b[i] == '\n') i++;
      line++;
      break;
    }
    if (nf == 1 && !fl[0][0] && !ql[0]) { free(fl); free(ql); continue; }   /* an empty line */
    if (cv_grow((void **)&t->rec, &t->cap_rec, t->n_rec + 1, sizeof *t->rec, e)) { free(fl); free(ql); return -1; }
    t->rec[t->n_rec++] = (csvrec){fl, ql, (uint32_t)nf, start_line};
  }
  if (!t->n_rec) return cv_fail(e, "%s: empty (a header row is needed: the key column, then the columns to add)", path);
  for (size_t r = 1; r < t->n_rec; r++)
    if (t->rec[r].n_fld != t->rec[0].n_fld)
      return cv_fail(e, "%s: line %lld: %u fields, the header has %u", path, (long long)t->rec[r].line, t->rec[r].n_fld,
                     t->rec[0].n_fld);
  return 0;
}

static int is_na(const char *s) {
  return !*s || !strcmp(s, "NA") || !strcmp(s, "NaN") || !strcmp(s, "nan") || !strcmp(s, "null") || !strcmp(s, "NULL") ||
         !strcmp(s, "None") || !strcmp(s, "<NA>");
}

static int parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || errno) return 0;
  *v = x;
  return 1;
}

/* s is a whole integer that fits no int64 (strtoll's ERANGE): parse_i64 refuses it, and the
** message says why rather than "not an integer". */
static int i64_out_of_range(const char *s) {
  char *end;
  errno = 0;
  (void)strtoll(s, &end, 10);
  return end != s && !*end && errno == ERANGE;
}

static int parse_f64(const char *s, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || (errno && fabs(x) > 1)) return 0;
  *v = x;
  return 1;
}

static int parse_bool(const char *s, int *v) {
  if (!strcmp(s, "True") || !strcmp(s, "true") || !strcmp(s, "TRUE")) { *v = 1; return 1; }
  if (!strcmp(s, "False") || !strcmp(s, "false") || !strcmp(s, "FALSE")) { *v = 0; return 1; }
  return 0;
}

/* --schema: a column's entry (each field NULL when not given).  Returns 0, or -1. */
typedef struct colschema {
  char *categories;        /* JSON array of the labels, in order */
  int ordered;             /* 1: ordered */
  char *dtype, *cat_dtype;
} colschema;

static void colschema_free(colschema *c) {
  sqlite3_free(c->categories); sqlite3_free(c->dtype); sqlite3_free(c->cat_dtype);
  memset(c, 0, sizeof *c);
}

static char *dup_col(sqlite3_stmt *st, int i) {
  const unsigned char *t = sqlite3_column_text(st, i);
  return t ? sqlite3_mprintf("%s", t) : NULL;
}

static int schema_of(sqlite3 *db, const char *path, const char *json, const char *col, colschema *out, cv_err *e) {
  memset(out, 0, sizeof *out);
  if (!json) return 0;
  sqlite3_stmt *st = cv_prep(db, e, "SELECT json_extract(value, '$.categories'), json_type(value, '$.categories'), "
                                  "json_extract(value, '$.ordered'), json_type(value, '$.ordered'), "
                                  "json_extract(value, '$.dtype'), json_type(value, '$.dtype'), "
                                  "json_extract(value, '$.categories_dtype'), json_type(value, '$.categories_dtype'), "
                                  "json_type(value) FROM json_each(?1) WHERE key = ?2");
  if (!st) return -1;
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
  int rc = 0;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *t_cat = (const char *)sqlite3_column_text(st, 1), *t_ord = (const char *)sqlite3_column_text(st, 3),
               *t_dt = (const char *)sqlite3_column_text(st, 5), *t_cdt = (const char *)sqlite3_column_text(st, 7),
               *t_all = (const char *)sqlite3_column_text(st, 8);
    if (!t_all || strcmp(t_all, "object"))
      rc = cv_fail(e, "%s: column '%s': not an object of categories, ordered, dtype, categories_dtype", path, col);
    else if ((t_cat && strcmp(t_cat, "array")) || (t_ord && strcmp(t_ord, "true") && strcmp(t_ord, "false")) ||
             (t_dt && strcmp(t_dt, "text")) || (t_cdt && strcmp(t_cdt, "text")))
      rc = cv_fail(e, "%s: column '%s': categories is an array of labels, ordered true or false, dtype and "
                   "categories_dtype names", path, col);
    else {
      out->categories = t_cat ? dup_col(st, 0) : NULL;
      out->ordered = t_ord && !strcmp(t_ord, "true");
      out->dtype = t_dt ? dup_col(st, 4) : NULL;
      out->cat_dtype = t_cdt ? dup_col(st, 6) : NULL;
    }
  }
  sqlite3_finalize(st);
  return rc;
}

/* dc_meta for a column annotate wrote, stored as `name`: from its --schema entry obs_ordered,
** obs_dtypes, obs_cat_dtypes; obs_names when file_name (its name in the files) is not NULL. */
static int column_meta(sqlite3 *db, const char *name, const char *file_name, const colschema *cs, cv_err *e) {
  static const char *const sql[] = {
      "INSERT OR IGNORE INTO main.dc_meta(key, value) VALUES ('obs_ordered', '[]'), ('obs_dtypes', '{}'), ('obs_cat_dtypes', '{}')",
      "INSERT OR IGNORE INTO main.dc_meta(key, value) SELECT 'obs_names', '{}' WHERE ?5 IS NOT NULL",
      "UPDATE main.dc_meta SET value = (SELECT json_group_array(value) FROM (SELECT value FROM json_each(dc_meta.value) "
      "UNION ALL SELECT ?1)) WHERE key = 'obs_ordered' AND ?2",
      "UPDATE main.dc_meta SET value = json_patch(value, json_object(?1, ?3)) WHERE key = 'obs_dtypes' AND ?3 IS NOT NULL",
      "UPDATE main.dc_meta SET value = json_patch(value, json_object(?1, ?4)) WHERE key = 'obs_cat_dtypes' AND ?4 IS NOT NULL",
      "UPDATE main.dc_meta SET value = json_patch(value, json_object(?1, ?5)) WHERE key = 'obs_names' AND ?5 IS NOT NULL",
      "DELETE FROM main.dc_meta WHERE key IN ('obs_ordered', 'obs_dtypes', 'obs_cat_dtypes') AND value IN ('[]', '{}')"};
  for (size_t k = 0; k < sizeof sql / sizeof *sql; k++) {
    sqlite3_stmt *st = NULL;
    int r = sqlite3_prepare_v2(db, sql[k], -1, &st, NULL);
    if (r == SQLITE_OK) {   /* numbered parameters: each statement binds those it names */
      int np = sqlite3_bind_parameter_count(st);
      if (np >= 1) sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
      if (np >= 2) sqlite3_bind_int(st, 2, cs->ordered);
      if (np >= 3) sqlite3_bind_text(st, 3, cs->dtype, -1, SQLITE_STATIC);
      if (np >= 4) sqlite3_bind_text(st, 4, cs->cat_dtype, -1, SQLITE_STATIC);
      if (np >= 5) sqlite3_bind_text(st, 5, file_name, -1, SQLITE_STATIC);
      r = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    if (r != SQLITE_DONE) return cv_fail(e, "dc_meta: %s", sqlite3_errmsg(db));
  }
  return 0;
}

/* The column an annotation column `name` replaces (*ti, an index into cols), or -1 to add one:
** the column whose name in the input files is `name` (*renamed when it is stored under another
** name because its own was taken by one that differs in case: it keeps the stored name), else the
** one stored as `name`, else the one stored under `name` in another case. Two of those (cellType
** and CellType, stored apart as one's file name and another's) is an error naming both. */
static int target_col(sqlite3 *db, const dcol *cols, int ncols, const char *name, const char *dataset, int *ti,
                      int *renamed, cv_err *e) {
  *ti = -1;
  *renamed = 0;
  sqlite3_stmt *st = NULL;
  int r = sqlite3_prepare_v2(db, "SELECT j.key FROM main.dc_meta, json_each(dc_meta.value) AS j "
                                 "WHERE dc_meta.key = 'obs_names' AND j.value = ?1", -1, &st, NULL);
  if (r == SQLITE_OK) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
      const char *k = (const char *)sqlite3_column_text(st, 0);
      for (int i = 0; k && i < ncols && *ti < 0; i++)
        if (!strcmp(cols[i].name, k)) { *ti = i; *renamed = strcmp(k, name) != 0; }
    }
  }
  sqlite3_finalize(st);
  if (r != SQLITE_DONE) return cv_fail(e, "%s: dc_meta: %s", dataset, sqlite3_errmsg(db));
  if (*ti >= 0) return 0;
  for (int i = 0; i < ncols; i++)
    if (!strcmp(cols[i].name, name)) { *ti = i; return 0; }
  for (int i = 0; i < ncols; i++)
    if (!strcasecmp(cols[i].name, name)) {
      if (*ti >= 0)
        return cv_fail(e, "%s: column '%s' matches the dataset's columns '%s' and '%s', which differ only in case; "
                          "name the table's column as one of them is named", dataset, name, cols[*ti].name, cols[i].name);
      *ti = i;
    }
  return 0;
}

/* Whether --schema's dtype d is one a column of kind keeps in the files (cv_dtype_kept): *dt
** is then its row, whose range (integers) or largest value (floats) the values must fit. */
static int schema_dtype(const char *d, int kind, const cv_dtype **dt) {
  if (kind != DC_OBS_INT && kind != DC_OBS_REAL) return 0;
  *dt = cv_dtype_find(cv_dtype_kept(d, kind == DC_OBS_REAL));
  return *dt != NULL;
}

/* Whether value i of v fits dtype dt: an integer in its range, a finite float up to its largest
** value (an infinity stays one; a missing value, NaN or not valid, fits). */
static int schema_fits(const cv_dtype *dt, const vals *v, int64_t i) {
  if (dt->is_float) return !isfinite(v->f64[i]) || fabs(v->f64[i]) <= dt->max;
  return !v->valid[i] || (v->i64[i] >= dt->lo && (v->i64[i] < 0 || (uint64_t)v->i64[i] <= dt->hi));
}

/* What schema_dtype allows, as a message (sqlite3_malloc()ed; NULL when out of memory). */
static char *schema_dtype_rule(void) {
  char *ints = cv_dtype_kept_list(0, "", ", "), *reals = cv_dtype_kept_list(1, "", ", ");
  char *r = ints && reals ? sqlite3_mprintf("dtype is one of %s for an int column, %s for a real one", ints, reals) : NULL;
  sqlite3_free(ints);
  sqlite3_free(reals);
  return r;
}

int cv_annotate(const cv_annotate_opts *o, cv_err *e) {
  static const char *const reserved[] = {"_index", "cell_id", "name", "tile", NULL};
  csvtab t;
  memset(&t, 0, sizeof t);
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  dcol *cols = NULL;
  int ncols = 0, rc = -1, in_tx = 0;
  int64_t *row_of = NULL;   /* cell -> CSV record, -1 */
  int *kinds = NULL;
  vals v;
  memset(&v, 0, sizeof v);
  cv_map names = {0}, lm = {0};
  char **labels = NULL;
  int64_t nl = 0;
  dsw w;
  memset(&w, 0, sizeof w);
  sqlite3_str *said = sqlite3_str_new(NULL);   /* a line per column, printed once committed */
  char *schema_json = NULL;                     /* --schema's text */
  colschema cs;
  memset(&cs, 0, sizeof cs);
  int by_id = !strcmp(o->key, "cell_id");
  if (!by_id && strcmp(o->key, "name") != 0) return cv_fail(e, "--key: '%s' is neither name nor cell_id", o->key);
  if (csv_read(o->table, &t, e)) goto done;
  uint32_t nf = t.rec[0].n_fld, kc = 0;
  char **hdr = t.rec[0].fld;
  for (uint32_t c = 0; c < nf; c++)
    if (!strcmp(hdr[c], o->key)) kc = c;
  if (nf < 2) {
    cv_fail(e, "%s: line %lld: one column only; the table needs the key column and at least one column to add%s", o->table,
            (long long)t.rec[0].line, strchr(hdr[0], '\t') || strchr(hdr[0], ';') ? " (the fields are separated by commas: "
            "tabs and semicolons are read as text)" : "");
    goto done;
  }
  for (uint32_t c = 0; c < nf; c++) {
    if (c == kc) continue;
    if (!hdr[c][0]) { cv_fail(e, "%s: line %lld: column %u has no name", o->table, (long long)t.rec[0].line, c + 1); goto done; }
    for (int r = 0; reserved[r]; r++)
      if (!strcasecmp(hdr[c], reserved[r])) { cv_fail(e, "%s: column '%s' is one of the cells table's own columns (_index, cell_id, name, tile); rename it", o->table, hdr[c]); goto done; }
    for (uint32_t d = 0; d < c; d++)
      if (d != kc && !strcasecmp(hdr[c], hdr[d])) { cv_fail(e, "%s: columns '%s' and '%s' have the same name (SQLite ignores case)", o->table, hdr[d], hdr[c]); goto done; }
  }
  if (sqlite3_open_v2(o->dataset, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) { cv_fail(e, "%s: %s", o->dataset, db ? sqlite3_errmsg(db) : "cannot open"); goto done; }
  sqlite3_busy_timeout(db, 60000);
  if (cv_exec(db, "BEGIN IMMEDIATE", e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  in_tx = 1;
  if (cv_read_meta(db, "main", o->dataset, &D, e) || cv_read_cols(db, "main", o->dataset, D.id, &cols, &ncols, e)) goto done;
  /* the cell of every record */
  int64_t N = D.n_cells, B = D.obs_block;
  row_of = malloc(((size_t)N + 1) * sizeof *row_of);
  if (!row_of) { cv_fail(e, "out of memory"); goto done; }
  for (int64_t i = 0; i < N; i++) row_of[i] = -1;
  if (!by_id) {
    vals nv;
    if (cv_load_names(db, "cells", o->dataset, &nv, e)) goto done;
    for (uint64_t i = 0; i < nv.n; i++) {
      const char *nm = nv.text[i] ? nv.text[i] : "";
      uint32_t *p = cv_map_ref(&names, nm);
      if (p) *p = UINT32_MAX;  /* a name several cells have */
      else if (cv_map_put(&names, nm, (uint32_t)i, e)) { cv_vals_free(&nv); goto done; }
    }
    cv_vals_free(&nv);
  }
  int64_t unmatched = 0;
  sqlite3_str *um = sqlite3_str_new(NULL);
  for (size_t r = 1; r < t.n_rec; r++) {
    const char *k = t.rec[r].fld[kc];
    int64_t cell = -1;
    if (by_id) {
      if (!parse_i64(k, &cell)) { sqlite3_free(sqlite3_str_finish(um)); cv_fail(e, "%s: line %lld: key '%s' is not a cell_id (an integer)", o->table, (long long)t.rec[r].line, k); goto done; }
      if (cell < 0 || cell >= N) cell = -1;
    } else {
      uint32_t id;
      if (cv_map_get(&names, k, &id)) {
        if (id == UINT32_MAX) { sqlite3_free(sqlite3_str_finish(um)); cv_fail(e, "%s: line %lld: several cells are named '%s'; key by cell_id instead (--key cell_id)", o->table, (long long)t.rec[r].line, k); goto done; }
        cell = id;
      }
    }
    if (cell < 0) {
      if (unmatched++ < 5) sqlite3_str_appendf(um, "%s'%s' (line %lld)", unmatched > 1 ? ", " : "", k, (long long)t.rec[r].line);
      continue;
    }
    if (row_of[cell] >= 0) { sqlite3_free(sqlite3_str_finish(um)); cv_fail(e, "%s: line %lld: key '%s' again (first on line %lld)", o->table, (long long)t.rec[r].line, k, (long long)t.rec[row_of[cell]].line); goto done; }
    row_of[cell] = (int64_t)r;
  }
  char *ums = sqlite3_str_finish(um);
  if (unmatched == (int64_t)t.n_rec - 1) {
    /* nothing to annotate: every column would be replaced by NULLs (a table keyed by something
    ** else, e.g. a DataFrame's default 0, 1, 2, ... index, or a header alone) */
    int ints = !by_id;
    for (size_t r = 1; r < t.n_rec && ints; r++) { int64_t x; ints = parse_i64(t.rec[r].fld[kc], &x); }
    if (t.n_rec <= 1) cv_fail(e, "%s: no rows under its header: nothing to annotate; nothing was changed", o->table);
    else cv_fail(e, "%s: no key of its %zu row%s matches a cell of %s by %s (%s%s); nothing was changed%s", o->table,
                 t.n_rec - 1, t.n_rec == 2 ? "" : "s", o->dataset, by_id ? "cell_id" : "name", ums ? ums : "",
                 unmatched > 5 ? ", ..." : "",
                 ints ? " (the keys are integers: cell ids? --key cell_id, or key='cell_id' in Python)" : "");
    sqlite3_free(ums);
    goto done;
  }
  /* each column's kind: given (--type), else inferred from its values */
  kinds = calloc(nf, sizeof *kinds);
  if (!kinds) { sqlite3_free(ums); cv_fail(e, "out of memory"); goto done; }
  for (int i = 0; i < o->n_types; i++) {
    const char *eq = strrchr(o->types[i], '=');
    int found = 0;
    int k = eq ? dc_obs_kind_from_name(eq + 1) : 0;
    if (!k) { sqlite3_free(ums); cv_fail(e, "--type %s: give COLUMN=KIND, KIND one of category, text, int, real, bool", o->types[i]); goto done; }
    for (uint32_t c = 0; c < nf; c++)
      if (c != kc && strlen(hdr[c]) == (size_t)(eq - o->types[i]) && !strncmp(hdr[c], o->types[i], (size_t)(eq - o->types[i]))) { kinds[c] = k; found = 1; }
    if (!found) { sqlite3_free(ums); cv_fail(e, "--type %s: the table has no such column", o->types[i]); goto done; }
  }
  if (o->schema) {   /* --schema: a JSON object whose keys are columns of the table */
    FILE *sf = fopen(o->schema, "rb");
    if (!sf) { sqlite3_free(ums); cv_fail(e, "--schema %s: %s", o->schema, strerror(errno)); goto done; }
    sqlite3_str *sb = sqlite3_str_new(NULL);
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, sf)) > 0) sqlite3_str_append(sb, chunk, (int)got);
    int ferr = ferror(sf);
    fclose(sf);
    schema_json = sqlite3_str_finish(sb);
    if (ferr || !schema_json) { sqlite3_free(ums); cv_fail(e, "--schema %s: %s", o->schema, ferr ? "read error" : "empty"); goto done; }
    sqlite3_stmt *st = cv_prep(db, e, "SELECT json_valid(?1) AND json_type(?1) = 'object'");
    if (!st) { sqlite3_free(ums); goto done; }
    sqlite3_bind_text(st, 1, schema_json, -1, SQLITE_STATIC);
    int ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (!ok) { sqlite3_free(ums); cv_fail(e, "--schema %s: not a JSON object (column -> its types)", o->schema); goto done; }
    st = cv_prep(db, e, "SELECT key FROM json_each(?1)");
    if (!st) { sqlite3_free(ums); goto done; }
    sqlite3_bind_text(st, 1, schema_json, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *k = (const char *)sqlite3_column_text(st, 0);
      int found = 0;
      for (uint32_t c = 0; c < nf && k; c++) found |= c != kc && !strcmp(hdr[c], k);
      if (!found) {
        cv_fail(e, "--schema %s: the table has no column '%s'", o->schema, k ? k : "");
        sqlite3_finalize(st);
        sqlite3_free(ums);
        goto done;
      }
    }
    sqlite3_finalize(st);
  }
  int64_t next_col = 0;
  for (int i = 0; i < ncols; i++) if (cols[i].col >= next_col) next_col = cols[i].col + 1;
  int n_new = 0, n_repl = 0;
  if (dsw_over(&w, db, o->dataset, D.id, e)) { sqlite3_free(ums); goto done; }
  for (uint32_t c = 0; c < nf; c++) {
    if (c == kc) continue;
    colschema_free(&cs);
    if (schema_of(db, o->schema, schema_json, hdr[c], &cs, e)) { sqlite3_free(ums); goto done; }
    int kind = kinds[c];
    if (!kind && cs.categories) kind = DC_OBS_CATEGORY;
    if (!kind) {  /* int, else bool, else real, else category or text */
      int all_i = 1, all_b = 1, all_f = 1;
      size_t big = 0;     /* the first row with an integer beyond int64, while every value is an integer */
      cv_map dv = {0};
      uint64_t distinct = 0, nn = 0;
      for (size_t r = 1; r < t.n_rec; r++) {
        const char *s = t.rec[r].fld[c];
        if (is_na(s)) continue;
        int64_t iv; double fv; int bv;
        nn++;
        int is_i = parse_i64(s, &iv);
        if (!is_i && !big && i64_out_of_range(s)) big = r;
        else if (!is_i) big = (size_t)-1;   /* not all integers: real or text, as before */
        all_i &= is_i;
        all_b &= parse_bool(s, &bv);
        all_f &= parse_f64(s, &fv);
        if (distinct <= 65536 && !cv_map_ref(&dv, s)) { distinct++; if (cv_map_put(&dv, s, 0, e)) { cv_map_free(&dv); sqlite3_free(ums); goto done; } }
      }
      cv_map_free(&dv);
      if (big && big != (size_t)-1) {   /* a real would round it, and text would be a guess: asked */
        sqlite3_free(ums);
        cv_fail(e, "%s: line %lld (%s '%s'): column '%s': value %s is an integer that does not fit a signed 64-bit "
                "integer, which is how the dataset stores integers; say how to store the column: --type %s=text "
                "(exact) or --type %s=real (rounded)", o->table, (long long)t.rec[big].line, hdr[kc], t.rec[big].fld[kc],
                hdr[c], t.rec[big].fld[c], hdr[c], hdr[c]);
        goto done;
      }
      kind = !nn ? DC_OBS_TEXT : all_i ? DC_OBS_INT : all_b ? DC_OBS_BOOL : all_f ? DC_OBS_REAL
             : (distinct > 65536 || distinct * 2 > nn) ? DC_OBS_TEXT : DC_OBS_CATEGORY;
    }
    /* every value of the column is checked, also those of rows that match no cell */
    for (size_t r = 1; r < t.n_rec; r++) {
      const char *s = t.rec[r].fld[c];
      int64_t iv; double fv; int bv;
      if (is_na(s)) continue;
      int ok = kind == DC_OBS_INT ? parse_i64(s, &iv) : kind == DC_OBS_REAL ? parse_f64(s, &fv)
               : kind == DC_OBS_BOOL ? (parse_bool(s, &bv) || (parse_i64(s, &iv) && (iv == 0 || iv == 1))) : 1;
      if (!ok && kind == DC_OBS_INT && i64_out_of_range(s)) {   /* as convert says it of an obs column */
        sqlite3_free(ums);
        cv_fail(e, "%s: line %lld (%s '%s'): column '%s': value %s does not fit a signed 64-bit integer, which is how "
                "the dataset stores integers; make the column real or text first (--type %s=real)",
                o->table, (long long)t.rec[r].line, hdr[kc], t.rec[r].fld[kc], hdr[c], s, hdr[c]);
        goto done;
      }
      if (!ok) { sqlite3_free(ums); cv_fail(e, "%s: line %lld: column '%s': '%s' is not %s", o->table, (long long)t.rec[r].line, hdr[c], s, kind == DC_OBS_INT ? "an integer" : kind == DC_OBS_REAL ? "a number" : "a boolean (true/false, 1/0)"); goto done; }
    }
    /* the values, cell by cell */
    cv_vals_free(&v);
    v.kind = kind;
    cv_map_free(&lm);
    memset(&lm, 0, sizeof lm);
    if (labels) for (int64_t k = 0; k < nl; k++) free(labels[k]);
    free(labels);
    labels = NULL;
    nl = 0;
    const cv_dtype *dt = NULL;   /* --schema's dtype */
    {  /* --schema entries must fit the column's kind */
      const char *why = NULL;
      char *rule = NULL;
      if ((cs.categories || cs.ordered || cs.cat_dtype) && kind != DC_OBS_CATEGORY) why = "categories, ordered and categories_dtype are for a category column";
      else if (cs.dtype && !schema_dtype(cs.dtype, kind, &dt)) why = (rule = schema_dtype_rule()) ? rule : "dtype: out of memory";
      else if (cs.cat_dtype && !cv_cat_dtype_known(cs.cat_dtype)) {
        char *names = cv_cat_dtype_list("", ", ");
        why = rule = names ? sqlite3_mprintf("categories_dtype is one of %s", names) : NULL;
        sqlite3_free(names);
        if (!why) why = "categories_dtype: out of memory";
      }
      if (why) {
        sqlite3_free(ums);
        cv_fail(e, "--schema %s: column '%s' (%s): %s", o->schema, hdr[c], cv_obs_kind_label(kind), why);
        sqlite3_free(rule);
        goto done;
      }
    }
    if (cs.categories) {   /* the codes in the given order, unused categories kept */
      sqlite3_stmt *st = cv_prep(db, e, "SELECT value, type FROM json_each(?1)");
      if (!st) { sqlite3_free(ums); goto done; }
      sqlite3_bind_text(st, 1, cs.categories, -1, SQLITE_STATIC);
      int bad = 0;
      while (!bad && sqlite3_step(st) == SQLITE_ROW) {
        const char *lab = (const char *)sqlite3_column_text(st, 0), *ty = (const char *)sqlite3_column_text(st, 1);
        int32_t code;
        int64_t before = nl;
        if (!lab || !ty || strcmp(ty, "text")) bad = cv_fail(e, "--schema %s: column '%s': categories must be strings", o->schema, hdr[c]);
        else if (cv_add_label(&labels, &nl, &lm, lab, &code, e)) bad = -1;
        else if (nl == before) bad = cv_fail(e, "--schema %s: column '%s': category '%s' is given twice", o->schema, hdr[c], lab);
      }
      sqlite3_finalize(st);
      if (bad) { sqlite3_free(ums); goto done; }
    }
    if (cv_vals_reserve(&v, (uint64_t)N + 1, e)) { sqlite3_free(ums); goto done; }
    for (int64_t i = 0; i < N; i++) {
      int64_t r = row_of[i];
      const char *s = r >= 0 ? t.rec[r].fld[c] : NULL;
      val1 x;
      memset(&x, 0, sizeof x);
      x.kind = kind;
      /* in a text or categorical column a quoted field is the text itself: "NA" is a label */
      x.is_null = !s || (is_na(s) && !((kind == DC_OBS_TEXT || kind == DC_OBS_CATEGORY) && t.rec[r].quoted[c]));
      int ok = 1, bv = 0;
      if (!x.is_null) {
        switch (kind) {
          case DC_OBS_INT: ok = parse_i64(s, &x.i); break;
          case DC_OBS_REAL: ok = parse_f64(s, &x.f); if (ok && isnan(x.f)) x.is_null = 1; break;
          case DC_OBS_BOOL: ok = parse_bool(s, &bv) || (parse_i64(s, &x.i) && (x.i == 0 || x.i == 1)); if (ok && !x.i) x.i = bv; break;
          case DC_OBS_CATEGORY: {
            int32_t code;
            uint32_t known;
            if (cs.categories) {   /* only the given categories */
              if (!cv_map_get(&lm, s, &known)) { sqlite3_free(ums); cv_fail(e, "%s: line %lld: column '%s': '%s' is not one of its categories (--schema)", o->table, (long long)t.rec[r].line, hdr[c], s); goto done; }
              code = (int32_t)known;
            } else if (cv_add_label(&labels, &nl, &lm, s, &code, e)) { sqlite3_free(ums); goto done; }
            x.i = code;
            break;
          }
          default: x.s = s; x.len = (uint32_t)strlen(s); break;
        }
      }
      if (!ok) { sqlite3_free(ums); cv_fail(e, "%s: line %lld: column '%s': '%s' is not %s %s", o->table, (long long)t.rec[r].line, hdr[c], s, kind == DC_OBS_INT ? "an" : "a", kind == DC_OBS_INT ? "integer" : kind == DC_OBS_REAL ? "number" : "boolean (true/false, 1/0)"); goto done; }
      if (cv_vals_push(&v, &x, e)) { sqlite3_free(ums); goto done; }
    }
    for (int64_t i = 0; dt && i < N; i++)   /* the values must fit the dtype the column is exported as */
      if (!schema_fits(dt, &v, i)) {
        sqlite3_free(ums);
        if (dt->is_float)
          cv_fail(e, "%s: line %lld: column '%s': %.17g does not fit its dtype %s (--schema)", o->table,
                  (long long)t.rec[row_of[i]].line, hdr[c], v.f64[i], cs.dtype);
        else
          cv_fail(e, "%s: line %lld: column '%s': %lld does not fit its dtype %s (--schema)", o->table,
                  (long long)t.rec[row_of[i]].line, hdr[c], (long long)v.i64[i], cs.dtype);
        goto done;
      }
    for (int64_t k = 0; cs.cat_dtype && k < nl; k++) {   /* labels of the categories' type */
      const char *lab = labels[k];
      uint64_t val;
      int ok = cv_cat_label(cs.cat_dtype, lab, &val);
      if (!ok) { sqlite3_free(ums); cv_fail(e, "--schema %s: column '%s': category '%s' is not a %s", o->schema, hdr[c], lab, cs.cat_dtype); goto done; }
    }
    /* replace the column of this name, or add one */
    int ti = -1, renamed = 0;
    if (target_col(db, cols, ncols, hdr[c], o->dataset, &ti, &renamed, e)) { sqlite3_free(ums); goto done; }
    int64_t col = ti >= 0 ? cols[ti].col : -1;
    int replaced = 0;
    const char *old_name = ti >= 0 ? cols[ti].name : NULL;
    const char *stored = renamed ? old_name : hdr[c];   /* the name in cells_columns */
    if (col == 0) { sqlite3_free(ums); cv_fail(e, "%s: column '%s' would replace the obs index", o->table, hdr[c]); goto done; }
    if (col >= 0) {
      n_repl++;
      replaced = 1;
      char *sql = sqlite3_mprintf("DELETE FROM main.cells_blocks WHERE col = %lld; DELETE FROM main.cells_dict WHERE col = %lld; "
                                  "DELETE FROM main.cells_columns WHERE col = %lld;", (long long)col, (long long)col, (long long)col);
      int r = sql ? cv_exec(db, sql, e) : cv_fail(e, "out of memory");
      sqlite3_free(sql);
      if (r || dsw_meta_forget_obs(db, old_name, e)) { sqlite3_free(ums); goto done; }
    } else {
      col = next_col++;
      n_new++;
    }
    if (cv_write_blocks(&w, col, stored, kind == DC_OBS_CATEGORY ? nl : -1, 0, &v, B, e)) { sqlite3_free(ums); goto done; }
    if (cv_write_dict_rows(db, col, labels, 0, kind == DC_OBS_CATEGORY ? nl : 0, e)) { sqlite3_free(ums); goto done; }
    if (cv_write_column_row(db, D.id, col, stored, kind, labels, kind == DC_OBS_CATEGORY ? nl : -1, e)) { sqlite3_free(ums); goto done; }
    if (column_meta(db, stored, renamed ? hdr[c] : NULL, &cs, e)) { sqlite3_free(ums); goto done; }
    sqlite3_str_appendf(said, "%s: column '%s'%s%s%s (%s) %s\n", o->dataset, hdr[c], renamed ? " (stored as '" : "",
                        renamed ? stored : "", renamed ? "')" : "", cv_obs_kind_label(kind), replaced ? "replaced" : "added");
  }
  if (cv_exec(db, "CREATE TABLE main.dc_append_schema_bump(x); DROP TABLE main.dc_append_schema_bump;", e) ||
      cv_pagemap_still(db, e) || cv_check_interrupt(e) || cv_commit(db, o->dataset, e)) { sqlite3_free(ums); goto done; }
  in_tx = 0;
  if (!o->quiet && sqlite3_str_length(said)) fputs(sqlite3_str_value(said), stdout);
  int64_t matched = 0;
  for (int64_t i = 0; i < N; i++) matched += row_of[i] >= 0;
  if (!o->quiet)
    printf("%s: %lld of %lld cells annotated from %zu rows (%d columns added, %d replaced)\n", o->dataset, (long long)matched,
           (long long)N, t.n_rec - 1, n_new, n_repl);
  if (unmatched)
    fprintf(stderr, "deltacells: note: %lld key%s of %s match no cell (by %s): %s%s\n", (long long)unmatched,
            unmatched == 1 ? "" : "s", o->table, o->key, ums ? ums : "", unmatched > 5 ? ", ..." : "");
  sqlite3_free(ums);
  rc = 0;
done:
  if (rc && db) cv_name_dataset(db, o->dataset, e);
  dsw_over_end(&w);
  if (in_tx) cv_rollback(db);
  sqlite3_free(sqlite3_str_finish(said));
  if (db) sqlite3_close(db);
  csv_free(&t);
  cv_dcols_free(cols, ncols);
  free(row_of);
  free(kinds);
  cv_vals_free(&v);
  cv_map_free(&names);
  cv_map_free(&lm);
  if (labels) for (int64_t k = 0; k < nl; k++) free(labels[k]);
  free(labels);
  free(D.sources);
  colschema_free(&cs);
  sqlite3_free(schema_json);
  return rc;
}
