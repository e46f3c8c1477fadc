#!/usr/bin/env bash
# scripts/cross-test.sh (make test-cross): the pure-C core (ext/codec, ext/obs, ext/agg) and its C
# tests (tests/c) built for ARM64 with Debian's cross compiler and run under qemu-user.  That is the
# code an ARM64 machine runs (Graviton, Ampere, Apple silicon under Linux): none of the x86 decoders
# is compiled in, so the portable path decodes everything, its GCC vector extensions become NEON,
# and plain `char` is unsigned.  CI runs it after `make test`.
#
# Installs what is missing through scripts/install-deps.sh (the project's packages, and here
# gcc-aarch64-linux-gnu with libc6-dev-arm64-cross, qemu-user and the core's two libraries for arm64: libzstd-dev:arm64,
# libxxhash-dev:arm64; dpkg gets the arm64 architecture added first).  The
# tests are linked statically: bookworm's qemu-user (7.2) hangs in pthread_create of a dynamically
# linked program on this kernel.  Builds into build/cross-aarch64/.  Each test function counts
# once, as in tests/run_all.sh (both count with tests/counting.sh); the last line is
# "N passed, N failed, N skipped".
# CROSS_TEST_TIMEOUT (seconds per test binary, default 900): qemu runs them 5-15x slower.
set -u
cd "$(dirname "$0")/.." || exit 1
ARCH=aarch64 DEB=arm64 TRIPLET=aarch64-linux-gnu
OUT=build/cross-$ARCH
TIMEOUT=${CROSS_TEST_TIMEOUT:-900}
# shellcheck source=tests/counting.sh
. tests/counting.sh

# the arm64 packages need the architecture in dpkg before install-deps.sh's apt-get update
if ! dpkg --print-foreign-architectures | grep -qx "$DEB"; then
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO dpkg --add-architecture "$DEB" || { echo "cannot add the $DEB architecture to dpkg"; exit 1; }
fi
# libc6-dev-arm64-cross: the target's C library and headers, only a Recommends of the cross
# compiler, which install-deps.sh leaves out (--no-install-recommends): without it the build
# stops at <bits/libc-header-start.h> on a machine that did not have it already
sh scripts/install-deps.sh "gcc-$TRIPLET" "libc6-dev-$DEB-cross" qemu-user "libzstd-dev:$DEB" "libxxhash-dev:$DEB" || exit 1

echo "== C tests built for $ARCH ($TRIPLET-gcc, static), run under qemu-$ARCH"
# pkg-config answers for the target's libraries (the Makefile asks it for libzstd and libxxhash)
export PKG_CONFIG_LIBDIR=/usr/lib/$TRIPLET/pkgconfig:/usr/share/pkgconfig
tests=()
for src in tests/c/test_*.c; do n=$(basename "$src" .c); tests+=("$OUT/tests/$n"); done
if ! make --no-print-directory -s -j"$(nproc)" BUILD="$OUT" CC="$TRIPLET-gcc" LDFLAGS=-static "${tests[@]}" \
     "$OUT/bench_decode"; then
  fail=1; failed_names+=("cross-$ARCH build"); echo "[cross-$ARCH build] FAIL"
  finish
  exit 1
fi

# what qemu-user cannot run (counted as one skip each, with the reason)
declare -A QEMU_CANNOT=(
  [test_pool_fork]="qemu-user 7.2 itself aborts when a forked child of a threaded program starts a thread (assertion in qemu_plugin_vcpu_init_hook); the native and ASan runs of make test cover it"
)
for t in "${tests[@]}"; do
  label="$ARCH/$(basename "$t")"
  why=${QEMU_CANNOT[$(basename "$t")]:-}
  if [ -n "$why" ]; then
    skip=$((skip + 1)); skip_why+=("[$label] $why"); echo "[$label] skipped"
    continue
  fi
  out=$(timeout "$TIMEOUT" "qemu-$ARCH" "$t" 2>&1); rc=$?
  count_lines "$out" "$rc" "$label"
done
# the reference tile (10,000 cells x 61,497 genes, 23.5 M nonzeros, made by bench_decode) encoded
# and decoded on 1 and 2 threads, every value compared (bench_decode exits 1 at a mismatch)
label="$ARCH/bench_decode reference tile"
out=$(timeout "$TIMEOUT" "qemu-$ARCH" "$OUT/bench_decode" --threads 1,2 --runs 1 --no-zstd 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q '^decoder path: scalar' <<<"$out"; then
  pass=$((pass + 1)); echo "[$label] passed"
else
  fail=$((fail + 1)); failed_names+=("$label")
  echo "  [$label] exit status $rc (want 0, and 'decoder path: scalar'):"; tail -20 <<<"$out"
fi
finish
