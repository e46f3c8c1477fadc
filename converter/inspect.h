/*
** inspect.h — `info`, `obs info` (inspect.c), `verify` (verify.c) on a dataset file.
*/
#ifndef CV_INSPECT_H
#define CV_INSPECT_H
#include <sqlite3.h>
#include <stdint.h>
#include "cv_util.h"

int cv_info(const char *path, int json, cv_err *e);
int cv_obs_info(const char *path, cv_err *e);
/* Checks everything a query relies on (docs/converter.md "verify"): prints one
** line per fault to stderr (the first 20, then how many more), or with json one
** JSON object on stdout; -1 if there is any fault. */
int cv_verify(const char *path, int quiet, int json, cv_err *e);

/* Shared with verify (inspect.c): the dataset opened read-only without the extension
** (*version: its format version); one integer from a query, or dflt; a dc_meta value as text
** (malloc()ed) or NULL, or as an integer (-1 when absent). */
int cv_open_ro(const char *path, sqlite3 **db, int64_t *version, cv_err *e);
int64_t cv_q_int(sqlite3 *db, const char *sql, int64_t dflt);
char *cv_meta_text(sqlite3 *db, const char *key);
int64_t cv_meta_int(sqlite3 *db, const char *key);

#endif
