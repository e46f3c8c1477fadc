/*
** inspect.h — `info`, `obs info`, `verify` on a dataset file.
*/
#ifndef CV_INSPECT_H
#define CV_INSPECT_H
#include "cv_util.h"

int cv_info(const char *path, int json, cv_err *e);
int cv_obs_info(const char *path, cv_err *e);
/* Decodes every tile and obs block; prints each fault to stderr; -1 if any. */
int cv_verify(const char *path, int quiet, cv_err *e);

#endif
