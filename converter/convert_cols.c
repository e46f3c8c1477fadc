/*
** convert_cols.c — the obs and var columns of a conversion (see convert_int.h): united across
** the inputs by name and kind, cast, written as obs blocks and as the genes table.
*/
#include "convert.h"
#include "dc_seal.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cv_dtype.h"
#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "export.h"
#include "h5ad.h"
#include "tenx.h"

#include "convert_int.h"

/* ------------------------------------------------------------ columns */
/* One output column (obs or var), united over the inputs. */
typedef struct ocol {
  char *name;
  int kind;
  int is_source;
  const char *orig;     /* the name in the files where it is stored under another, else NULL */
  const h5col **src;    /* per file, or NULL where the file lacks it */
  char **labels;        /* category: the united dictionary */
  uint32_t n_labels;
  cv_map dict;
  int32_t **remap;      /* per file: local code -> united code */
} ocol;

static void ocols_free(ocol *c, int n, int nf) {
  for (int i = 0; c && i < n; i++) {
    free(c[i].name);
    free(c[i].src);
    for (uint32_t k = 0; k < c[i].n_labels; k++) free(c[i].labels[k]);
    free(c[i].labels);
    cv_map_free(&c[i].dict);
    if (c[i].remap) for (int f = 0; f < nf; f++) free(c[i].remap[f]);
    free(c[i].remap);
  }
  free(c);
}

/* The kind of a column seen with kinds a and b in two files. */
static int merge_kind(int a, int b) {
  if (a == b) return a;
  if ((a == CVK_INT && b == CVK_BOOL) || (a == CVK_BOOL && b == CVK_INT)) return CVK_INT;
  int an = a == CVK_INT || a == CVK_BOOL || a == CVK_REAL, bn = b == CVK_INT || b == CVK_BOOL || b == CVK_REAL;
  if (an && bn) return CVK_REAL;
  return CVK_TEXT;
}

static int add_label(ocol *c, const char *s, uint32_t *code, cv_err *e) {
  if (cv_map_get(&c->dict, s, code)) return 0;
  size_t cap = c->n_labels;
  if (cv_grow((void **)&c->labels, &cap, c->n_labels + 1, sizeof *c->labels, e)) return -1;
  if (!(c->labels[c->n_labels] = strdup(s))) return cv_fail(e, "out of memory");
  *code = c->n_labels;
  if (cv_map_put(&c->dict, s, c->n_labels, e)) return -1;
  c->n_labels++;
  return 0;
}

/* 1 if name is taken (case-insensitive, as SQL column names are). */
static int name_taken(const char *nm, ocol *cols, int n, const char *const *reserved) {
  for (int i = 0; reserved && reserved[i]; i++) if (strcasecmp(nm, reserved[i]) == 0) return 1;
  for (int i = 0; i < n; i++) if (cols[i].name && strcasecmp(nm, cols[i].name) == 0) return 1;
  return 0;
}

static char *unique_name(const char *nm, ocol *cols, int n, const char *const *reserved) {
  if (!name_taken(nm, cols, n, reserved)) return strdup(nm);
  size_t len = strlen(nm) + 16;
  char *b = malloc(len);
  for (int k = 1; b; k++) {
    snprintf(b, len, "%s_%d", nm, k);
    if (!name_taken(b, cols, n, reserved)) break;
  }
  return b;
}

/* Unites columns: the frame's index first when with_index, then each column
** name in order of first appearance. */
static int ocols_build(h5file *files, int nf, int var, int with_index, int with_source,
                       const char *const *reserved, ocol **out, int *n_out, cv_err *e) {
  int cap = 2 + with_source;
  for (int f = 0; f < nf; f++) cap += (var ? files[f].var.n_cols : files[f].obs.n_cols);
  ocol *c = calloc((size_t)cap, sizeof *c);
  int n = 0;
  if (!c) return cv_fail(e, "out of memory");
  const char **raw = calloc((size_t)cap, sizeof *raw); /* names as in the files */
  if (!raw) { free(c); return cv_fail(e, "out of memory"); }
  if (with_index) {
    c[0].src = calloc((size_t)nf, sizeof *c[0].src);
    if (!c[0].src) goto oom;
    for (int f = 0; f < nf; f++) c[0].src[f] = var ? &files[f].var.index : &files[f].obs.index;
    c[0].kind = CVK_TEXT;
    c[0].name = strdup("_index");
    raw[0] = "";
    n = 1;
  }
  for (int f = 0; f < nf; f++) {
    h5frame *fr = var ? &files[f].var : &files[f].obs;
    for (int j = 0; j < fr->n_cols; j++) {
      int i;
      for (i = with_index; i < n; i++) if (strcmp(raw[i], fr->cols[j].name) == 0) break;
      if (i == n) {
        c[n].src = calloc((size_t)nf, sizeof *c[n].src);
        if (!c[n].src) goto oom;
        c[n].kind = fr->cols[j].kind;
        raw[n] = fr->cols[j].name;
        n++;
      } else {
        c[i].kind = merge_kind(c[i].kind, fr->cols[j].kind);
      }
      c[i].src[f] = &fr->cols[j];
    }
  }
  if (with_source) {
    c[n].src = calloc((size_t)nf, sizeof *c[n].src);
    if (!c[n].src) goto oom;
    c[n].kind = CVK_CATEGORY;
    c[n].is_source = 1;
    raw[n] = "source";
    n++;
  }
  for (int i = with_index; i < n; i++) {
    c[i].name = unique_name(raw[i], c, i, reserved);
    if (!c[i].name) goto oom;
    if (strcmp(c[i].name, raw[i]) != 0) {
      fprintf(stderr, "deltacells: note: column '%s' is stored as '%s' (the name is taken; export and "
              "to_anndata give it its name back)\n", raw[i], c[i].name);
      if (!c[i].is_source) c[i].orig = raw[i];
    }
  }
  /* dictionaries of categorical columns, in order of first appearance */
  for (int i = 0; i < n; i++) {
    if (c[i].kind != CVK_CATEGORY) continue;
    c[i].remap = calloc((size_t)nf, sizeof *c[i].remap);
    if (!c[i].remap) goto oom;
    for (int f = 0; f < nf; f++) {
      uint32_t code;
      if (c[i].is_source) {
        if (add_label(&c[i], files[f].label ? files[f].label : files[f].path, &code, e)) goto fail;
        if (!(c[i].remap[f] = malloc(sizeof(int32_t)))) goto oom;
        c[i].remap[f][0] = (int32_t)code; /* a file given twice has one label */
        continue;
      }
      const h5col *s = c[i].src[f];
      if (!s) continue;
      c[i].remap[f] = malloc((s->n_cats + 1) * sizeof(int32_t));
      if (!c[i].remap[f]) goto oom;
      for (uint32_t k = 0; k < s->n_cats; k++) {
        if (add_label(&c[i], s->cats[k], &code, e)) goto fail;
        c[i].remap[f][k] = (int32_t)code;
      }
    }
  }
  free(raw);
  *out = c;
  *n_out = n;
  return 0;
oom:
  cv_fail(e, "out of memory");
fail:
  free(raw);
  ocols_free(c, n + 1, nf);
  return -1;
}

static void fmt_num_real(double v, char *buf, size_t n) {
  for (int p = 15; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
}

/* Copies values [0, src->n) of file f into out at off, converted to c->kind. */
static int cast_into(const ocol *c, int f, const h5col *sc, const colbuf *src, colbuf *out, size_t off,
                     size_t n, cv_err *e) {
  for (size_t i = 0; i < n; i++) {
    size_t o = off + i;
    int null = 1;
    int64_t iv = 0;
    double dv = NAN;
    const char *tv = NULL;
    size_t tl = 0;
    char buf[64];
    if (c->is_source) {
      out->codes[o] = c->remap[f][0];
      continue;
    }
    if (src) {
      switch (src->kind) {
        case CVK_CATEGORY:
          if (src->codes[i] >= 0) {
            null = 0;
            iv = src->codes[i];
            tv = sc->cats[iv];
            tl = strlen(tv);
          }
          break;
        case CVK_INT:
          if (src->valid[i]) { null = 0; iv = src->i64[i]; dv = (double)iv; }
          break;
        case CVK_REAL:
          if (!isnan(src->f64[i])) { null = 0; dv = src->f64[i]; }
          break;
        case CVK_BOOL:
          if (src->b8[i] >= 0) { null = 0; iv = src->b8[i]; dv = (double)iv; }
          break;
        case CVK_TEXT:
          if (src->text[i]) { null = 0; tv = src->text[i]; tl = src->text_len[i]; }
          break;
      }
    }
    switch (c->kind) {
      case CVK_CATEGORY: out->codes[o] = null ? -1 : c->remap[f][iv]; break;
      case CVK_INT: out->valid[o] = !null; out->i64[o] = null ? 0 : iv; break;
      case CVK_REAL: out->f64[o] = null ? NAN : dv; break;
      case CVK_BOOL: out->b8[o] = null ? -1 : (int8_t)iv; break;
      case CVK_TEXT:
        if (null) { colbuf_text_null(out, o); break; }
        if (!tv) {
          if (src->kind == CVK_REAL) fmt_num_real(dv, buf, sizeof buf);
          else if (src->kind == CVK_BOOL) snprintf(buf, sizeof buf, "%s", iv ? "True" : "False");
          else snprintf(buf, sizeof buf, "%lld", (long long)iv);
          tv = buf;
          tl = strlen(buf);
        }
        if (colbuf_text_set(out, o, tv, tl, e)) return -1;
        break;
    }
  }
  return 0;
}

/* Fills out with cells [c0, c0+n) of column c over all files. */
static int fill_block(h5file *files, int nf, const uint64_t *first, const ocol *c, uint64_t c0, size_t n,
                      colbuf *tmp, colbuf *out, cv_err *e) {
  if (colbuf_reset(out, c->kind, n, e)) return -1;
  for (int f = 0; f < nf; f++) {
    uint64_t a = first[f], b = first[f] + files[f].n_obs;
    if (b <= c0 || a >= c0 + n) continue;
    uint64_t r0 = c0 > a ? c0 - a : 0, r1 = (c0 + n < b ? c0 + n : b) - a;
    size_t off = (size_t)(a + r0 - c0), k = (size_t)(r1 - r0);
    const h5col *sc = c->src[f];
    if (sc && !c->is_source) {
      if (h5ad_col_read(&files[f], sc, r0, k, tmp, e)) return cv_prefix(e, "obs column '%s'", sc->name);
    }
    if (cast_into(c, f, sc, (sc && !c->is_source) ? tmp : NULL, out, off, k, e)) return -1;
  }
  if (c->kind == CVK_TEXT) colbuf_text_done(out);
  return 0;
}

/* The converter's kinds are the obs library's (v.kind = c->kind below, and the seal values
** from cv_sealval_of_stat). */
_Static_assert((int)CVK_CATEGORY == (int)DC_OBS_CATEGORY && (int)CVK_INT == (int)DC_OBS_INT &&
                   (int)CVK_REAL == (int)DC_OBS_REAL && (int)CVK_TEXT == (int)DC_OBS_TEXT,
               "converter kinds = obs kinds");
/* dc_meta `key`: {"stored name": value} (obj), or ["stored name", ...], of the columns for
** which val gives a value (none: no key).  obs_names, var_names: the name in the files of a
** column stored under another; obs_ordered: the ordered categoricals; obs_dtypes: the values'
** type in the files where it is narrower than what the column stores (int64, float64),
** obs_cat_dtypes (var_cat_dtypes) the type of a categorical's categories where they are
** numbers, and var_dtypes the same as obs_dtypes of var columns (and "bool" for booleans, which the genes table stores as
** ints). */
static int write_col_meta(dsw *w, const char *key, int obj, const char *(*val)(const ocol *, int nf),
                          const ocol *c, int n, int nf, cv_err *e) {
  sqlite3_str *js = sqlite3_str_new(NULL);
  int any = 0;
  sqlite3_str_appendchar(js, 1, obj ? '{' : '[');
  for (int i = 0; i < n; i++) {
    const char *v = val(&c[i], nf);
    if (!v) continue;
    if (any++) sqlite3_str_appendchar(js, 1, ',');
    cv_json_str(js, c[i].name);
    if (obj) {
      sqlite3_str_appendchar(js, 1, ':');
      cv_json_str(js, v);
    }
  }
  sqlite3_str_appendchar(js, 1, obj ? '}' : ']');
  char *jt = sqlite3_str_finish(js);
  int rc = !jt ? cv_fail(e, "out of memory") : any ? dsw_meta_text(w, key, jt, e) : 0;
  sqlite3_free(jt);
  return rc;
}

static const char *col_orig(const ocol *c, int nf) {
  (void)nf;
  return c->orig;
}

/* An ordered categorical: every input that has the column has it ordered, with the united
** categories in the same order. */
static const char *col_ordered(const ocol *c, int nf) {
  if (c->kind != CVK_CATEGORY || c->is_source) return NULL;
  int any = 0;
  for (int f = 0; f < nf; f++) {
    const h5col *s = c->src[f];
    if (!s) continue;
    if (s->kind != CVK_CATEGORY || !s->ordered || s->n_cats != c->n_labels || !c->remap[f]) return NULL;
    for (uint32_t k = 0; k < s->n_cats; k++) if (c->remap[f][k] != (int32_t)k) return NULL;
    any = 1;
  }
  return any ? "" : NULL;
}

/* The h5col dtype every input that has column c gives it, each of the column's kind (NULL where
** one differs, has none, or c is the `source` column). */
static const char *agreed_dtype(const ocol *c, int nf) {
  if (c->is_source) return NULL;
  const char *d = NULL;
  for (int f = 0; f < nf; f++) {
    const h5col *s = c->src[f];
    if (!s) continue;
    if (s->kind != c->kind || !s->dtype[0] || (d && strcmp(d, s->dtype))) return NULL;
    d = s->dtype;
  }
  return d;
}

/* A number column's type in the files: every input that has it has values of this type, of
** the column's kind, one a column of that kind keeps (cv_dtype_kept: int8..int32, uint8..uint32,
** float16, float32; int64, uint64 and float64 are exported as int64 / float64). */
static const char *col_dtype(const ocol *c, int nf) {
  if (c->kind != CVK_INT && c->kind != CVK_REAL) return NULL;
  return cv_dtype_kept(agreed_dtype(c, nf), c->kind == CVK_REAL);
}

/* A categorical whose categories are numbers (or booleans) in every input that has it: their
** type ("int16", "uint64", "float32", "bool", ...; inputs of different types: the one that
** holds both, cv_cat_dtype_unite, else none), for export to write the categories so (dc_meta
** obs_cat_dtypes, var_cat_dtypes; the labels are stored as the numbers' text). */
static const char *col_cat_dtype(const ocol *c, int nf) {
  if (c->kind != CVK_CATEGORY || c->is_source) return NULL;
  const char *d = NULL;
  for (int f = 0; f < nf; f++) {
    const h5col *s = c->src[f];
    if (!s) continue;
    if (s->kind != c->kind || !cv_cat_dtype_known(s->dtype)) return NULL;
    if (!(d = d ? cv_cat_dtype_unite(d, s->dtype) : s->dtype)) return NULL;
  }
  return d;
}

/* A var column's type in the files (dc_meta var_dtypes): col_dtype's, and "bool" for a column
** every input that has it has as booleans (the genes table stores them as 0/1 ints). */
static const char *col_var_dtype(const ocol *c, int nf) {
  if (c->kind != CVK_BOOL) return col_dtype(c, nf);
  for (int f = 0; f < nf; f++)
    if (c->src[f] && c->src[f]->kind != CVK_BOOL) return NULL;
  return c->is_source ? NULL : "bool";
}

/* dc_meta `key` (obs_index_name, var_index_name): the name of the frames' index (pandas'
** index.name, the h5ad `_index` attribute) when every input names it alike and it is not
** anndata's default (`_index`, or `index` of older files). */
static int write_index_name(dsw *w, const char *key, h5file *files, int nf, int var, cv_err *e) {
  const char *nm = NULL;
  for (int f = 0; f < nf; f++) {
    const char *x = var ? files[f].var.index.name : files[f].obs.index.name;
    if (!x || !strcmp(x, "_index") || !strcmp(x, "index") || (nm && strcmp(nm, x))) return 0;
    nm = x;
  }
  return nm ? dsw_meta_text(w, key, nm, e) : 0;
}

int cv_write_obs(h5file *files, int nf, const uint64_t *first, uint64_t n_cells, dsw *w,
                 uint64_t *obs_bytes, progress *pg, cv_err *e) {
  static const char *const reserved[] = {"_index", "cell_id", "name", "tile", NULL};
  ocol *cols = NULL;
  int n = 0, rc = -1;
  colbuf tmp = {0}, out = {0};
  if (ocols_build(files, nf, 0, 1, nf > 1, reserved, &cols, &n, e)) return -1;
  if (write_col_meta(w, "obs_names", 1, col_orig, cols, n, nf, e) ||
      write_col_meta(w, "obs_ordered", 0, col_ordered, cols, n, nf, e) ||
      write_col_meta(w, "obs_dtypes", 1, col_dtype, cols, n, nf, e) ||
      write_col_meta(w, "obs_cat_dtypes", 1, col_cat_dtype, cols, n, nf, e) ||
      write_index_name(w, "obs_index_name", files, nf, 0, e))
    goto done;
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    ocol *c = &cols[i];
    int64_t nulls = 0, bytes = 0;
    for (uint64_t b = 0; b * OBS_BLOCK < n_cells || (b == 0 && n_cells == 0); b++) {
      uint64_t c0 = b * OBS_BLOCK;
      size_t k = (size_t)(n_cells - c0 < OBS_BLOCK ? n_cells - c0 : OBS_BLOCK);
      if (n_cells == 0) break;
      if (cv_check_interrupt(e) || fill_block(files, nf, first, c, c0, k, &tmp, &out, e)) goto done;
      dc_obs_values v;
      memset(&v, 0, sizeof v);
      v.kind = c->kind;
      v.n = (uint32_t)k;
      v.codes = out.codes;
      v.n_categories = c->n_labels;
      v.i64 = out.i64;
      v.valid = out.valid;
      v.f64 = out.f64;
      v.b8 = out.b8;
      v.text = out.text;
      v.text_len = out.text_len;
      if (dsw_obs_block(w, i, c->name, (int64_t)b, (int64_t)c0, &v, &nulls, &bytes, e)) goto done;
      cv_prog_cols(pg, i, n, c0 + k, n_cells);
    }
    dc_blockplace pl = {"cells", i, c->name, c->kind, c->kind == CVK_CATEGORY ? (int64_t)c->n_labels : -1, 0, 0, 0, 0};
    dc_seal ds;
    dc_seal_dict_begin(&ds, w->dataset_id, &pl);
    for (uint32_t k = 0; k < c->n_labels; k++) {
      size_t l = strlen(c->labels[k]);
      dc_seal_bytes(&ds, c->labels[k], l);
      if (dsw_dict(w, i, k, c->labels[k], l, e)) { int64_t x; dc_seal_end(&ds, &x); goto done; }
      bytes += l;
    }
    int64_t dseal = 0;
    if (dc_seal_end(&ds, &dseal)) { cv_fail(e, "out of memory"); goto done; }
    if (dsw_column(w, i, c->name, cv_kind_name(c->kind), c->kind == CVK_CATEGORY ? (int64_t)c->n_labels : -1,
                   (int64_t)nulls, (int64_t)bytes, dseal, e))
      goto done;
    total += bytes;
  }
  *obs_bytes = total;
  rc = 0;
done:
  colbuf_free(&tmp);
  colbuf_free(&out);
  ocols_free(cols, n, nf);
  return rc;
}

/* ------------------------------------------------------------ genes table */
/* The genes table, column by column (docs/format.md section 1): name,
** total_counts, n_cells, then the union of the inputs' var columns.  A gene
** takes a var column's value from the first input that has the gene (NULL
** where that input lacks the column).  Stored kinds: int (int, and bool as
** 0/1), real, text (text, and categorical as its labels). */
static int stored_kind(int kind) {
  switch (kind) {
    case CVK_INT: case CVK_BOOL: return DC_OBS_INT;
    case CVK_REAL: return DC_OBS_REAL;
    default: return DC_OBS_TEXT;
  }
}

/* The values of one genes column, kept until every column is written (dsw_genes_columns encodes
** them all at once, on the converter's threads). */
typedef struct gvals {
  const char **tv;
  uint32_t *tl;
  int64_t *iv;
  uint8_t *valid;
  double *fv;
} gvals;

/* Column x (col, name, kind: every gene's value) with its arrays in a; nullable: an int column
** with a null map (the var columns'; the fixed ones have a value for every gene). */
static int gvals_column(gvals *a, dsw_gcol *x, int64_t col, const char *name, int kind, int nullable,
                        uint32_t ng) {
  uint64_t nn = (uint64_t)ng + 1;
  memset(a, 0, sizeof *a);
  int ok;
  switch (kind) {
    case DC_OBS_TEXT:
      a->tv = malloc(nn * sizeof *a->tv);
      a->tl = malloc(nn * sizeof *a->tl);
      ok = a->tv && a->tl;
      break;
    case DC_OBS_INT:
      a->iv = malloc(nn * sizeof *a->iv);
      if (nullable) a->valid = malloc(nn);
      ok = a->iv && (!nullable || a->valid);
      break;
    default:
      a->fv = malloc(nn * sizeof *a->fv);
      ok = a->fv != NULL;
      break;
  }
  if (!ok) return -1;
  memset(x, 0, sizeof *x);
  x->col = col;
  x->name = name;
  x->v.n = ng;
  x->v.kind = kind;
  x->v.text = a->tv;
  x->v.text_len = a->tl;
  x->v.i64 = a->iv;
  x->v.valid = a->valid;
  x->v.f64 = a->fv;
  return 0;
}

static void gvals_free(gvals *a) {
  free(a->tv); free(a->tl); free(a->iv); free(a->valid); free(a->fv);
}

int cv_write_genes(h5file *files, int nf, const genes *g, const cv_opts *o, dsw *w, int64_t *bytes_out,
                   cv_err *e) {
  static const char *const reserved[] = {"gene_id", "name", "total_counts", "n_cells", "orig_index", NULL};
  enum { NFIXED = 4 };
  ocol *cols = NULL;
  int n = 0, rc = -1, nw = 0;
  colbuf *conv = NULL, tmp = {0};      /* conv[i * nf + f]: file f's var column i in the united kind */
  gvals *gv = NULL;
  dsw_gcol *wc = NULL;
  uint32_t ng = g->n, block = o->genes_block ? o->genes_block : DC_GENES_BLOCK;
  int with_index = o->gene_key != NULL; /* the var index kept as a column when names come from a key */
  if (ocols_build(files, nf, 1, with_index, 0, reserved, &cols, &n, e) ||
      write_col_meta(w, "var_names", 1, col_orig, cols, n, nf, e) ||
      write_col_meta(w, "var_dtypes", 1, col_var_dtype, cols, n, nf, e) ||
      write_col_meta(w, "var_cat_dtypes", 1, col_cat_dtype, cols, n, nf, e) || write_index_name(w, "var_index_name", files, nf, 1, e))
    goto done;
  if (with_index) {
    free(cols[0].name);
    cols[0].name = unique_name("var_index", cols + 1, n - 1, reserved);
    if (!cols[0].name) { cv_fail(e, "out of memory"); goto done; }
    if (dsw_meta_text(w, "var_index_column", cols[0].name, e)) goto done; /* export's var index */
  }
  gv = calloc((size_t)(NFIXED + n), sizeof *gv);
  wc = calloc((size_t)(NFIXED + n), sizeof *wc);
  conv = calloc((size_t)(n ? n : 1) * (size_t)nf, sizeof *conv);
  if (!gv || !wc || !conv) { cv_fail(e, "out of memory"); goto done; }
  /* the fixed columns */
  {
    static const char *const fixed[NFIXED] = {"name", "total_counts", "n_cells", "orig_index"};
    for (int i = 0; i < NFIXED; i++)
      if (gvals_column(&gv[i], &wc[i], i, fixed[i], i ? DC_OBS_INT : DC_OBS_TEXT, 0, ng)) {
        cv_fail(e, "out of memory");
        goto done;
      }
    nw = NFIXED;
    for (uint32_t id = 0; id < ng; id++) {
      gv[0].tv[id] = g->name[g->order[id]];
      gv[0].tl[id] = (uint32_t)strlen(gv[0].tv[id]);
      gv[1].iv[id] = (int64_t)g->total[g->order[id]];
      gv[2].iv[id] = (int64_t)g->ncells[g->order[id]];
    }
    /* the original order (dc_meta gene_order 'union'): a gene's place in the union of the inputs'
    ** var, first input first, each in its var order (genes left out not counted); then the
    ** genes of --gene-order or append that no input has, in their order.  A permutation of
    ** 0 .. ng-1, which export and the k-th-repeat rule of merge (cv_gene_repeats) read. */
    int64_t *iv = gv[3].iv;
    for (uint32_t id = 0; id < ng; id++) iv[id] = -1;
    int64_t next = 0;
    for (int f = 0; f < nf; f++)
      for (uint64_t j = 0; j < files[f].n_vars; j++) {
        uint32_t id = g->fmap[f][j];
        if (id != UINT32_MAX && iv[id] < 0) iv[id] = next++;
      }
    for (uint32_t id = 0; id < ng; id++) if (iv[id] < 0) iv[id] = next++;
  }
  /* the var columns: read (HDF5, this thread) and kept until all are written */
  for (int i = 0; i < n; i++) {
    const ocol *c = &cols[i];
    colbuf *cv = conv + (size_t)i * nf;
    for (int f = 0; f < nf; f++) {
      const h5col *sc = c->src[f];
      if (!sc) continue;
      size_t k = (size_t)files[f].n_vars;
      if (h5ad_col_read(&files[f], sc, 0, k, &tmp, e)) {
        cv_prefix(e, "%s column '%s'", files[f].var.path, sc->name);
        goto done;
      }
      if (colbuf_reset(&cv[f], c->kind, k, e) || cast_into(c, f, sc, &tmp, &cv[f], 0, k, e)) goto done;
      if (c->kind == CVK_TEXT) colbuf_text_done(&cv[f]);
    }
    gvals *a = &gv[NFIXED + i];
    int kind = stored_kind(c->kind);
    if (gvals_column(a, &wc[nw++], NFIXED + i, c->name, kind, 1, ng)) { cv_fail(e, "out of memory"); goto done; }
    for (uint32_t id = 0; id < ng; id++) {
      uint32_t gl = g->order[id], f = g->file[gl], j = g->local[gl];
      const colbuf *src = f != UINT32_MAX && c->src[f] ? &cv[f] : NULL;
      switch (kind) {
        case DC_OBS_TEXT: a->tv[id] = NULL; a->tl[id] = 0; break;
        case DC_OBS_INT: a->iv[id] = 0; a->valid[id] = 0; break;
        default: a->fv[id] = NAN; break;
      }
      if (!src) continue;
      switch (c->kind) {
        case CVK_CATEGORY:
          if (src->codes[j] >= 0) { a->tv[id] = c->labels[src->codes[j]]; a->tl[id] = (uint32_t)strlen(a->tv[id]); }
          break;
        case CVK_TEXT:
          if (src->text[j]) { a->tv[id] = src->text[j]; a->tl[id] = src->text_len[j]; }
          break;
        case CVK_INT:
          if (src->valid[j]) { a->valid[id] = 1; a->iv[id] = src->i64[j]; }
          break;
        case CVK_BOOL:
          if (src->b8[j] >= 0) { a->valid[id] = 1; a->iv[id] = src->b8[j]; }
          break;
        case CVK_REAL: a->fv[id] = src->f64[j]; break;
      }
    }
  }
  if (dsw_genes_columns(w, wc, nw, block, o->threads > 0 ? o->threads : cv_ncores(), e)) goto done;
  int64_t bytes = 0;
  for (int i = 0; i < nw; i++) bytes += wc[i].bytes;
  { /* categorical var columns are stored as text: dc_meta var_categories keeps their categories
    ** (in order) so that export writes them back as categoricals */
    sqlite3_str *js = sqlite3_str_new(NULL);
    int any = 0;
    sqlite3_str_appendchar(js, 1, '{');
    for (int i = 0; i < n; i++) {
      if (cols[i].kind != CVK_CATEGORY) continue;
      if (any++) sqlite3_str_appendchar(js, 1, ',');
      cv_json_str(js, cols[i].name);
      sqlite3_str_appendall(js, ":[");
      for (uint32_t k = 0; k < cols[i].n_labels; k++) {
        if (k) sqlite3_str_appendchar(js, 1, ',');
        cv_json_str(js, cols[i].labels[k]);
      }
      sqlite3_str_appendchar(js, 1, ']');
    }
    sqlite3_str_appendchar(js, 1, '}');
    char *jt = sqlite3_str_finish(js);
    int jr = !jt ? cv_fail(e, "out of memory") : any ? dsw_meta_text(w, "var_categories", jt, e) : 0;
    sqlite3_free(jt);
    if (jr) goto done;
  }
  if (bytes_out) *bytes_out = bytes;
  rc = 0;
done:
  if (conv) for (size_t k = 0; k < (size_t)n * nf; k++) colbuf_free(&conv[k]);
  free(conv);
  colbuf_free(&tmp);
  if (gv) for (int i = 0; i < NFIXED + n; i++) gvals_free(&gv[i]);
  free(gv);
  free(wc);
  ocols_free(cols, n, nf);
  return rc;
}
