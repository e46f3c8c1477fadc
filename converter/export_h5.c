/*
** export_h5.c — writing anndata's on-disk elements with HDF5 (see export_int.h): encoded
** groups, string/int/bool attributes, datasets (chunked and extendible where they grow),
** string arrays, numpy dtypes.
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

#define EX_CHUNK ((hsize_t)1 << 16) /* elements per HDF5 chunk of X's data/indices */

/* ------------------------------------------------------------ HDF5 writing */
hid_t ex_vlstr(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

/* numpy's bool as h5py writes it: an int8 enum FALSE/TRUE */
hid_t ex_booltype(void) {
  hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return t;
}

int ex_attr_str(hid_t o, const char *name, const char *v) {
  hid_t t = ex_vlstr(), sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || H5Awrite(a, t, &v) < 0 ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return r;
}

int ex_attr_strs(hid_t o, const char *name, const char *const *v, size_t n) {
  hsize_t d = n;
  hid_t t = n ? ex_vlstr() : H5Tcopy(H5T_NATIVE_DOUBLE), sp = H5Screate_simple(1, &d, NULL);
  hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || (n && H5Awrite(a, t, v) < 0) ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return r;
}

int ex_attr_i64s(hid_t o, const char *name, const int64_t *v, size_t n) {
  hsize_t d = n;
  hid_t sp = H5Screate_simple(1, &d, NULL);
  hid_t a = H5Acreate2(o, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, v) < 0 ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  return r;
}

int ex_attr_bool(hid_t o, const char *name, int v) {
  hid_t t = ex_booltype(), sp = H5Screate(H5S_SCALAR);
  int8_t b = (int8_t)(v != 0);
  hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  int r = a < 0 || H5Awrite(a, t, &b) < 0 ? -1 : 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return r;
}

int ex_enc(hid_t o, const char *type, const char *version) {
  return ex_attr_str(o, "encoding-type", type) || ex_attr_str(o, "encoding-version", version) ? -1 : 0;
}

hid_t ex_group(hid_t loc, const char *name, const char *type, const char *version) {
  hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g >= 0 && type && ex_enc(g, type, version)) {
    H5Gclose(g);
    return -1;
  }
  return g;
}

/* A 1-D dataset of n elements of file type ft (chunked and extendible when ext). */
hid_t ex_dset(hid_t loc, const char *name, hid_t ft, hsize_t n, int ext, const char *type, const char *version) {
  hsize_t mx = H5S_UNLIMITED, ch = EX_CHUNK;
  hid_t sp = H5Screate_simple(1, &n, ext ? &mx : NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
  if (ext) H5Pset_chunk(pl, 1, &ch);
  if (H5Tget_class(ft) != H5T_STRING) H5Pset_fill_time(pl, H5D_FILL_TIME_NEVER); /* all written: no zero-fill */
  hid_t d = H5Dcreate2(loc, name, ft, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  H5Pclose(pl);
  H5Sclose(sp);
  if (d >= 0 && type && ex_enc(d, type, version)) {
    H5Dclose(d);
    return -1;
  }
  return d;
}

/* Writes n elements (memory type mt) at [off, off + n); extends first when ext. */
int ex_dset_put(hid_t d, hid_t mt, const void *buf, hsize_t off, hsize_t n, int ext) {
  if (n == 0) return 0;
  if (ext) {
    hsize_t size = off + n;
    if (H5Dset_extent(d, &size) < 0) return -1;
  }
  hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &n, NULL), xp = H5Pcreate(H5P_DATASET_XFER);
  /* a conversion buffer sized to the write: HDF5's default (1 MiB, zeroed) on every small
  ** write of strings was a third of a small export's time */
  size_t tb = (size_t)n * 16 < ((size_t)1 << 20) ? (size_t)n * 16 : ((size_t)1 << 20);
  H5Pset_buffer(xp, tb < 4096 ? 4096 : tb, NULL, NULL);
  int r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &off, NULL, &n, NULL) < 0 ||
          H5Dwrite(d, mt, ms, fs, xp, buf) < 0 ? -1 : 0;
  H5Pclose(xp);
  H5Sclose(ms);
  H5Sclose(fs);
  return r;
}

/* A column of strings of n rows, all at once (var). */
int ex_put_strings(hid_t loc, const char *name, const char *const *v, hsize_t n) {
  hid_t t = ex_vlstr();
  hid_t d = ex_dset(loc, name, t, n, 0, "string-array", "0.2.0");
  int r = d < 0 || ex_dset_put(d, t, v, 0, n, 0) ? -1 : 0;
  if (d >= 0) H5Dclose(d);
  H5Tclose(t);
  return r;
}
