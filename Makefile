# deltacells — top-level build.  `make` builds everything into build/.
#   make        build the codec library, the SQLite extension, the converter, benchmarks, tests
#   make test   install missing Debian packages, build, run every test (also under ASan+UBSan)
#   make demo   install missing Debian packages, build, make a small dataset, query it, train an epoch
#   make bench-ab BASE=REV   this tree's decoder against revision REV's, alternating in one process
#   make fuzz-long   run each fuzz target for FUZZ_SECONDS (default 600) on build/corpus/NAME, seeded
#                    from tests/fuzz/corpus/NAME (fuzz_obs also from the encoder; findings worth
#                    keeping go to tests/fuzz/corpus/)
#   make test-cross  the pure-C core (codec, obs, aggregation) and its C tests built for ARM64 with
#                    Debian's cross compiler and run under qemu-user (installs them; scripts/cross-test.sh)
#   make coverage    line and branch coverage of ext/ and converter/ over the C, SQL and Python tests
#                    (an instrumented copy in build-cov/; scripts/coverage.sh, docs/testing.md)
PYTHON   ?= /usr/bin/python3
CC       ?= gcc
CLANG    ?= clang
BUILD    := build
PKGS     := libzstd libxxhash sqlite3 hdf5-serial

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
ZSTD_LIBS  := $(shell pkg-config --libs libzstd libxxhash 2>/dev/null)
SQLITE_LIBS:= $(shell pkg-config --libs sqlite3 2>/dev/null)
HDF5_LIBS  := $(shell pkg-config --libs hdf5-serial 2>/dev/null)
# zlib: the converter reads gzipped 10x Matrix Market files (converter/tenx.c)
ZLIB_LIBS  := $(shell pkg-config --libs zlib 2>/dev/null || echo -lz)
CURL_CFLAGS:= $(shell pkg-config --cflags libcurl 2>/dev/null)
CURL_LIBS  := $(shell pkg-config --libs libcurl 2>/dev/null)

WARN     := -Wall -Wextra -Werror
CFLAGS   ?= -O2 -g
ALLCFLAGS = $(CFLAGS) $(WARN) -std=c11 -D_GNU_SOURCE -fPIC -pthread -MMD -MP \
            -Iext -Iext/codec -Iext/obs -Iext/agg -I$(BUILD)/gen $(PKG_CFLAGS) $(CURL_CFLAGS)
SANFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDLIBS_CORE := $(ZSTD_LIBS) -lpthread -lm

# --- sources -------------------------------------------------------------
CORE_SRC  := $(wildcard ext/codec/*.c) $(wildcard ext/obs/*.c) $(wildcard ext/agg/*.c)   # pure C: no SQLite, no HDF5
EXT_SRC   := $(wildcard ext/*.c)                                 # the SQLite extension
CONV_SRC  := $(wildcard converter/*.c)                           # the converter CLI (HDF5)
CTEST_SRC := $(wildcard tests/c/test_*.c)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
BENCH_SRC := $(wildcard bench/*.c)

CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
CORE_SOBJ := $(CORE_SRC:%.c=$(BUILD)/asan/obj/%.o)
EXT_OBJ   := $(EXT_SRC:%.c=$(BUILD)/obj/%.o)
EXT_COBJ  := $(EXT_SRC:%.c=$(BUILD)/core/%.o)
CONV_OBJ  := $(CONV_SRC:%.c=$(BUILD)/obj/%.o)
EXT_SOBJ  := $(EXT_SRC:%.c=$(BUILD)/asan/obj/%.o)
EXT_SCOBJ := $(EXT_SRC:%.c=$(BUILD)/asan/core/%.o)
CONV_SOBJ := $(CONV_SRC:%.c=$(BUILD)/asan/obj/%.o)
CTESTS    := $(CTEST_SRC:tests/c/%.c=$(BUILD)/tests/%)
CTESTS_SAN:= $(CTEST_SRC:tests/c/%.c=$(BUILD)/asan/tests/%)
# the pool tests built with ThreadSanitizer (from the core sources directly)
CTESTS_TSAN := $(BUILD)/tsan/tests/test_pool_share $(BUILD)/tsan/tsan_batch $(BUILD)/tsan/tsan_vfs
FUZZERS   := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
BENCHES   := $(BENCH_SRC:bench/%.c=$(BUILD)/%)

LIBCORE     := $(BUILD)/libdccore.a
LIBCORE_SAN := $(BUILD)/asan/libdccore.a
EXTENSION   := $(BUILD)/deltacells.so
CONVERTER   := $(BUILD)/deltacells
# the extension and the converter built with ASan+UBSan (make test runs the SQL-file tests and
# a subset of pytest against them; a Python process loading the library needs libasan preloaded)
EXTENSION_SAN := $(BUILD)/asan/deltacells.so
CONVERTER_SAN := $(BUILD)/asan/deltacells

.PHONY: all deps test test-cross demo clean fuzz fuzz-long sanitize bench bench-ab benchmark coverage
all: $(LIBCORE) $(EXTENSION) $(CONVERTER) $(BENCHES) $(BUILD)/bench_decode_stages $(CTESTS)

deps:
	@sh scripts/install-deps.sh

# --- objects -------------------------------------------------------------
# ext/deltacells.c registers every ext/vtab_NAME.c through dc_register_NAME()
VTAB_NAMES := $(patsubst ext/vtab_%.c,%,$(wildcard ext/vtab_*.c))
$(BUILD)/gen/dc_modules.h: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' $(foreach n,$(VTAB_NAMES),'DC_MODULE($(n))') > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
FORCE:
$(EXT_OBJ) $(EXT_COBJ) $(EXT_SOBJ) $(EXT_SCOBJ): $(BUILD)/gen/dc_modules.h
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -c $< -o $@
$(BUILD)/asan/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(SANFLAGS) -c $< -o $@
# the extension compiled into the converter (SQLITE_CORE: calls libsqlite3 directly)
$(BUILD)/core/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -DSQLITE_CORE -c $< -o $@

$(BUILD)/asan/core/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(SANFLAGS) -DSQLITE_CORE -c $< -o $@

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBCORE_SAN): $(CORE_SOBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# --- products ------------------------------------------------------------
$(EXTENSION): $(EXT_OBJ) $(LIBCORE) ext/deltacells.map
	$(CC) -shared -Wl,--version-script=ext/deltacells.map -o $@ $(EXT_OBJ) $(LIBCORE) $(CURL_LIBS) $(LDLIBS_CORE)
$(CONVERTER): $(CONV_OBJ) $(EXT_COBJ) $(LIBCORE)
	$(CC) -o $@ $(CONV_OBJ) $(EXT_COBJ) $(LIBCORE) $(HDF5_LIBS) $(ZLIB_LIBS) $(SQLITE_LIBS) $(CURL_LIBS) $(LDLIBS_CORE)
$(EXTENSION_SAN): $(EXT_SOBJ) $(LIBCORE_SAN) ext/deltacells.map
	$(CC) -shared $(SANFLAGS) -Wl,--version-script=ext/deltacells.map -o $@ $(EXT_SOBJ) $(LIBCORE_SAN) $(CURL_LIBS) $(LDLIBS_CORE)
$(CONVERTER_SAN): $(CONV_SOBJ) $(EXT_SCOBJ) $(LIBCORE_SAN)
	$(CC) $(SANFLAGS) -o $@ $(CONV_SOBJ) $(EXT_SCOBJ) $(LIBCORE_SAN) $(HDF5_LIBS) $(ZLIB_LIBS) $(SQLITE_LIBS) $(CURL_LIBS) $(LDLIBS_CORE)
$(BUILD)/bench_%: bench/bench_%.c $(LIBCORE)
	$(CC) $(ALLCFLAGS) -O3 $(LDFLAGS) -o $@ $< $(LIBCORE) $(LDLIBS_CORE)
# bench_decode with the codec's stage timers (DC_CTX_PROFILE, compiled in only here): it also
# prints where a decode's time goes (tables and bucket counts, streams, cells).  Only the chunk
# decoder is compiled again; the linker then takes the rest of the codec from the library.
$(BUILD)/prof/dc_ctx_decompress.o: ext/codec/dc_ctx_decompress.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -DDC_CTX_PROFILE -c $< -o $@
$(BUILD)/bench_decode_stages: bench/bench_decode.c $(BUILD)/prof/dc_ctx_decompress.o $(LIBCORE)
	$(CC) $(ALLCFLAGS) -O3 -DDC_CTX_PROFILE -o $@ $< $(BUILD)/prof/dc_ctx_decompress.o $(LIBCORE) $(LDLIBS_CORE)
# reads datasets through SQLite (and nothing of the core library)
$(BUILD)/bench_blob_read: bench/bench_blob_read.c
	$(CC) $(ALLCFLAGS) -O3 -o $@ $< $(SQLITE_LIBS)
$(BUILD)/tests/%: tests/c/%.c tests/c/dctest.h $(LIBCORE)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(LDFLAGS) -o $@ $< $(LIBCORE) $(LDLIBS_CORE)
$(BUILD)/asan/tests/%: tests/c/%.c tests/c/dctest.h $(LIBCORE_SAN)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(SANFLAGS) -o $@ $< $(LIBCORE_SAN) $(LDLIBS_CORE)
$(BUILD)/tsan/tests/%: tests/c/%.c tests/c/dctest.h $(CORE_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -O1 -g -fsanitize=thread -o $@ $< $(CORE_SRC) $(LDLIBS_CORE)
# concurrent dc_batch calls under ThreadSanitizer: the extension's sources compiled in (SQLITE_CORE)
$(BUILD)/tsan/tsan_batch: tests/tsan/tsan_batch.c $(CORE_SRC) $(EXT_SRC) $(BUILD)/gen/dc_modules.h
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -DSQLITE_CORE -O1 -g -fsanitize=thread -o $@ $< $(CORE_SRC) $(EXT_SRC) $(SQLITE_LIBS) \
	  $(CURL_LIBS) $(LDLIBS_CORE)
# the dchttp VFS's prefetch threads and their users under ThreadSanitizer (an HTTP range server in
# the program), over a small dataset made once
$(BUILD)/tsan/tsan_vfs: tests/tsan/tsan_vfs.c $(CORE_SRC) $(EXT_SRC) $(BUILD)/gen/dc_modules.h
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -DSQLITE_CORE -O1 -g -fsanitize=thread -o $@ $< $(CORE_SRC) $(EXT_SRC) $(SQLITE_LIBS) \
	  $(CURL_LIBS) $(LDLIBS_CORE)
TSAN_VFS_DB := $(BUILD)/tsan/tsan_vfs.dcdb
$(TSAN_VFS_DB): $(CONVERTER) scripts/gen_h5ad.py
	@mkdir -p $(dir $@)
	$(PYTHON) scripts/gen_h5ad.py --cells 3000 --genes 400 --seed 7 -o $(BUILD)/tsan/tsan_vfs.h5ad
	$(CONVERTER) convert $(BUILD)/tsan/tsan_vfs.h5ad -o $@ --tile-cells 250 --chunks 4 --quiet --force
# libFuzzer targets: clang, built from the core sources directly
$(BUILD)/fuzz/%: tests/fuzz/%.c $(CORE_SRC)
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -std=c11 -D_GNU_SOURCE -Iext -Iext/codec -Iext/obs -Iext/agg $(PKG_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< $(CORE_SRC) $(LDLIBS_CORE)

# the remote VFS's pure logic (what servers and users send it), with the core (its allocator)
$(BUILD)/fuzz/fuzz_remote: tests/fuzz/fuzz_remote.c ext/remote_logic.c ext/dc_remote.h $(CORE_SRC)
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -std=c11 -D_GNU_SOURCE -Iext -Iext/codec -Iext/obs -Iext/agg $(PKG_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< ext/remote_logic.c $(CORE_SRC) $(LDLIBS_CORE)

# the converter's 10x Matrix Market reader (text a user hands it) with the parts of the converter
# it uses, HDF5, zlib (and libsqlite3 for its string builder)
TENX_SRC := converter/tenx.c converter/h5ad.c converter/h5ad_hdf5.c converter/h5ad_frame.c converter/h5ad_rows.c \
            converter/cv_util.c converter/cv_dtype.c
$(BUILD)/fuzz/fuzz_tenx: tests/fuzz/fuzz_tenx.c $(TENX_SRC) $(wildcard converter/*.h) $(CORE_SRC)
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -std=c11 -D_GNU_SOURCE -Iext -Iext/codec -Iext/obs -Iext/agg -Iconverter $(PKG_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< $(TENX_SRC) $(CORE_SRC) \
	  $(HDF5_LIBS) $(ZLIB_LIBS) $(SQLITE_LIBS) $(LDLIBS_CORE)

# the SQL-level target: the extension compiled in (SQLITE_CORE), over a small dataset made once,
# of two inputs with different genes (the second one's tile maps its genes: tiles skipped by gene)
FUZZ_SQL_DB := $(BUILD)/fuzz/fuzz_sql.dcdb
$(BUILD)/fuzz/fuzz_sql: tests/fuzz/fuzz_sql.c $(CORE_SRC) $(EXT_SRC) $(BUILD)/gen/dc_modules.h
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -std=c11 -D_GNU_SOURCE -DSQLITE_CORE -Iext -Iext/codec -Iext/obs -Iext/agg -I$(BUILD)/gen \
	  $(PKG_CFLAGS) $(CURL_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< $(CORE_SRC) $(EXT_SRC) $(SQLITE_LIBS) \
	  $(CURL_LIBS) $(LDLIBS_CORE)
$(FUZZ_SQL_DB): $(CONVERTER) scripts/gen_h5ad.py
	@mkdir -p $(dir $@)
	$(PYTHON) scripts/gen_h5ad.py --cells 200 --genes 200 --seed 5 -o $(BUILD)/fuzz/fuzz_sql.h5ad
	$(PYTHON) scripts/gen_h5ad.py --cells 100 --genes 120 --seed 6 -o $(BUILD)/fuzz/fuzz_sql_b.h5ad
	$(CONVERTER) convert $(BUILD)/fuzz/fuzz_sql.h5ad $(BUILD)/fuzz/fuzz_sql_b.h5ad -o $@ --tile-cells 100 --chunks 4 \
	  --quiet --force --dataset-id 0123456789abcdef

sanitize: $(CTESTS_SAN) $(CTESTS_TSAN) $(TSAN_VFS_DB) $(EXTENSION_SAN) $(CONVERTER_SAN)
fuzz: $(FUZZERS) $(FUZZ_SQL_DB)

FUZZ_SECONDS ?= 600
fuzz-long: $(FUZZERS) $(FUZZ_SQL_DB)
	@for f in $(FUZZERS); do n=$$(basename $$f); mkdir -p $(BUILD)/corpus/$$n; \
	  if [ -d tests/fuzz/corpus/$$n ]; then cp -n tests/fuzz/corpus/$$n/* $(BUILD)/corpus/$$n/; fi; \
	  $$f -max_total_time=$(FUZZ_SECONDS) $(BUILD)/corpus/$$n || exit 1; done

test: deps
	@$(MAKE) --no-print-directory all sanitize fuzz
	@PYTHON=$(PYTHON) bash tests/run_all.sh

# the pure-C core and its C tests built for ARM64 and run under qemu-user (scripts/cross-test.sh)
test-cross:
	@bash scripts/cross-test.sh

coverage:
	@sh scripts/install-deps.sh gcovr
	@PYTHON=$(PYTHON) bash scripts/coverage.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) bash scripts/demo.sh

bench: all
	$(BUILD)/bench_decode

# this tree's decoder against revision BASE's, alternating in one process (scripts/bench-ab.sh)
BASE ?= HEAD
bench-ab:
	@BASE=$(BASE) BUILD=$(BUILD) bash scripts/bench-ab.sh
$(BUILD)/ab/bench_decode_ab: bench/bench_decode.c $(LIBCORE) $(BUILD)/ab/libdccore_base.a
	$(CC) $(ALLCFLAGS) -O3 -DDC_AB -o $@ $< $(LIBCORE) $(BUILD)/ab/libdccore_base.a $(LDLIBS_CORE)

# every benchmark -> bench/results/*.json -> docs/benchmarks.md (+ docs/img/*.png);
# the defaults take about 15 minutes on 2 cores
BENCH_CELLS   ?= 100000
BENCH_THREADS ?= 1,2
BENCH_WORKERS ?= 0,1,2
BENCH_REAL    ?= ../shared/data/real
benchmark: deps
	@$(MAKE) --no-print-directory all
	PYTHONPATH=python $(PYTHON) bench/run_benchmarks.py --cells $(BENCH_CELLS) \
	  --threads $(BENCH_THREADS) --workers $(BENCH_WORKERS) --real $(BENCH_REAL)
	$(PYTHON) bench/report

clean:
	rm -rf $(BUILD) build-cov

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
