/*
** inspect.h — `info`, `obs info`, `verify` on a dataset file.
*/
#ifndef CV_INSPECT_H
#define CV_INSPECT_H
#include "cv_util.h"

int cv_info(const char *path, int json, cv_err *e);
int cv_obs_info(const char *path, cv_err *e);
/* Checks everything a query relies on (docs/converter.md "verify"): prints one
** line per fault to stderr (the first 20, then how many more), or with json one
** JSON object on stdout; -1 if there is any fault. */
int cv_verify(const char *path, int quiet, int json, cv_err *e);

#endif
