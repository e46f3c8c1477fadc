/*
** bench_first_touch.c — what a page of memory costs the first time a process writes it, on
** this machine: the figure behind the loader's choices between DataLoader workers handing
** batches over in shared memory (lanes) or copied once (python/deltacells/_xfer.py).
**
**   build/bench_first_touch [--mib N] [--runs R] [--json]
**
** Each run maps N MiB (default 64) afresh and times, per 4 KiB page (medians of R runs,
** default 5):
**   private 4k        private anonymous memory, huge pages refused (MADV_NOHUGEPAGE): the
**                     first write of each page
**   private huge      the same advised for transparent huge pages (MADV_HUGEPAGE, 2 MiB
**                     aligned): what a worker's private slots and the receive pool get
**   shared populate   a memfd mapped MAP_SHARED: MADV_POPULATE_WRITE (allocates the pages
**                     and maps them, as a lane slot's first take does)
**   shared write      then the first write of each page (mapped and allocated already)
**   child populate    a forked child (a DataLoader worker) maps the same pages, which exist:
**   child write       MADV_POPULATE_WRITE, then its first write of each page
**   rewrite           a write of pages this process has written before (the floor)
**   copy              memcpy of the region into a buffer written before (what receiving a
**                     copied batch costs the main process per page, without the syscall)
** A worker that lives one epoch pays child populate + child write per page of every lane slot
** it fills (lanes), or private huge + the main process's copy (copied once).
** Each run unmaps what it mapped, so a later run may get pages the machine has just freed
** (on a virtual machine, pages the host still backs): the spread between runs is part of the
** answer.  On a machine whose hypervisor shadows the guest's page tables (the development VM:
** "PVM" in dmesg) every first access of a page by a process traps to the host; elsewhere a
** populated page costs nothing more when it is first written.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PAGE 4096u
#define HUGE (2u << 20)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* one byte per page: the cost is the page's, not the bytes' */
static double touch(uint8_t *p, size_t n, uint8_t v) {
  double t = now();
  for (size_t i = 0; i < n; i += PAGE) ((volatile uint8_t *)p)[i] = v;
  return now() - t;
}

/* n bytes of private memory at a 2 MiB boundary (*base, n + HUGE: the mapping to unmap) */
static uint8_t *map_private(size_t n, int huge, uint8_t **base) {
  uint8_t *p = mmap(NULL, n + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  *base = p;
  uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
  madvise(a, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return a;
}

enum { PRIV4K, PRIVHUGE, SHPOP, SHWRITE, CHPOP, CHWRITE, REWRITE, COPY, NM };
static const char *names[NM] = {"private 4k", "private huge", "shared populate", "shared write",
                                "child populate", "child write", "rewrite", "copy"};
static const char *keys[NM] = {"private_4k", "private_huge", "shared_populate", "shared_write",
                               "child_populate", "child_write", "rewrite", "copy"};

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* one run: us per page of each measure into r[] */
static int run(size_t n, double *r) {
  double pages = (double)(n / PAGE);
  uint8_t *b4 = NULL, *bh = NULL, *bd = NULL;
  uint8_t *p4 = map_private(n, 0, &b4), *ph = map_private(n, 1, &bh), *dst = map_private(n, 1, &bd);
  if (!p4 || !ph || !dst) return -1;
  r[PRIV4K] = touch(p4, n, 1);
  r[PRIVHUGE] = touch(ph, n, 1);
  r[REWRITE] = touch(ph, n, 2);
  memset(dst, 0, n);
  double t = now();
  memcpy(dst, ph, n);
  r[COPY] = now() - t;
  int fd = memfd_create("bench_first_touch", 0);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) return -1;
  uint8_t *sh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (sh == MAP_FAILED) return -1;
  t = now();
  int pop = madvise(sh, n, MADV_POPULATE_WRITE) == 0;   /* Linux 5.14+; else faults on write */
  r[SHPOP] = pop ? now() - t : 0;
  r[SHWRITE] = touch(sh, n, 1);
  int pfd[2];
  if (pipe(pfd) != 0) return -1;
  pid_t c = fork();
  if (c == 0) {
    double cr[2];
    t = now();
    cr[0] = madvise(sh, n, MADV_POPULATE_WRITE) == 0 ? now() - t : 0;
    cr[1] = touch(sh, n, 2);
    ssize_t w = write(pfd[1], cr, sizeof cr);
    _exit(w == (ssize_t)sizeof cr ? 0 : 1);
  }
  double cr[2] = {0, 0};
  ssize_t got = read(pfd[0], cr, sizeof cr);
  int st = 0;
  waitpid(c, &st, 0);
  close(pfd[0]);
  close(pfd[1]);
  if (got != (ssize_t)sizeof cr || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  r[CHPOP] = cr[0];
  r[CHWRITE] = cr[1];
  for (int k = 0; k < NM; k++) r[k] *= 1e6 / pages;
  munmap(sh, n);
  close(fd);
  munmap(b4, n + HUGE);
  munmap(bh, n + HUGE);
  munmap(bd, n + HUGE);
  return 0;
}

int main(int argc, char **argv) {
  size_t mib = 64;
  int runs = 5, json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = (size_t)strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json")) json = 1;
    else {
      fprintf(stderr, "usage: %s [--mib N] [--runs R] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (mib < 2 || runs < 1) {
    fprintf(stderr, "bench_first_touch: --mib must be at least 2 and --runs at least 1\n");
    return 2;
  }
  size_t n = mib << 20;
  double *all = calloc((size_t)runs * NM, sizeof *all), med[NM];
  if (!all) return 1;
  for (int k = 0; k < runs; k++)
    if (run(n, all + (size_t)k * NM) != 0) {
      perror("bench_first_touch: a run failed");
      return 1;
    }
  double *col = calloc((size_t)runs, sizeof *col);
  if (!col) return 1;
  for (int m = 0; m < NM; m++) {
    for (int k = 0; k < runs; k++) col[k] = all[(size_t)k * NM + m];
    qsort(col, (size_t)runs, sizeof *col, cmp);
    med[m] = runs % 2 ? col[runs / 2] : (col[runs / 2 - 1] + col[runs / 2]) / 2;
  }
  printf("first write per 4 KiB page, %zu MiB, median of %d runs:\n", mib, runs);
  for (int m = 0; m < NM; m++) printf("  %-16s %8.3f us\n", names[m], med[m]);
  double lanes = med[CHPOP] + med[CHWRITE], copy = med[PRIVHUGE] + med[COPY];
  printf("a DataLoader worker new every epoch, per page of a batch: lanes %.3f us (child populate + "
         "write), copied once %.3f us (private huge + the main process's copy, its syscall not "
         "counted): %s\n", lanes, copy, lanes <= copy ? "lanes cost less" : "copying costs less");
  if (json) {
    printf("{\"mib\": %zu, \"runs\": %d", mib, runs);
    for (int m = 0; m < NM; m++) printf(", \"%s_us\": %.4f", keys[m], med[m]);
    printf(", \"fresh_worker_lanes_us\": %.4f, \"fresh_worker_copy_us\": %.4f}\n", lanes, copy);
  }
  free(col);
  free(all);
  return 0;
}
