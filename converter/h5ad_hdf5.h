/*
** h5ad_hdf5.h — HDF5 access that the input readers (h5ad*.c, tenx.c) share.  Every
** function clears HDF5's error stack where it treats an error as an answer (absent, not a
** string, ...).
*/
#ifndef CV_H5AD_HDF5_H
#define CV_H5AD_HDF5_H
#include <hdf5.h>
#include <stdint.h>
#include "cv_util.h"
#include "h5ad.h"

/* The innermost message of HDF5's current error stack, which it clears ("HDF5 read error" if
** none); w holds the text. */
typedef struct h5ad_walk { char msg[400]; } h5ad_walk;
const char *h5ad_reason(h5ad_walk *w);
/* cv_fail with "PATH: what: reason"; -1. */
int h5ad_fail(cv_err *e, const h5file *f, const char *what);
/* Closes any HDF5 id (dataset, group, attribute, type, space, file) and sets it to -1. */
void h5ad_close_id(hid_t *id);

/* 1 if every component of path exists below loc. */
int h5ad_exists(hid_t loc, const char *path);
/* H5I_GROUP, H5I_DATASET, or H5I_BADID.  Opens the object into *out. */
H5I_type_t h5ad_open_obj(hid_t loc, const char *path, hid_t *out);

/* A string attribute (scalar, or first element) into *out, malloc()ed; NULL if absent / not a
** string.  0, or -1 when a fixed-length string holds a NUL byte before its end (the rest of its
** text would be lost: the caller's error names the attribute). */
int h5ad_attr_str(hid_t obj, const char *name, char **out);
/* A string-array attribute (e.g. column-order) into *out: the count, -1 (unreadable) or -2 (a
** string holding a NUL byte before its end); an absent attribute or a numeric empty array gives 0. */
long h5ad_attr_strs(hid_t obj, const char *name, char ***out);
void h5ad_free_strs(char **v, long n);
/* An integer-array attribute (shape) of at most max values: the count or -1. */
int h5ad_attr_ints(hid_t obj, const char *name, int64_t *out, int max);
/* 1 if obj has a scalar integer or enum (numpy bool) attribute `name` that is not 0, else 0. */
int h5ad_attr_true(hid_t obj, const char *name);

/* Length of a 1-D dataset, or -1 if not 1-D. */
int64_t h5ad_ds_len(hid_t ds);
/* Reads [start, start+count) of a 1-D dataset, or rows of a 2-D one (count rows x ncols when
** ncols > 0).  0 or -1 (HDF5's error stack says why). */
int h5ad_ds_read(hid_t ds, hid_t mt, uint64_t start, uint64_t count, uint64_t ncols, void *buf);
/* A variable-length UTF-8 string memory type (H5Tclose it). */
hid_t h5ad_vlen_str_type(hid_t file_type);  /* variable-length, in file_type's character set */
/* Reads strings [start, start+n) of a string dataset into cb (kind text) at positions off.. */
int h5ad_read_strs(h5file *f, hid_t ds, const char *what, uint64_t start, size_t n, colbuf *cb, size_t off,
                   cv_err *e);

#endif
