/*
** export_frames.c — the obs and var data frames of an export (see export_int.h): the genes
** of --genes FILE, obs columns read through the `cells` table in blocks and var columns from
** the genes table, written as anndata data frames (categorical, nullable, plain, strings).
*/
#include "export.h"

#include <ctype.h>
#include <errno.h>
#include <hdf5.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dc_codec.h"
#include "dc_format.h"
#include "dc_seal.h"

#include "export_int.h"

#define EX_OBS_ROWS 16384u

/* ------------------------------------------------------------ export: genes */

/* --genes FILE: names in file order; a name listed twice takes its next
** occurrence in the dataset (duplicate names stay apart). */
int ex_genes_from_file(const gtable *g, const int64_t *orig_order, const char *file, xgenes *x, cv_err *e) {
  FILE *fp = fopen(file, "r");
  if (!fp) return cv_fail(e, "--genes %s: cannot open: %s", file, strerror(errno));
  const gcolumn *nm = &g->cols[g->c_name];
  cv_map first = {0};
  int32_t *next = malloc(((size_t)g->n + 1) * sizeof *next); /* gene -> next gene of the same name (orig order) */
  char *line = NULL;
  size_t cap = 0, n_out_cap = 0;
  int rc = -1;
  if (!next) { cv_fail(e, "out of memory"); goto done; }
  for (int64_t r = g->n - 1; r >= 0; r--) { /* chains in original order */
    int64_t id = orig_order[r];
    uint32_t *p = cv_map_ref(&first, nm->t[id] ? nm->t[id] : "");
    if (p) { next[id] = (int32_t)*p; *p = (uint32_t)id; }
    else {
      next[id] = -1;
      if (cv_map_put(&first, nm->t[id] ? nm->t[id] : "", (uint32_t)id, e)) goto done;
    }
  }
  ssize_t len;
  long lineno = 0;
  while ((len = getline(&line, &cap, fp)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (lineno == 1 && len >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3)) {   /* a UTF-8 byte-order mark */
      memmove(line, line + 3, (size_t)len - 2);
      len -= 3;
    }
    if (len == 0) continue;
    uint32_t *p = cv_map_ref(&first, line);
    if (!p) { /* a name with spaces around it in the file: try it trimmed */
      char *a = line, *b = line + len;
      while (a < b && isspace((unsigned char)*a)) a++;
      while (b > a && isspace((unsigned char)b[-1])) b--;
      char keep = *b;
      *b = 0;
      p = a != line || b != line + len ? cv_map_ref(&first, a) : NULL;
      *b = keep;
    }
    if (!p) {
      const char *near = NULL;
      for (int64_t i = 0; i < g->n && !near; i++)
        if (nm->t[i] && !strcasecmp(nm->t[i], line)) near = nm->t[i];
      cv_fail(e, "--genes %s: line %ld: gene '%s' is not in the dataset%s%s%s", file, lineno, line,
              near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
      goto done;
    }
    if (*p == UINT32_MAX) {
      cv_fail(e, "--genes %s: line %ld: gene '%s' is listed more often than the dataset has it", file, lineno, line);
      goto done;
    }
    int64_t id = *p;
    *p = next[id] >= 0 ? (uint32_t)next[id] : UINT32_MAX;
    if (cv_grow((void **)&x->ids, &n_out_cap, (size_t)x->n_out + 1, sizeof *x->ids, e)) goto done;
    x->ids[x->n_out++] = id;
  }
  if (ferror(fp)) { cv_fail(e, "--genes %s: read error", file); goto done; }
  rc = 0;
done:
  fclose(fp);
  free(line);
  free(next);
  cv_map_free(&first);
  return rc;
}

/* ------------------------------------------------------------ export: obs */

/* The h5ad name of a frame's index: dc_meta `key` (obs_index_name, var_index_name) unless it is
** absent or one of the n column names written, else `_index`.  Malloc'ed. */
static char *index_name(sqlite3 *db, const char *key, const char *const *cols, int n) {
  char *v = ex_meta(db, key);
  for (int i = 0; v && i < n; i++)
    if (!strcmp(cols[i], v)) { free(v); v = NULL; }
  return v && *v ? v : (free(v), strdup("_index"));
}

/* Whether nm is the name of a column other than i of the n, stored or (i > j) written as out[j]. */
static int name_taken(const char *const *stored, char *const *out, int n, int i, const char *nm) {
  for (int j = 0; j < n; j++)
    if ((j != i && !strcmp(stored[j], nm)) || (j < i && !strcmp(out[j], nm))) return 1;
  return 0;
}

/* The names n columns (stored names) get in the h5ad: a column the converter stored under
** another name because its own was taken (dc_meta `key`: obs_names, var_names) gets its name in
** the input files back, unless another column written has that name.  A column whose name is
** empty (no HDF5 group member can have it, so no h5ad can hold it) is 'Unnamed: I', I its
** position among the n, as pandas names a column without a name in what it reads ('Unnamed:
** I_1', ... while another column has that name); unnamed[i] (unless NULL) says so.  out[i]:
** malloc'ed. */
int ex_file_names(sqlite3 *db, const char *key, const char *const *stored, int n, char **out, uint8_t *unnamed,
                  cv_err *e) {
  sqlite3_stmt *s = NULL;
  for (int i = 0; i < n; i++) {
    out[i] = NULL;
    if (unnamed) unnamed[i] = 0;
  }
  if (sqlite3_prepare_v2(db, "SELECT value FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = ?1), '{}')) "
                         "WHERE key = ?2", -1, &s, NULL) != SQLITE_OK)
    return cv_fail(e, "dc_meta.%s: %s", key, sqlite3_errmsg(db));
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    sqlite3_reset(s);
    sqlite3_bind_text(s, 2, stored[i], -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    const char *o = r == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    if (r != SQLITE_ROW && r != SQLITE_DONE) { rc = cv_fail(e, "dc_meta.%s: %s", key, sqlite3_errmsg(db)); break; }
    if (o && name_taken(stored, out, n, i, o)) o = NULL;
    if (!o) o = stored[i];
    char made[64];
    if (!*o) {
      snprintf(made, sizeof made, "Unnamed: %d", i);
      for (int k = 1; k <= n && name_taken(stored, out, n, i, made); k++) snprintf(made, sizeof made, "Unnamed: %d_%d", i, k);
      o = made;
      if (unnamed) unnamed[i] = 1;
    }
    if (!(out[i] = strdup(o))) rc = cv_fail(e, "out of memory");
  }
  sqlite3_finalize(s);
  if (rc) for (int i = 0; i < n; i++) { free(out[i]); out[i] = NULL; }
  return rc;
}

/* Why an h5ad cannot hold a frame column named nm (HDF5 takes '/' for a path between groups
** and '.' for the group itself), or NULL. */
static const char *name_problem(const char *nm) {
  if (strchr(nm, '/')) return "has a '/', which HDF5 reads as a path between groups";
  if (!strcmp(nm, ".")) return "is '.', which HDF5 reads as the frame's group itself";
  return NULL;
}

void ex_xcol_free(xcol *c) {
  for (uint32_t k = 0; k < c->n_cats; k++) free(c->cats[k]);
  free(c->cats);
  cv_map_free(&c->codes);
  if (c->tg >= 0) H5Gclose(c->tg);
  if (c->d >= 0) H5Dclose(c->d);
  if (c->m >= 0) H5Dclose(c->m);
  if (c->txt) for (uint32_t k = 0; k < EX_OBS_ROWS; k++) free(c->txt[k]);
  free(c->name); free(c->out); free(c->i64); free(c->f64); free(c->c32); free(c->b8); free(c->mask); free(c->txt);
}

/* The HDF5 file type of a number column written with numpy type name d (dc_meta obs_dtypes),
** -1 for a name a column of kind does not keep (cv_dtype_kept: it is then written as int64 /
** float64). */
hid_t ex_num_type(const char *d, int kind) {
  if (kind != OK_INT && kind != OK_REAL) return -1;
  return cv_dtype_file(cv_dtype_find(cv_dtype_kept(d, kind == OK_REAL)));
}

static int kind_of(const char *k) {
  return !strcmp(k, "category") ? OK_CAT : !strcmp(k, "int") ? OK_INT : !strcmp(k, "real") ? OK_REAL
         : !strcmp(k, "bool") ? OK_BOOL : OK_TEXT;
}

int ex_obs_columns(sqlite3 *db, const char *path, const char *list, xcol **out, int *n_out, cv_err *e) {
  sqlite3_stmt *s = NULL;
  xcol *all = NULL;
  int n = 0, cap = 0, rc = -1;
  if (sqlite3_prepare_v2(db, "SELECT col, name, kind, null_count FROM cells_columns WHERE col > 0 ORDER BY col", -1, &s,
                         NULL) != SQLITE_OK)
    return cv_fail(e, "%s: cells_columns: %s", path, sqlite3_errmsg(db));
  int sr;
  while ((sr = sqlite3_step(s)) == SQLITE_ROW) {
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      xcol *t = realloc(all, (size_t)cap * sizeof *t);
      if (!t) { cv_fail(e, "out of memory"); goto done; }
      all = t;
    }
    const char *nm = (const char *)sqlite3_column_text(s, 1), *kd = (const char *)sqlite3_column_text(s, 2);
    if (!nm || !kd) {
      cv_fail(e, "%s: cells_columns row of col %lld has no %s (corrupt dataset; run verify)", path,
              (long long)sqlite3_column_int64(s, 0), nm ? "kind" : "name");
      goto done;
    }
    xcol *c = &all[n];
    memset(c, 0, sizeof *c);
    c->d = c->m = c->tg = -1;
    c->col = sqlite3_column_int64(s, 0);
    c->name = strdup(nm);
    c->kind = kind_of(kd);
    c->nulls = sqlite3_column_int64(s, 3);
    n++;
    if (!c->name) { cv_fail(e, "out of memory"); goto done; }
  }
  if (sr != SQLITE_DONE) { cv_fail(e, "%s: cells_columns: %s", path, sqlite3_errmsg(db)); goto done; }
  sqlite3_finalize(s);
  s = NULL;
  { /* the names in the h5ad */
    const char **st = calloc((size_t)n + 1, sizeof *st);
    char **on = calloc((size_t)n + 1, sizeof *on);
    uint8_t *un = calloc((size_t)n + 1, 1);
    int bad = !st || !on || !un;
    for (int i = 0; !bad && i < n; i++) st[i] = all[i].name;
    if (bad) cv_fail(e, "out of memory");
    else if (ex_file_names(db, "obs_names", st, n, on, un, e)) bad = 1;
    else for (int i = 0; i < n; i++) all[i].out = on[i], all[i].unnamed = un[i];
    free(st);
    free(on);
    free(un);
    if (bad) goto done;
  }
  if (sqlite3_prepare_v2(db, "SELECT value FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = 'obs_ordered'), '[]'))",
                         -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: dc_meta.obs_ordered: %s", path, sqlite3_errmsg(db));
    goto done;
  }
  while ((sr = sqlite3_step(s)) == SQLITE_ROW)
    for (int i = 0; i < n; i++)
      if (all[i].kind == OK_CAT && sqlite3_column_type(s, 0) == SQLITE_TEXT && /* a null names nothing */
          !strcmp(all[i].name, (const char *)sqlite3_column_text(s, 0)))
        all[i].ordered = 1;
  if (sr != SQLITE_DONE) { cv_fail(e, "%s: dc_meta.obs_ordered: %s", path, sqlite3_errmsg(db)); goto done; }
  sqlite3_finalize(s);
  s = NULL;
  if (sqlite3_prepare_v2(db, "SELECT key, value, 0 FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = 'obs_dtypes'), '{}'))"
                         " UNION ALL SELECT key, value, 1 FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = 'obs_cat_dtypes'), '{}'))",
                         -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: dc_meta.obs_dtypes: %s", path, sqlite3_errmsg(db));
    goto done;
  }
  while ((sr = sqlite3_step(s)) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(s, 0), *v = (const char *)sqlite3_column_text(s, 1);
    int cat = sqlite3_column_int(s, 2);
    for (int i = 0; k && v && i < n; i++)
      if (!strcmp(all[i].name, k) &&
          (cat ? all[i].kind == OK_CAT : (all[i].kind == OK_INT || all[i].kind == OK_REAL) && ex_num_type(v, all[i].kind) >= 0))
        snprintf(all[i].dtype, sizeof all[i].dtype, "%s", v);
  }
  if (sr != SQLITE_DONE) { cv_fail(e, "%s: dc_meta.obs_dtypes: %s", path, sqlite3_errmsg(db)); goto done; }
  sqlite3_finalize(s);
  s = NULL;
  if (list) { /* --obs: the columns named, in that order */
    xcol *sel = calloc((size_t)n + 1, sizeof *sel);
    uint8_t *used = calloc((size_t)n + 1, 1);
    int k = 0;
    char *dup = strdup(list), *save = NULL;
    if (!sel || !used || !dup) { free(sel); free(used); free(dup); cv_fail(e, "out of memory"); goto done; }
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      int j = -1;
      /* a column whose name has spaces around it is named as it is; else spaces around a name
      ** in the list are dropped ("a, b") */
      for (int i = 0; i < n && j < 0; i++) if (!strcmp(all[i].name, t) || !strcmp(all[i].out, t)) j = i;
      while (isspace((unsigned char)*t)) t++;
      char *z = t + strlen(t);
      while (z > t && isspace((unsigned char)z[-1])) *--z = 0;
      if (!*t && j < 0) continue;
      for (int i = 0; i < n && j < 0; i++) if (!strcmp(all[i].name, t)) j = i;
      for (int i = 0; i < n && j < 0; i++) if (!strcasecmp(all[i].name, t)) j = i; /* SQLite's names ignore case */
      for (int i = 0; i < n && j < 0; i++) if (!strcmp(all[i].out, t)) j = i;   /* the inputs' name */
      if (j < 0) {
        sqlite3_str *m = sqlite3_str_new(NULL);
        for (int i = 0; i < n; i++) sqlite3_str_appendf(m, "%s%s", i ? ", " : "", all[i].name);
        char *ms = sqlite3_str_finish(m);
        cv_fail(e, "--obs: unknown obs column '%s' (%s has: %s)", t, path, n ? (ms ? ms : "?") : "no obs columns");
        sqlite3_free(ms);
        free(sel); free(used); free(dup);
        goto done;
      }
      if (used[j]) { cv_fail(e, "--obs: column '%s' is named twice", all[j].name); free(sel); free(used); free(dup); goto done; }
      used[j] = 1;
      sel[k++] = all[j];
    }
    for (int i = 0; i < n; i++) if (!used[i]) ex_xcol_free(&all[i]);
    free(all);
    free(used);
    free(dup);
    all = sel;
    n = k;
  }
  for (int i = 0; i < n; i++) {   /* before anything is written */
    const char *why = name_problem(all[i].out);
    if (why) {
      cv_fail(e, "%s: obs column '%s' %s, so no h5ad can hold it under that name (--obs can leave it out)", path, all[i].out, why);
      goto done;
    }
  }
  /* dictionaries */
  if (sqlite3_prepare_v2(db, "SELECT code, value FROM cells_dict WHERE col=? ORDER BY code", -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: cells_dict: %s", path, sqlite3_errmsg(db));
    goto done;
  }
  for (int i = 0; i < n; i++) {
    xcol *c = &all[i];
    if (c->kind != OK_CAT) continue;
    size_t cc = 0;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, c->col);
    while ((sr = sqlite3_step(s)) == SQLITE_ROW) {
      if (sqlite3_column_int64(s, 0) != (int64_t)c->n_cats) {
        cv_fail(e, "%s: cells_dict of column '%s' is not numbered 0, 1, ...", path, c->name);
        goto done;
      }
      const char *v = (const char *)sqlite3_column_text(s, 1);
      if (cv_grow((void **)&c->cats, &cc, c->n_cats + 1, sizeof *c->cats, e)) goto done;
      c->cats[c->n_cats] = strdup(v ? v : "");
      if (!c->cats[c->n_cats] || cv_map_put(&c->codes, c->cats[c->n_cats], c->n_cats, e)) {
        cv_fail(e, "out of memory (or column '%s' has a repeated category)", c->name);
        goto done;
      }
      c->n_cats++;
    }
    if (sr != SQLITE_DONE) { cv_fail(e, "%s: cells_dict of column '%s': %s", path, c->name, sqlite3_errmsg(db)); goto done; }
  }
  rc = 0;
done:
  sqlite3_finalize(s);
  if (rc) {
    for (int i = 0; i < n; i++) ex_xcol_free(&all[i]);
    free(all);
    return -1;
  }
  *out = all;
  *n_out = n;
  return 0;
}

static hid_t code_type(uint32_t n_cats) {
  return n_cats <= 127 ? H5T_STD_I8LE : n_cats <= 32767 ? H5T_STD_I16LE : H5T_STD_I32LE;
}

/* The type categories `cats` are written in: `dtype`'s (dc_meta obs_cat_dtypes, var_cat_dtypes)
** where every label reads as one (cv_cat_label, into vals: 8 bytes each, int8 for bool), else
** the 64-bit type of its kind (int64, then uint64; float64) where they do, else NULL (strings):
** never a value out of the type's range.  A dataset written before 'uint64' was recorded says
** 'int64' for categories of uint64: labels of 2^63 and up then read as uint64. */
static const char *cat_type(const char *dtype, char *const *cats, uint32_t n, void *vals) {
  const cv_dtype *w = cv_cat_dtype_wide(dtype);
  const char *as[3] = {dtype, w ? w->name : NULL, w && !w->is_float ? "uint64" : NULL};
  for (int t = 0; t < 3 && as[t]; t++) {
    if (t && !strcmp(as[t], as[t - 1])) continue;
    int b = !strcmp(as[t], "bool");
    uint32_t k = 0;
    while (k < n && cv_cat_label(as[t], cats[k], b ? (void *)((int8_t *)vals + k) : (void *)((uint64_t *)vals + k)))
      k++;
    if (k == n) return as[t];
  }
  return NULL;
}

/* A categorical's categories: numbers (or booleans) where dc_meta obs_cat_dtypes (var_cat_dtypes)
** says the input had them so (dtype; "" if not) and every label reads back as one, in that type;
** else strings. */
static int put_categories(hid_t sub, const char *dtype, char *const *cats, uint32_t n, hid_t bt) {
  void *vals = dtype && dtype[0] ? malloc(((size_t)n + 1) * 8) : NULL;
  const char *as = vals ? cat_type(dtype, cats, n, vals) : NULL;
  if (!as) {
    free(vals);
    return ex_put_strings(sub, "categories", (const char *const *)cats, n);
  }
  const cv_dtype *dt = cv_dtype_find(as);   /* NULL for bool */
  /* the file's type exactly; the labels were read as int64, uint64 or double (HDF5 converts:
  ** cv_cat_label checked the range) */
  hid_t ft = dt ? cv_dtype_file(dt) : bt, mt = dt ? cv_dtype_mem(cv_cat_dtype_wide(as)) : bt;
  hid_t d = ex_dset(sub, "categories", ft, (hsize_t)n, 0, "array", "0.2.0");
  int r = d < 0 || ex_dset_put(d, mt, vals, 0, (hsize_t)n, 0);
  if (d >= 0) H5Dclose(d);
  free(vals);
  return r ? -1 : 0;
}

/* Creates the datasets of an obs column of n rows under g. */
static int obs_create(hid_t g, xcol *c, hsize_t n, hid_t bt) {
  int nullable = c->nulls > 0;
  hid_t sub = -1;
  int r = -1;
  switch (c->kind) {
    case OK_CAT: {
      sub = ex_group(g, c->out, "categorical", "0.2.0");
      if (sub < 0 || ex_attr_bool(sub, "ordered", c->ordered)) goto done;
      c->ft = code_type(c->n_cats);
      c->d = ex_dset(sub, "codes", c->ft, n, 0, "array", "0.2.0");
      if (c->d < 0 || put_categories(sub, c->dtype, c->cats, c->n_cats, bt)) goto done;
      break;
    }
    case OK_INT: case OK_BOOL: {
      c->ft = c->kind == OK_INT ? (c->dtype[0] ? ex_num_type(c->dtype, OK_INT) : H5T_STD_I64LE) : bt;
      if (nullable) {
        sub = ex_group(g, c->out, c->kind == OK_INT ? "nullable-integer" : "nullable-boolean", "0.1.0");
        if (sub < 0) goto done;
        c->d = ex_dset(sub, "values", c->ft, n, 0, "array", "0.2.0");
        c->m = ex_dset(sub, "mask", bt, n, 0, "array", "0.2.0");
        if (c->d < 0 || c->m < 0) goto done;
      } else {
        c->d = ex_dset(g, c->out, c->ft, n, 0, "array", "0.2.0");
        if (c->d < 0) goto done;
      }
      break;
    }
    case OK_REAL:
      c->ft = c->dtype[0] ? ex_num_type(c->dtype, OK_REAL) : H5T_IEEE_F64LE;
      c->d = ex_dset(g, c->out, c->ft, n, 0, "array", "0.2.0");
      if (c->d < 0) goto done;
      break;
    default: {
      if (nullable) { /* no nullable strings in anndata 0.8: a categorical with missing values */
        c->tg = ex_group(g, c->out, "categorical", "0.2.0");
        if (c->tg < 0 || ex_attr_bool(c->tg, "ordered", 0)) goto done;
        c->d = ex_dset(c->tg, "codes", H5T_STD_I32LE, n, 0, "array", "0.2.0");
        if (c->d < 0) goto done;
        break;
      }
      hid_t t = ex_vlstr();
      c->ft = -1;
      c->d = ex_dset(g, c->out, t, n, 0, "string-array", "0.2.0");
      H5Tclose(t);
      if (c->d < 0) goto done;
    }
  }
  size_t B = EX_OBS_ROWS;
  switch (c->kind) {
    case OK_CAT: c->c32 = malloc(B * sizeof *c->c32); if (!c->c32) goto done; break;
    case OK_INT: c->i64 = malloc(B * sizeof *c->i64); c->mask = malloc(B); if (!c->i64 || !c->mask) goto done; break;
    case OK_BOOL: c->b8 = malloc(B); c->mask = malloc(B); if (!c->b8 || !c->mask) goto done; break;
    case OK_REAL: c->f64 = malloc(B * sizeof *c->f64); if (!c->f64) goto done; break;
    default:
      if (c->tg >= 0) { c->c32 = malloc(B * sizeof *c->c32); if (!c->c32) goto done; break; }
      c->txt = calloc(B, sizeof *c->txt);
      if (!c->txt) goto done;
  }
  r = 0;
done:
  if (sub >= 0) H5Gclose(sub);
  return r;
}

static int obs_flush(xcol *c, hsize_t off, hsize_t k, hid_t bt) {
  if (c->tg >= 0) return ex_dset_put(c->d, H5T_NATIVE_INT32, c->c32, off, k, 0);
  switch (c->kind) {
    case OK_CAT: return ex_dset_put(c->d, H5T_NATIVE_INT32, c->c32, off, k, 0);
    case OK_INT:
      return ex_dset_put(c->d, H5T_NATIVE_INT64, c->i64, off, k, 0) || (c->m >= 0 && ex_dset_put(c->m, bt, c->mask, off, k, 0));
    case OK_BOOL:
      return ex_dset_put(c->d, bt, c->b8, off, k, 0) || (c->m >= 0 && ex_dset_put(c->m, bt, c->mask, off, k, 0));
    case OK_REAL: return ex_dset_put(c->d, H5T_NATIVE_DOUBLE, c->f64, off, k, 0);
    default: {
      hid_t t = ex_vlstr();
      int r = ex_dset_put(c->d, t, c->txt, off, k, 0);
      H5Tclose(t);
      return r;
    }
  }
}

static char *quote_id(const char *s) { return sqlite3_mprintf("\"%w\"", s); }

/* The obs frame of the selected cells, in cell_id order, through the cells table. */
int ex_write_obs(sqlite3 *db, const ex_opts *o, hid_t root, xcol *cols, int nc, int64_t n_sel, hid_t bt, cv_err *e) {
  hid_t g = ex_group(root, "obs", "dataframe", "0.2.0");
  const char **names = calloc((size_t)nc + 1, sizeof *names);
  char **idx = calloc(EX_OBS_ROWS, sizeof *idx);
  hid_t di = -1, vt = ex_vlstr();
  sqlite3_stmt *s = NULL;
  char *iname = NULL;
  int rc = -1;
  if (g < 0 || !names || !idx) { cv_fail(e, "%s: writing obs", o->out); goto done; }
  for (int i = 0; i < nc; i++) names[i] = cols[i].out;
  if (!(iname = index_name(db, "obs_index_name", names, nc))) { cv_fail(e, "out of memory"); goto done; }
  if (ex_attr_str(g, "_index", iname) || ex_attr_strs(g, "column-order", names, (size_t)nc)) {
    cv_fail(e, "%s: writing obs attributes", o->out);
    goto done;
  }
  di = ex_dset(g, iname, vt, (hsize_t)n_sel, 0, "string-array", "0.2.0");
  if (di < 0) { cv_fail(e, "%s: writing obs/%s", o->out, iname); goto done; }
  for (int i = 0; i < nc; i++) {
    if (cols[i].unnamed)
      fprintf(stderr, "deltacells: note: %s: an obs column has an empty name, which no h5ad can hold; it is written as "
              "'%s' (as pandas names a column without a name: by its place among the obs columns, from 0)\n", o->path, cols[i].out);
    if (obs_create(g, &cols[i], (hsize_t)n_sel, bt)) { cv_fail(e, "%s: writing obs column '%s'", o->out, cols[i].out); goto done; }
  }
  sqlite3_str *q = sqlite3_str_new(NULL);
  sqlite3_str_appendall(q, "SELECT name");
  for (int i = 0; i < nc; i++) {
    char *qi = quote_id(cols[i].name);
    sqlite3_str_appendf(q, ", %s", qi);
    sqlite3_free(qi);
  }
  sqlite3_str_appendall(q, " FROM cells");
  if (o->where) sqlite3_str_appendf(q, " WHERE (%s\n)", o->where); /* the newline ends a -- comment */
  sqlite3_str_appendall(q, " ORDER BY cell_id");
  char *sql = sqlite3_str_finish(q);
  if (!sql || sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: reading obs: %s", o->path, sqlite3_errmsg(db));
    sqlite3_free(sql);
    goto done;
  }
  sqlite3_free(sql);
  int64_t row = 0;
  uint32_t k = 0;
  int r;
  for (;;) {
    r = sqlite3_step(s);
    if (r == SQLITE_ROW && row + k >= n_sel) { cv_fail(e, "%s: the cells changed while they were read", o->path); goto done; }
    if (k == EX_OBS_ROWS || (r != SQLITE_ROW && k)) {
      int bad = ex_dset_put(di, vt, idx, (hsize_t)row, k, 0);
      for (int i = 0; i < nc && !bad; i++) bad = obs_flush(&cols[i], (hsize_t)row, k, bt);
      if (bad) { cv_fail(e, "%s: writing obs rows %lld..", o->out, (long long)row); goto done; }
      row += k;
      k = 0;
      if (cv_check_interrupt(e)) goto done;
    }
    if (r != SQLITE_ROW) break;
    const char *nm = (const char *)sqlite3_column_text(s, 0);
    free(idx[k]);
    idx[k] = strdup(nm ? nm : "");
    if (!idx[k]) { cv_fail(e, "out of memory"); goto done; }
    for (int i = 0; i < nc; i++) {
      xcol *c = &cols[i];
      int isnull = sqlite3_column_type(s, i + 1) == SQLITE_NULL;
      switch (c->kind) {
        case OK_CAT: {
          uint32_t code = 0;
          const char *v = (const char *)sqlite3_column_text(s, i + 1);
          if (isnull) c->c32[k] = -1;
          else if (cv_map_get(&c->codes, v ? v : "", &code)) c->c32[k] = (int32_t)code;
          else { cv_fail(e, "%s: obs column '%s': value '%s' is not in its categories", o->path, c->name, v ? v : ""); goto done; }
          break;
        }
        case OK_INT: c->i64[k] = isnull ? 0 : sqlite3_column_int64(s, i + 1); c->mask[k] = (int8_t)isnull; break;
        case OK_BOOL: c->b8[k] = isnull ? 0 : sqlite3_column_int64(s, i + 1) != 0; c->mask[k] = (int8_t)isnull; break;
        case OK_REAL: c->f64[k] = isnull ? NAN : sqlite3_column_double(s, i + 1); break;
        default: {
          const char *v = (const char *)sqlite3_column_text(s, i + 1);
          if (c->tg >= 0) { /* categories in order of first appearance */
            uint32_t code = 0;
            if (isnull) { c->c32[k] = -1; break; }
            if (!cv_map_get(&c->codes, v ? v : "", &code)) {
              code = c->n_cats;
              if (cv_grow((void **)&c->cats, &c->cats_cap, (size_t)c->n_cats + 1, sizeof *c->cats, e)) goto done;
              if (!(c->cats[c->n_cats] = strdup(v ? v : ""))) { cv_fail(e, "out of memory"); goto done; }
              c->n_cats++;
              if (cv_map_put(&c->codes, c->cats[code], code, e)) goto done;
            }
            c->c32[k] = (int32_t)code;
            break;
          }
          free(c->txt[k]);
          c->txt[k] = strdup(v ? v : "");
          if (!c->txt[k]) { cv_fail(e, "out of memory"); goto done; }
        }
      }
    }
    k++;
  }
  if (r != SQLITE_DONE) { cv_fail(e, "%s: reading obs: %s", o->path, sqlite3_errmsg(db)); goto done; }
  if (row != n_sel) { cv_fail(e, "%s: the cells changed while they were read", o->path); goto done; }
  for (int i = 0; i < nc; i++)
    if (cols[i].tg >= 0 && ex_put_strings(cols[i].tg, "categories", (const char *const *)cols[i].cats, cols[i].n_cats)) {
      cv_fail(e, "%s: writing obs column '%s'", o->out, cols[i].out);
      goto done;
    }
  rc = 0;
done:
  free(iname);
  sqlite3_finalize(s);
  if (idx) for (uint32_t i = 0; i < EX_OBS_ROWS; i++) free(idx[i]);
  free(idx);
  free(names);
  if (di >= 0) H5Dclose(di);
  H5Tclose(vt);
  if (g >= 0) H5Gclose(g);
  return rc;
}

/* ------------------------------------------------------------ export: var */
/* The categories of var column `col` if it was categorical (dc_meta var_categories): *n = 0 if not. */
static int var_categories(sqlite3 *db, const char *col, char ***cats, uint32_t *n, cv_map *m, cv_err *e) {
  sqlite3_stmt *s = NULL;
  size_t cap = 0;
  *n = 0;
  if (sqlite3_prepare_v2(db, "SELECT v.value FROM json_each((SELECT value FROM dc_meta WHERE key = 'var_categories')) j,"
                         " json_each(j.value) v WHERE j.key = ?1 ORDER BY CAST(v.key AS INTEGER)", -1, &s, NULL) != SQLITE_OK)
    return cv_fail(e, "dc_meta.var_categories: %s", sqlite3_errmsg(db));
  sqlite3_bind_text(s, 1, col, -1, SQLITE_STATIC);
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(s, 0);
    uint32_t seen;
    if (cv_map_get(m, v ? v : "", &seen)) {   /* codes could not tell the two apart */
      cv_fail(e, "dc_meta.var_categories: column '%s': category '%s' is listed twice (as %u and %u)", col, v ? v : "", seen,
              *n);
      break;
    }
    if (cv_grow((void **)cats, &cap, *n + 1, sizeof **cats, e)) break;
    (*cats)[*n] = strdup(v ? v : "");
    if (!(*cats)[*n] || cv_map_put(m, (*cats)[*n], *n, e)) { free((*cats)[*n]); cv_fail(e, "out of memory"); break; }
    (*n)++;
  }
  sqlite3_finalize(s);
  if (r == SQLITE_DONE) return 0;
  /* nothing read is kept: the caller frees categories only when this succeeds */
  for (uint32_t c = 0; c < *n; c++) free((*cats)[c]);
  free(*cats);
  *cats = NULL;
  *n = 0;
  cv_map_free(m);
  return e->msg[0] ? -1 : cv_fail(e, "dc_meta.var_categories: malformed");
}

/* The type of var column `col`'s categories where they were numbers or booleans (dc_meta
** var_cat_dtypes) into out; "" if none (strings). */
static int var_cat_dtype(sqlite3 *db, const char *col, char out[8], cv_err *e) {
  sqlite3_stmt *s = NULL;
  out[0] = 0;
  if (sqlite3_prepare_v2(db, "SELECT value FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = 'var_cat_dtypes'), '{}'))"
                         " WHERE key = ?1 AND type = 'text'", -1, &s, NULL) != SQLITE_OK)
    return cv_fail(e, "dc_meta.var_cat_dtypes: %s", sqlite3_errmsg(db));
  sqlite3_bind_text(s, 1, col, -1, SQLITE_STATIC);
  int r = sqlite3_step(s);
  if (r == SQLITE_ROW) snprintf(out, 8, "%s", (const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  if (r != SQLITE_ROW && r != SQLITE_DONE) return cv_fail(e, "dc_meta.var_cat_dtypes: %s", sqlite3_errmsg(db));
  if (!cv_cat_dtype_known(out)) out[0] = 0;   /* a name this version does not know: strings */
  return 0;
}

/* dc_meta var_dtypes into out[c] (the type name of genes column c, or NULL); a name export does
** not know for the column's kind leaves the column at its stored kind (verify reports it). */
static int var_dtypes(sqlite3 *db, const gtable *g, char **out, cv_err *e) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "SELECT key, value FROM json_each(coalesce((SELECT value FROM dc_meta WHERE key = 'var_dtypes'), '{}'))",
                         -1, &s, NULL) != SQLITE_OK)
    return cv_fail(e, "dc_meta.var_dtypes: %s", sqlite3_errmsg(db));
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(s, 0), *v = (const char *)sqlite3_column_text(s, 1);
    for (int c = 0; k && v && c < g->n_cols; c++) {
      if (strcmp(g->cols[c].name, k) || out[c]) continue;
      int ok = g->cols[c].kind == GK_REAL ? ex_num_type(v, OK_REAL) >= 0
               : g->cols[c].kind == GK_INT ? (!strcmp(v, "bool") || ex_num_type(v, OK_INT) >= 0) : 0;
      if (ok && !(out[c] = strdup(v))) { sqlite3_finalize(s); return cv_fail(e, "out of memory"); }
    }
  }
  sqlite3_finalize(s);
  return r == SQLITE_DONE ? 0 : cv_fail(e, "dc_meta.var_dtypes: %s", sqlite3_errmsg(db));
}

int ex_write_var(sqlite3 *db, const ex_opts *o, hid_t root, const gtable *g, const xgenes *x, hid_t bt, cv_err *e) {
  char *vic = ex_meta(db, "var_index_column");
  int c_index = g->c_name;
  if (vic)
    for (int c = 0; c < g->n_cols; c++) if (!strcmp(g->cols[c].name, vic)) c_index = c;
  free(vic);
  const char **names = calloc((size_t)g->n_cols + 1, sizeof *names);
  char **fnames = calloc((size_t)g->n_cols + 1, sizeof *fnames);   /* their names in the h5ad */
  const char **tv = malloc(((size_t)x->n_out + 1) * sizeof *tv);
  int64_t *iv = malloc(((size_t)x->n_out + 1) * sizeof *iv);
  double *fv = malloc(((size_t)x->n_out + 1) * sizeof *fv);
  int8_t *mk = malloc((size_t)x->n_out + 1);
  int *which = calloc((size_t)g->n_cols + 1, sizeof *which);
  char **vdt = NULL;     /* per genes column: its dc_meta var_dtypes type, or NULL */
  uint8_t *unnamed = NULL;   /* per var column written: its name was empty */
  int n = 0, rc = -1;
  hid_t vg = -1, vt = ex_vlstr();
  char *iname = NULL;
  if (!names || !fnames || !tv || !iv || !fv || !mk || !which) { cv_fail(e, "out of memory"); goto done; }
  for (int c = 0; c < g->n_cols; c++) {
    const char *nm = g->cols[c].name;
    if (c == c_index || c == g->c_name || c == g->c_total || c == g->c_ncells || c == g->c_orig || !strcmp(nm, "gene_id"))
      continue; /* the dataset's own columns: not the input's var */
    which[n] = c;
    names[n++] = nm;
  }
  vdt = calloc((size_t)g->n_cols + 1, sizeof *vdt);
  if (!vdt) { cv_fail(e, "out of memory"); goto done; }
  if (var_dtypes(db, g, vdt, e)) goto done;
  vg = ex_group(root, "var", "dataframe", "0.2.0");
  if (!(unnamed = calloc((size_t)n + 1, 1))) { cv_fail(e, "out of memory"); goto done; }
  if (ex_file_names(db, "var_names", names, n, fnames, unnamed, e)) goto done;
  for (int i = 0; i < n; i++) {
    const char *why = name_problem(fnames[i]);
    if (why) { cv_fail(e, "%s: var column '%s' %s, so no h5ad can hold it under that name", o->path, fnames[i], why); goto done; }
    if (unnamed[i])
      fprintf(stderr, "deltacells: note: %s: a var column has an empty name, which no h5ad can hold; it is written as "
              "'%s' (as pandas names a column without a name: by its place among the var columns, from 0)\n", o->path, fnames[i]);
  }
  if (!(iname = index_name(db, "var_index_name", (const char *const *)fnames, n))) { cv_fail(e, "out of memory"); goto done; }
  if (vg < 0 || ex_attr_str(vg, "_index", iname) || ex_attr_strs(vg, "column-order", (const char *const *)fnames, (size_t)n)) {
    cv_fail(e, "%s: writing var", o->out);
    goto done;
  }
  for (int64_t j = 0; j < x->n_out; j++) {
    const char *t = g->cols[c_index].t[x->ids[j]];
    tv[j] = t ? t : "";
  }
  if (ex_put_strings(vg, iname, tv, (hsize_t)x->n_out)) { cv_fail(e, "%s: writing var/%s", o->out, iname); goto done; }
  for (int i = 0; i < n; i++) {
    const gcolumn *k = &g->cols[which[i]];
    hid_t d = -1, m = -1, sub = -1;
    int bad = 0;
    for (int64_t j = 0; j < x->n_out; j++) {
      int64_t id = x->ids[j];
      tv[j] = k->t && k->t[id] ? k->t[id] : "";
      iv[j] = k->i ? k->i[id] : 0;
      fv[j] = k->null[id] || !k->f ? NAN : k->f[id];
      mk[j] = (int8_t)k->null[id];
    }
    char **cats = NULL;
    uint32_t n_cats = 0;
    cv_map cm = {0};
    char cdt[8] = "";
    if (k->kind == GK_TEXT && (var_cat_dtype(db, names[i], cdt, e) || var_categories(db, names[i], &cats, &n_cats, &cm, e)))
      goto done;
    if (n_cats) { /* categorical in the input: codes + categories */
      int32_t *codes = (int32_t *)iv; /* n_out int64 slots hold n_out int32 codes */
      for (int64_t j = 0; j < x->n_out && !bad; j++) {
        uint32_t cd = 0;
        int64_t id = x->ids[j];
        if (k->null[id]) codes[j] = -1;
        else if (cv_map_get(&cm, k->t[id], &cd)) codes[j] = (int32_t)cd;
        else bad = 1;
      }
      sub = bad ? -1 : ex_group(vg, fnames[i], "categorical", "0.2.0");
      d = sub < 0 ? -1 : ex_dset(sub, "codes", code_type(n_cats), (hsize_t)x->n_out, 0, "array", "0.2.0");
      bad = bad || d < 0 || ex_attr_bool(sub, "ordered", 0) || ex_dset_put(d, H5T_NATIVE_INT32, codes, 0, (hsize_t)x->n_out, 0) ||
            put_categories(sub, cdt, cats, n_cats, bt);
    } else if (k->kind == GK_TEXT) bad = ex_put_strings(vg, fnames[i], tv, (hsize_t)x->n_out);
    else if (k->kind == GK_REAL) {
      hid_t ft = ex_num_type(vdt[which[i]], OK_REAL);
      d = ex_dset(vg, fnames[i], ft >= 0 ? ft : H5T_IEEE_F64LE, (hsize_t)x->n_out, 0, "array", "0.2.0");
      bad = d < 0 || ex_dset_put(d, H5T_NATIVE_DOUBLE, fv, 0, (hsize_t)x->n_out, 0);
    } else {
      /* ints, and booleans (dc_meta var_dtypes 'bool': stored as 0/1), in the input's type */
      int boolean = vdt[which[i]] && !strcmp(vdt[which[i]], "bool");
      hid_t ft = boolean ? bt : ex_num_type(vdt[which[i]], OK_INT);
      if (ft < 0) ft = H5T_STD_I64LE;
      int8_t *b8 = (int8_t *)fv;     /* n_out doubles hold n_out booleans */
      if (boolean) for (int64_t j = 0; j < x->n_out; j++) b8[j] = iv[j] != 0;
      hid_t mt = boolean ? bt : H5T_NATIVE_INT64;
      const void *vals = boolean ? (const void *)b8 : (const void *)iv;
      if (k->n_null) {
        sub = ex_group(vg, fnames[i], boolean ? "nullable-boolean" : "nullable-integer", "0.1.0");
        d = sub < 0 ? -1 : ex_dset(sub, "values", ft, (hsize_t)x->n_out, 0, "array", "0.2.0");
        m = sub < 0 ? -1 : ex_dset(sub, "mask", bt, (hsize_t)x->n_out, 0, "array", "0.2.0");
        bad = d < 0 || m < 0 || ex_dset_put(d, mt, vals, 0, (hsize_t)x->n_out, 0) ||
              ex_dset_put(m, bt, mk, 0, (hsize_t)x->n_out, 0);
      } else {
        d = ex_dset(vg, fnames[i], ft, (hsize_t)x->n_out, 0, "array", "0.2.0");
        bad = d < 0 || ex_dset_put(d, mt, vals, 0, (hsize_t)x->n_out, 0);
      }
    }
    if (d >= 0) H5Dclose(d);
    if (m >= 0) H5Dclose(m);
    if (sub >= 0) H5Gclose(sub);
    for (uint32_t c = 0; c < n_cats; c++) free(cats[c]);
    free(cats);
    cv_map_free(&cm);
    if (bad) { cv_fail(e, "%s: writing var column '%s'", o->out, fnames[i]); goto done; }
  }
  rc = 0;
done:
  free(iname);
  if (vg >= 0) H5Gclose(vg);
  H5Tclose(vt);
  for (int i = 0; fnames && i < n; i++) free(fnames[i]);
  free(fnames);
  free(names); free(tv); free(iv); free(fv); free(mk); free(which); free(unnamed);
  for (int c = 0; vdt && c < g->n_cols; c++) free(vdt[c]);
  free(vdt);
  return rc;
}
