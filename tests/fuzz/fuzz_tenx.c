/*
** fuzz_tenx.c — libFuzzer target for the converter's 10x Matrix Market reader (converter/tenx.c:
** barcodes.tsv, features.tsv or genes.tsv, matrix.mtx, gzipped or plain), the part of the
** converter that reads text a user hands it.  Each input becomes a 10x directory:
**   byte 0      flags: bit 0 the matrix gzipped, bit 1 the barcodes gzipped, bit 2 the features
**               named genes.tsv, bits 3-5 how many tiles the cells are cut into (1-8), bit 6 the
**               matrix's bytes written as they are to matrix.mtx.gz (a damaged gzip file)
**   bytes 1-2   the barcodes file's length, bytes 3-4 the features file's (little-endian; cut to
**               what the input holds)
**   then        the barcodes file, the features file, and the rest is matrix.mtx
** The directory is opened (cv_input_open), its entries read and spooled by tile
** (tenx_mtx_spool), and every tile's rows read back (h5ad_read_rows), as `deltacells convert`
** does.  Checked, besides what ASan and UBSan catch:
**   - an error is a message of one or more bytes, a NUL-terminated string within cv_err, and it
**     names the input (the directory, or a file in it), except when memory ran out;
**   - an input that reads is what its files say: its barcodes and gene names are the files'
**     lines (the first field of a barcode line; the second of a features line, or its only
**     one), every gene index is below the number of features, no count is zero, and the rows
**     read back hold exactly the nonzeros and the count sums per gene that the reading pass
**     counted (the spool loses and invents nothing).
** Seeds: tests/fuzz/corpus/fuzz_tenx (LLVMFuzzerInitialize writes a few where missing).
** FUZZ_TENX_SHOW=1 prints each input's outcome (the error, or the shape read).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "h5ad.h"
#include "tenx.h"

#define CHECK(c)                                                                 \
  do {                                                                           \
    if (!(c)) {                                                                  \
      fprintf(stderr, "fuzz_tenx: %s:%d: %s\n", __FILE__, __LINE__, #c);         \
      abort();                                                                   \
    }                                                                            \
  } while (0)

static char g_dir[256];

static void put_file(const char *name, const uint8_t *p, size_t n, int gz) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s%s", g_dir, name, gz ? ".gz" : "");
  if (gz) {
    gzFile g = gzopen(path, "wb1");
    CHECK(g);
    CHECK(n == 0 || gzwrite(g, p, (unsigned)n) == (int)n);
    CHECK(gzclose(g) == Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK(n == 0 || fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
  }
}

static void clear_dir(void) {
  static const char *const names[] = {"barcodes.tsv", "barcodes.tsv.gz", "features.tsv", "features.tsv.gz",
                                      "genes.tsv", "genes.tsv.gz", "matrix.mtx", "matrix.mtx.gz", NULL};
  char path[512];
  for (int i = 0; names[i]; i++) {
    snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
    unlink(path);
  }
}

static int g_show;     /* FUZZ_TENX_SHOW set: each input's outcome on stderr (replaying an input) */

static void check_error(const cv_err *e) {
  if (g_show) fprintf(stderr, "fuzz_tenx: error: %s\n", e->msg);
  size_t n = strnlen(e->msg, sizeof e->msg);
  CHECK(n > 0 && n < sizeof e->msg);
  CHECK(strstr(e->msg, g_dir) != NULL || strstr(e->msg, "out of memory") != NULL);
}

/* A name as a file's line gives it: its bytes as they are, a NUL byte among them included. */
typedef struct name { char *s; size_t n; } name;

/* The names a text file's lines give, as a 10x reader takes them (the oracle): each line
** without its end of line (LF, or CR LF) nor a first line's UTF-8 byte-order mark, cut to its
** field `field` (0 or 1; a line of one field: that field), at most one blank last line
** dropped.  *n names, malloc'd. */
static name *file_names(const uint8_t *p, size_t len, int field, size_t *n) {
  name *v = NULL;
  size_t k = 0, cap = 0;
  int last_blank = 0;
  for (size_t i = 0; i < len;) {
    const uint8_t *nl = memchr(p + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - p) : len, a = i, z = end;
    if (z > a && p[z - 1] == '\r') z--;
    if (i == 0 && z - a >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) a += 3;
    last_blank = z == a;
    const uint8_t *t = memchr(p + a, '\t', z - a);
    if (field == 1 && t) {
      a = (size_t)(t - p) + 1;
      t = memchr(p + a, '\t', z - a);
    }
    if (t) z = (size_t)(t - p);
    if (k == cap) {
      cap = cap ? 2 * cap : 16;
      v = realloc(v, cap * sizeof *v);
      CHECK(v);
    }
    v[k].n = z - a;
    v[k].s = malloc(v[k].n + 1);
    CHECK(v[k].s);
    memcpy(v[k].s, p + a, v[k].n);
    k++;
    i = nl ? end + 1 : len;
  }
  if (k && last_blank) free(v[--k].s);
  *n = k;
  return v;
}

static void free_names(name *v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i].s);
  free(v);
}

/* the C string got is the name want */
static int same(const char *got, const name *want) {
  return got && strlen(got) == want->n && memcmp(got, want->s, want->n) == 0;
}

/* The barcodes and gene names read against the files' lines. */
static void check_names(h5file *f, const uint8_t *bc, size_t nb, const uint8_t *ft, size_t nf) {
  size_t n;
  name *want = file_names(bc, nb, 0, &n);
  CHECK(n == f->n_obs);
  colbuf cb = {0};
  cv_err e = {{0}};
  if (n) {
    CHECK(h5ad_col_read(f, &f->obs.index, 0, n, &cb, &e) == 0);
    CHECK(cb.kind == CVK_TEXT && cb.n == n);
    for (size_t i = 0; i < n; i++) CHECK(same(cb.text[i], &want[i]));
  }
  colbuf_free(&cb);
  free_names(want, n);
  want = file_names(ft, nf, 1, &n);
  CHECK(n == f->n_vars);
  for (size_t i = 0; i < n; i++) CHECK(same(f->var_names[i], &want[i]));
  free_names(want, n);
}

/* Reads every tile's rows back and checks them against the reading pass's sums. */
static void read_back(h5file *f, uint32_t tile_cells, const uint64_t *total, const uint64_t *ncells) {
  uint64_t *t2 = calloc(f->n_vars + 1, sizeof *t2), *n2 = calloc(f->n_vars + 1, sizeof *n2);
  CHECK(t2 && n2);
  rowbuf rb = {0};
  cv_err e = {{0}};
  int ok = 1;
  for (uint64_t r0 = 0; r0 < f->n_obs && ok; r0 += tile_cells) {
    uint64_t r1 = r0 + tile_cells < f->n_obs ? r0 + tile_cells : f->n_obs;
    rowbuf_clear(&rb);
    if (h5ad_read_rows(f, r0, r1, NULL, &rb, &e)) {
      check_error(&e);     /* a repeated entry is found here, as convert finds it */
      ok = 0;
      break;
    }
    CHECK(rb.n_rows == r1 - r0);
    CHECK(rb.indptr[0] == 0);
    for (uint64_t i = 0; i < rb.n_rows; i++) {
      CHECK(rb.indptr[i] <= rb.indptr[i + 1]);
      for (uint64_t k = rb.indptr[i]; k < rb.indptr[i + 1]; k++) {
        CHECK(rb.indices[k] < f->n_vars);
        CHECK(rb.data[k] != 0);
        t2[rb.indices[k]] += rb.data[k];
        n2[rb.indices[k]]++;
      }
    }
  }
  if (ok && g_show)
    fprintf(stderr, "fuzz_tenx: read: %llu cells x %llu genes\n", (unsigned long long)f->n_obs, (unsigned long long)f->n_vars);
  if (ok)
    for (uint64_t g = 0; g < f->n_vars; g++) CHECK(t2[g] == total[g] && n2[g] == ncells[g]);
  rowbuf_free(&rb);
  free(t2);
  free(n2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  int flags = data[0];
  size_t nb = (size_t)data[1] | (size_t)data[2] << 8, nf = (size_t)data[3] | (size_t)data[4] << 8;
  const uint8_t *p = data + 5;
  size_t left = size - 5;
  if (nb > left) nb = left;
  const uint8_t *bc = p;
  p += nb; left -= nb;
  if (nf > left) nf = left;
  const uint8_t *ft = p;
  p += nf; left -= nf;
  clear_dir();
  put_file("barcodes.tsv", bc, nb, flags & 2);
  put_file(flags & 4 ? "genes.tsv" : "features.tsv", ft, nf, 0);
  if (flags & 64) put_file("matrix.mtx.gz", p, left, 0);
  else put_file("matrix.mtx", p, left, flags & 1);

  h5file f;
  cv_err e = {{0}};
  if (cv_input_open(g_dir, NULL, 0, NULL, &f, &e)) {
    check_error(&e);
    h5ad_close(&f);
    return 0;
  }
  check_names(&f, bc, nb, ft, nf);
  uint32_t parts = 1 + ((flags >> 3) & 7);
  uint32_t tile_cells = (uint32_t)(f.n_obs / parts) + 1;
  uint64_t *total = calloc(f.n_vars + 1, sizeof *total), *ncells = calloc(f.n_vars + 1, sizeof *ncells);
  CHECK(total && ncells);
  if (tenx_mtx_spool(&f, g_dir, tile_cells, total, ncells, NULL, NULL, &e)) check_error(&e);
  else read_back(&f, tile_cells, total, ncells);
  free(total);
  free(ncells);
  h5ad_close(&f);
  return 0;
}

/* A seed in the input format above, unless the corpus directory has one of that name. */
static void seed_bytes(const char *dir, const char *name, int flags, const char *bc, const char *ft,
                       const void *mtx, size_t nm) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  if (stat(path, &st) == 0) return;
  FILE *o = fopen(path, "wb");
  if (!o) return;
  size_t nb = strlen(bc), nf = strlen(ft);
  uint8_t h[5] = {(uint8_t)flags, (uint8_t)nb, (uint8_t)(nb >> 8), (uint8_t)nf, (uint8_t)(nf >> 8)};
  fwrite(h, 1, 5, o);
  fputs(bc, o);
  fputs(ft, o);
  fwrite(mtx, 1, nm, o);
  fclose(o);
}

static void seed(const char *dir, const char *name, int flags, const char *bc, const char *ft, const char *mtx) {
  seed_bytes(dir, name, flags, bc, ft, mtx, strlen(mtx));
}

/* A seed whose matrix part is a gzip file's bytes (flag bit 6), made through a file in g_dir. */
static void seed_gz(const char *dir, const char *name, const char *bc, const char *ft, const char *mtx) {
  char path[512];
  snprintf(path, sizeof path, "%s/seed.gz.tmp", g_dir);
  gzFile g = gzopen(path, "wb9");
  if (!g) return;
  gzputs(g, mtx);
  gzclose(g);
  FILE *in = fopen(path, "rb");
  char buf[4096];
  size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
  if (in) fclose(in);
  unlink(path);
  if (n) seed_bytes(dir, name, 64, bc, ft, buf, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *tmp = getenv("TMPDIR");
  g_show = getenv("FUZZ_TENX_SHOW") != NULL;
  snprintf(g_dir, sizeof g_dir, "%s/fuzz_tenx.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  CHECK(mkdtemp(g_dir) != NULL);
  /* the directory is left empty at exit; it is removed then */
  for (int i = *argc - 1; i > 0; i--) {
    const char *a = (*argv)[i];
    struct stat st;
    if (a[0] == '-' || stat(a, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    seed(a, "seed-10x", 0 | 1 << 3, "AAAC-1\nAAAG-1\nAACT-1\n", "ENSG1\tGeneA\tGene Expression\nENSG2\tGeneB\tGene Expression\n",
         "%%MatrixMarket matrix coordinate integer general\n%metadata_json: {}\n2 3 4\n1 1 5\n2 1 1\n2 3 7\n1 2 2\n");
    seed(a, "seed-gz-genes", 1 | 4 | 2 << 3, "c1\nc2\n", "g1\tA\ng2\tB\ng3\tC\n",
         "%%MatrixMarket matrix coordinate real general\n3 2 3\n3 2 4.0\n1 1 1e2\n2 2 3\n");
    seed(a, "seed-pattern-t", 2, "c1\nc2\nc3\n", "g1\ng2\n",
         "%%MatrixMarket matrix coordinate pattern general\n3 2 2\n1 2\n3 1\n");
    seed_gz(a, "seed-gz-raw", "b1\nb2\nb3\nb4\n", "e1\tG1\tGene Expression\ne2\tG2\tAntibody Capture\n",
            "%%MatrixMarket matrix coordinate integer general\n2 4 5\n1 1 3\n2 1 1\n1 4 2\n2 3 9\n1 2 1\n");
    seed(a, "seed-repeat", 0, "c1\n", "g1\tA\n", "%%MatrixMarket matrix coordinate integer general\n1 1 2\n1 1 1\n1 1 2\n");
    break;
  }
  return 0;
}

__attribute__((destructor)) static void remove_dir(void) {
  if (!g_dir[0]) return;
  clear_dir();
  rmdir(g_dir);
}
