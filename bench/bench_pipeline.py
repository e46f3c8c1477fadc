#!/usr/bin/python3
"""The training-input pipeline: deltacells.CellDataset against in-memory and anndata loaders.

    PYTHONPATH=python /usr/bin/python3 bench/bench_pipeline.py [--workers 0,1,2]
        [--batch-size 512,5000] [--cells 100000] [--genes 61497] [--prefetch-tiles 2] [--json]
        [--before DIR]   # also run the loader of another checkout's python/ (same run)
        [--no-global]    # skip the loader with a global shuffle
        [--read]         # the training process reads every batch (by default it counts them)
        [--panel N]      # train on a gene panel: N genes (as highly variable genes are picked)
        [--map]          # also the map-style CellMapDataset: WindowBatchSampler, and a plain shuffle
        [--where EXPR]   # train on the cells an obs filter selects (loaders and baselines alike)
    With --bandwidth-mbps or --latency-ms (a remote dataset behind an emulated object store),
    this runs bench/bench_remote.py with the same arguments: see its help.

Data: scripts/gen_h5ad.py --cells N --genes 61497 (counts shaped like the reference tile),
converted by build/deltacells; both cached in build/bench-data/.

Each configuration runs in its own process (so its memory is its own) and reports
  cells/s    cells delivered to the training process / wall time of the epoch (from
             constructing the loader; `steady` excludes the first batch)
  rss_mb     peak RSS of the whole process tree (the process + its DataLoader workers,
             sampled every 20 ms from statm, summed); pss_mb the summed PSS (shared pages
             counted once) at the first batch and at each epoch's end (reading PSS walks the
             page tables: sampled every 20 ms it slowed 2 workers 1.3x; see PeakMemory)
  first_s    time to first batch, from constructing the Dataset
Baselines in the same run (all shuffled random batches turned into torch CSR, as many
epochs as the loaders):
  ceiling      the whole matrix as scipy CSR in RAM (float32 values, int32 indices: the
               loader's own output format), globally shuffled batches -> torch sparse CSR
               with no widening copy; default malloc settings, as a user has them
  ceiling_tuned  the same with glibc's malloc thresholds raised (deltacells.tune_malloc(),
               opt-in), which keeps the ceiling's per-batch allocations out of fresh pages
  anndata_mem  anndata.read_h5ad in memory, adata[idx].X -> torch sparse CSR
  anndata_backed  anndata.read_h5ad(backed='r'), adata[sorted idx].X (a few batches)
With --map, the map-style CellMapDataset too, both with collate_fn=deltacells.collate and the
loader's batch size: deltacells_map through deltacells.WindowBatchSampler (CellDataset's order,
the dataset's cache_mb set to the sampler's), and deltacells_map_shuffled through
DataLoader(shuffle=True), timed over --backed-batches batches (nearly every cell of such a batch
needs a chunk decoded for it alone).
The loader runs with its default shuffle window (deltacells) and with a global shuffle
(deltacells_global: shuffle_window = every tile).  With --before DIR, the loader of DIR
(e.g. a `git archive` of the previous commit's python/) runs too, against the same
extension (deltacells_before; with --fresh-workers also deltacells_fresh_before), so
before/after are ratios from one run.
Breakdown: one more pass at 0 workers with prefetch off and timings=True prints where a
batch's time goes, per stage (SQL call and its parts inside the extension, copy into the
batch's buffers, tensor construction, obs); with workers, one more pass per worker count
prints each worker's stages and the main process's (waiting, receiving the copy).
deltacells_malloc: the loader with deltacells.tune_malloc() (opt-in, process-wide), to
show what the package's own buffer reuse leaves to it.
Epochs (--epochs N): every loader and baseline makes N passes in its process, each
reshuffled (anndata_backed: one), and reports the last (DataLoader workers persistent; with
--fresh-workers also deltacells_fresh, whose workers are new processes every epoch as with
DataLoader's default, and deltacells_fresh_lanes, the same forced to hand batches over
through lanes: python/deltacells/_xfer.py); epoch_cells_per_s keeps them all,
and the summary sets first epochs against the ceiling's first.  Compare warm epochs: on a
virtual machine a first epoch also pays for the host backing memory the guest has not used
lately, which depends on what ran just before, not on the loader.  Measured on the
development VM (2026-12-02): faulting in 480 MB of fresh numpy buffers took 0.9-1.07 s in
the first process after a pause and 0.07-0.10 s in a process started right after another
freed as much; the same one-epoch loader run took 0.9 s or 0.3 s by its place in the
sequence, with or without tune_malloc (which reverses with the order: it is not malloc).
Reading (--read): by default the training process only counts each batch's nonzeros; with
--read it also sums every value and column index (loaders and baselines alike), so that a loader
whose batches are costly to reach from the training process (pages mapped there afresh: lanes
in a worker's first epoch) pays for it in the figure.  One run (2026-12-03, --workers 0,2
--epochs 3 --fresh-workers --read): 0 workers 2.16x the ceiling; persistent workers 0.88x of
0 workers in the third epoch but 0.30x the ceiling's first epoch in their first (0.53x in a
run without --read minutes later); new workers every epoch 0.39x of 0 workers, 1.76x the same
through lanes.
Selection (--where EXPR, an SQL expression over obs, as CellDataset's where=): every loader
gets where=EXPR, and the baselines draw their shuffled batches from the same cells (their row
numbers, found once through the dataset: the ceiling indexes its whole in-memory matrix by them,
as a user holding the matrix would); cells/s counts the selected cells.
Panel (--panel N): every loader takes genes= N genes drawn at random (seed 0, in that random
order) from the dataset's 20,000 most expressed, as a highly-variable-gene panel is; the
baselines hold X already cut to those columns in that order (scipy CSR, indices sorted per
row), their column selection done at load time and not timed, so the ceiling is an in-memory
HVG matrix.
Targets (2 cores, batch 5,000, shuffled): deltacells >= 3x the ceiling's cells/s;
peak RSS <= 1.5 GB with prefetch_tiles=2; time to first batch <= 0.3 s.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(ROOT, "python"))
PY = sys.executable


# --- measuring ---------------------------------------------------------------------
# The sampler must not slow down what it measures.  smaps_rollup (PSS) walks every page
# table entry of a process: read every 20 ms from DataLoader workers that map a GB of shared
# lanes, it took a third of a core and made a 2-worker epoch 1.3x as long (0.39-0.41 s
# against 0.30-0.31 s; 0 workers 1.1x; 2026-12-02).  So the sampler reads only statm (RSS,
# a counter) and finds children through /proc/PID/task/TID/children; PSS is read at marks
# (mark(): the end of each epoch, outside the timed part, workers alive; and once at the
# first batch, inside the first epoch's time, since a one-epoch run's workers are gone by
# its end).
def _children(pid):
    """pid's children from /proc/PID/task/TID/children, or None without those files."""
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    return kids


def _scan_children():
    """Every process's children, from a scan of /proc (without CONFIG_PROC_CHILDREN)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def _tree(pid):
    out, todo, kids_of = [], [pid], _children
    while todo:
        p = todo.pop()
        out.append(p)
        kids = kids_of(p)
        if kids is None:          # no children files: one scan of /proc serves the rest
            scanned = _scan_children()
            kids_of = lambda q: scanned.get(q, [])     # noqa: E731
            kids = kids_of(p)
        todo.extend(kids)
    return out


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def _mem(pid):
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


class PeakMemory:
    """The peak summed RSS of this process and its descendants (sampled from statm), and
    their summed PSS at the marks (mark(), and the end)."""

    def __init__(self, interval=0.02):
        self.interval = interval
        self.rss = self.pss = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        self.rss = max(self.rss, sum(_rss(p) for p in _tree(os.getpid())))

    def mark(self):
        """A full sample, PSS included (slow: call it outside what is timed)."""
        rss = pss = 0
        for p in _tree(os.getpid()):
            r, s = _mem(p)
            rss += r
            pss += s
        self.rss = max(self.rss, rss)
        self.pss = max(self.pss, pss)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.mark()
        with open("/proc/self/status") as f:   # the process's own high-water mark
            for line in f:
                if line.startswith("VmHWM:"):
                    self.rss = max(self.rss, int(line.split()[1]))


# --- the data -------------------------------------------------------------------------
def _stale(db):
    """A cached dataset written by an older converter: an older format version, no covering
    index of the tile index (docs/format.md), which the remote benchmarks' open time depends on,
    no page map (tiles_data_pages), which their fetch-ahead's round trips do, or no catalogue
    hint (dc_meta catalogue_pages), which their open's round trips do, or tiles in chunks of the
    rule before 2026-12-07 (dc_meta chunks 8: every tile at most 8 chunks, where tiles of more
    than 8 M nonzeros now get one per M: docs/codec-design.md), or of that day's rule (more than 8
    chunks, not a multiple of 4)."""
    import sqlite3
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            v = con.execute("SELECT value FROM dc_meta WHERE key = 'format_version'").fetchone()
            ix = con.execute("SELECT count(*) FROM pragma_index_info('tiles_data_meta') "
                             "WHERE name = 'checksum'").fetchone()[0]
            pm = con.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'tiles_data_pages'").fetchone()[0]
            cat = con.execute("SELECT count(*) FROM dc_meta WHERE key = 'catalogue_pages'").fetchone()[0]
            ch = con.execute("SELECT value FROM dc_meta WHERE key = 'chunks'").fetchone()
            odd = con.execute("SELECT count(*) FROM tiles_data WHERE chunks > 8 AND chunks % 4 != 0").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return True
    return not v or int(v[0]) < 3 or not ix or not pm or not cat or not ch or int(ch[0]) < 32 or odd > 0


def ensure_data(cells, genes, seed=1):
    d = os.path.join(ROOT, "build", "bench-data")
    os.makedirs(d, exist_ok=True)
    h5 = os.path.join(d, f"bench_{cells}x{genes}_s{seed}.h5ad")
    db = h5[:-5] + ".dcdb"
    if not os.path.exists(h5):
        print(f"generating {h5} ...", file=sys.stderr)
        subprocess.run([PY, os.path.join(ROOT, "scripts", "gen_h5ad.py"), "--cells", str(cells),
                        "--genes", str(genes), "--seed", str(seed), "-o", h5], check=True)
    if not os.path.exists(db) or os.path.getmtime(db) < os.path.getmtime(h5) or _stale(db):
        print(f"converting into {db} ...", file=sys.stderr)
        t = time.perf_counter()
        subprocess.run([os.path.join(ROOT, "build", "deltacells"), "convert", h5, "-o", db, "--force"],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"  converted in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return h5, db


# --- one configuration (child process) ---------------------------------------------------
_READ = {"on": False, "sink": 0}


def _touch(X):
    """The batch's nonzeros.  With --read, the training process also reads every value and
    column index (a sum of each), as a model's first layer would: a loader whose batches view
    memory that is costly to reach from this process (pages mapped afresh) pays for it here."""
    v = X.values()
    if _READ["on"]:
        import torch
        idx = X.col_indices() if X.layout == torch.sparse_csr else X.indices()
        # in their own dtype: torch 1.13 sums int32 into int64 about 200x slower
        _READ["sink"] += float(v.sum(dtype=v.dtype)) + int(idx.sum(dtype=idx.dtype))
    return v.numel()


def child(cfg):
    if cfg.get("pythonpath"):    # --before: that package, ahead of this checkout's (sys.path[0])
        sys.path.insert(0, os.path.abspath(cfg["pythonpath"]))
    import numpy as np
    import torch
    import deltacells
    if cfg.get("pythonpath") and not os.path.abspath(deltacells.__file__).startswith(
            os.path.abspath(cfg["pythonpath"]) + os.sep):
        raise RuntimeError(f"--before: imported {deltacells.__file__}, not the package in {cfg['pythonpath']}")
    kind, bs = cfg["kind"], cfg["batch_size"]
    _READ["on"] = bool(cfg.get("read"))
    if kind == "ceiling_tuned":
        deltacells._malloc.tune()
    res_malloc = deltacells._malloc.applied
    torch.set_num_threads(cfg.get("torch_threads", 2))
    res = dict(cfg, malloc_tuned=res_malloc, package=os.path.dirname(deltacells.__file__))
    if cfg.get("malloc_tune"):
        res["malloc_tuned"] = deltacells._malloc.tune()
    if kind == "breakdown":
        return breakdown(cfg, res) if not cfg.get("workers") else breakdown_workers(cfg, res)
    if kind.startswith("deltacells_map"):
        return map_child(cfg, res)
    if kind.startswith("deltacells"):
        from torch.utils.data import DataLoader
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            kw = {}
            if cfg.get("global_shuffle"):
                kw["shuffle_window"] = 1 << 20        # every tile: one global shuffle
            ds = deltacells.CellDataset(cfg["db"], batch_size=bs, shuffle=True, seed=0,
                                        prefetch_tiles=cfg["prefetch_tiles"], output="csr",
                                        genes=cfg.get("panel"), where=cfg.get("where"), **kw)
            epochs = cfg.get("epochs", 1)
            persistent = epochs > 1 and cfg["workers"] > 0 and cfg.get("persistent", True)
            loader = DataLoader(ds, batch_size=None, num_workers=cfg["workers"],
                                persistent_workers=persistent)
            n, nnz, t_e, t1, first, per_epoch = _epochs(loader, epochs, mem, ds.set_epoch)
            del loader
        assert n == ds.n_cells, (n, ds.n_cells)
        res.update(cells=n, nnz=nnz, seconds=t1 - t_e, first_s=first - t0,
                   cells_per_s=n / (t1 - t_e), epoch_cells_per_s=per_epoch,
                   steady_cells_per_s=(n - min(n, bs)) / max(1e-9, t1 - first),
                   rss_mb=mem.rss / 1024, pss_mb=mem.pss / 1024)
        return res

    import anndata
    import scipy.sparse
    from deltacells._convert import csr_tensor
    max_batches = cfg.get("max_batches")
    with PeakMemory() as mem:
        t_load = time.perf_counter()
        if kind == "anndata_backed":
            ad = anndata.read_h5ad(cfg["h5"], backed="r")
        else:
            ad = anndata.read_h5ad(cfg["h5"])
            if kind == "anndata_mem":
                # anndata 0.8 reads int64 indptr with int32 indices, which scipy 1.10
                # cannot row-index ("Output dtype not compatible"): one index dtype
                ad.X = scipy.sparse.csr_matrix(ad.X)
        rows = np.arange(ad.n_obs)
        if cfg.get("where"):      # the selected cells' rows (not timed, as loading is not)
            sel = deltacells.CellDataset(cfg["db"], where=cfg["where"], batch_size=1)
            rows = np.asarray(sel.cell_ids, dtype=np.int64)
            if len(rows) and rows[-1] >= ad.n_obs:
                raise RuntimeError("--where: the dataset's cell ids are not the h5ad's rows")
        n_cells = len(rows)
        cols = None
        if cfg.get("panel"):      # the panel's columns, in its order (not timed: done at load)
            cols = ad.var_names.get_indexer(cfg["panel"])
            if (cols < 0).any():
                raise RuntimeError("--panel: genes missing from the h5ad")
            if kind != "anndata_backed":
                # (one index dtype: scipy cannot index anndata 0.8's int64 indptr + int32 indices)
                X0 = ad.X
                X0 = scipy.sparse.csr_matrix((X0.data, X0.indices.astype(np.int64), X0.indptr.astype(np.int64)),
                                             shape=X0.shape)[:, cols]
                X0.sort_indices()
                ad = anndata.AnnData(X=X0, obs=ad.obs)
        ceiling = kind.startswith("ceiling")
        X = None
        if ceiling:     # the loader's output format: float32 values, int32 indices
            X = scipy.sparse.csr_matrix(ad.X, dtype=np.float32)
            X.indices = X.indices.astype(np.int32)
            X.indptr = X.indptr.astype(np.int64 if X.nnz >= 2**31 else np.int32)
        load_s = time.perf_counter() - t_load

        def one_batch(idx):
            if ceiling:
                sub = X[idx]       # the loader's constructor: unchecked, like the loader's
                return csr_tensor(torch.from_numpy(sub.indptr), torch.from_numpy(sub.indices),
                                  torch.from_numpy(sub.data), sub.shape)
            if kind == "anndata_mem":
                sub = ad[idx].X
            else:
                sub = ad[np.sort(idx)].X
                if cols is not None:
                    sub = scipy.sparse.csr_matrix(sub)
                    sub = scipy.sparse.csr_matrix((sub.data, sub.indices.astype(np.int64),
                                                   sub.indptr.astype(np.int64)), shape=sub.shape)[:, cols]
                if not scipy.sparse.issparse(sub):
                    sub = scipy.sparse.csr_matrix(sub)
            return torch.sparse_csr_tensor(torch.from_numpy(sub.indptr.astype(np.int64)),
                                           torch.from_numpy(sub.indices.astype(np.int64)),
                                           torch.from_numpy(sub.data.astype(np.float32)),
                                           size=sub.shape)

        # as many passes as the loader's epochs, each its own shuffle (anndata backed: one):
        # cells/s of the last, so that with --epochs > 1 loader and baseline are both warm
        first = t_start = None
        per_epoch = []
        for e in range(1 if kind == "anndata_backed" else cfg.get("epochs", 1)):
            perm = rows[np.random.default_rng(e).permutation(n_cells)]
            batches = [perm[i:i + bs] for i in range(0, n_cells, bs)]
            if max_batches:
                batches = batches[:max_batches]
            t0 = time.perf_counter()
            t_start = t_start or t0
            n = nnz = 0
            for idx in batches:
                t = one_batch(idx)
                if first is None:
                    first = time.perf_counter()
                n += t.shape[0]
                nnz += _touch(t)
            t1 = time.perf_counter()
            per_epoch.append(n / (t1 - t0))
            mem.mark()
    res.update(cells=n, nnz=nnz, seconds=t1 - t0, load_s=load_s, first_s=first - t_start + load_s,
               cells_per_s=n / (t1 - t0), epoch_cells_per_s=per_epoch,
               rss_mb=mem.rss / 1024, pss_mb=mem.pss / 1024)
    return res


def _epochs(loader, epochs, mem, set_epoch=None, limit=None):
    """The loader's epochs (set_epoch(e) before each; each cut after `limit` batches if given),
    every batch's X touched: (cells and nonzeros of the last epoch, its start and end, when the
    first batch came, cells/s per epoch).  With epochs > 1 the caller reports the last."""
    first = None
    per_epoch = []
    for e in range(epochs):
        if set_epoch is not None:
            set_epoch(e)
        t_e = time.perf_counter()
        n = nnz = 0
        for k, b in enumerate(loader):
            if first is None:
                first = time.perf_counter()
                mem.mark()               # PSS while a one-epoch run's workers live
            n += b["X"].shape[0]
            nnz += _touch(b["X"])
            if limit and k + 1 >= limit:
                break
        t1 = time.perf_counter()
        per_epoch.append(n / (t1 - t_e))
        mem.mark()                       # PSS with the workers alive, untimed
    return n, nnz, t_e, t1, first, per_epoch


def map_child(cfg, res):
    """CellMapDataset through a DataLoader with collate_fn=deltacells.collate: deltacells_map with
    WindowBatchSampler (and the dataset's cache sized by it), deltacells_map_shuffled with a plain
    shuffle, timed over max_batches batches."""
    import deltacells
    from torch.utils.data import DataLoader
    bs, w = cfg["batch_size"], cfg["workers"]
    epochs = cfg.get("epochs", 1)
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        m = deltacells.CellMapDataset(cfg["db"], output="csr", genes=cfg.get("panel"), where=cfg.get("where"))
        persistent = epochs > 1 and w > 0
        if cfg["kind"] == "deltacells_map":
            sampler = deltacells.WindowBatchSampler(m, batch_size=bs, seed=0, num_workers=w)
            m.cache_mb = sampler.cache_mb             # before any connection opens
            loader = DataLoader(m, batch_sampler=sampler, collate_fn=deltacells.collate, num_workers=w,
                                persistent_workers=persistent)
            limit = None
        else:
            sampler = None
            loader = DataLoader(m, batch_size=bs, shuffle=True, collate_fn=deltacells.collate,
                                num_workers=w, persistent_workers=persistent)
            limit = cfg.get("max_batches") or 3
        n, nnz, t_e, t1, first, per_epoch = _epochs(loader, epochs, mem,
                                                    sampler.set_epoch if sampler else None, limit)
        del loader
    if limit is None:
        assert n == m.n_cells, (n, m.n_cells)
    res.update(cells=n, nnz=nnz, seconds=t1 - t_e, first_s=first - t0, cells_per_s=n / (t1 - t_e),
               epoch_cells_per_s=per_epoch, rss_mb=mem.rss / 1024, pss_mb=mem.pss / 1024)
    return res


STAGES = [("sql_call", "SQL call (execute: dc_batch, all of it)"),
          ("ext_plan", "  in it: parse ids, map cells to chunks"),
          ("ext_fetch", "  in it: blob reads + decode (placing: + the cells' sizes, no decode)"),
          ("ext_direct", "  in it: decode straight into the result"),
          ("ext_copy", "  in it: gather rows into the result"),
          ("copy_out", "copy into Python (result -> batch buffers, dtype on the way)"),
          ("place", "placing: a window's chunks decoded, each cell into its batch's buffers"),
          ("tensor", "tensor construction"),
          ("obs", "obs (text columns; the others come in the SQL call)"),
          ("transform", "transform")]


def breakdown(cfg, res):
    """0 workers, no prefetch thread: every stage of a batch in sequence, timed."""
    import deltacells
    import torch
    ds = deltacells.CellDataset(cfg["db"], batch_size=cfg["batch_size"], shuffle=True, seed=0,
                                prefetch_tiles=0, output="csr", obs=cfg.get("obs"),
                                genes=cfg.get("panel"), where=cfg.get("where"), timings=True)
    t0 = time.perf_counter()
    n = 0
    with iter(ds) as it:
        for b in it:
            n += b["X"].shape[0]
            _touch(b["X"])
        tm = dict(it.timings)
    wall = time.perf_counter() - t0
    nb = tm.pop("batches")
    res.update(batches=nb, cells=n, wall_ms=1e3 * wall / nb,
               stages_ms={k: 1e3 * v / nb for k, v in tm.items()})
    return res


def breakdown_workers(cfg, res):
    """N DataLoader workers: each worker's stages (sent back after its last batch), and
    the main process's: waiting for the next batch, receiving it (mapped from the worker's
    lane, or copied from it: _xfer), and everything else of the loop."""
    import deltacells
    from deltacells import _xfer
    from torch.utils.data import DataLoader, IterableDataset

    class Timed(IterableDataset):
        def __init__(self, ds):
            self.ds = ds

        def __iter__(self):
            with iter(self.ds) as it:
                yield from it
                tm = dict(it.timings)
            yield {"_timings": tm}

    ds = deltacells.CellDataset(cfg["db"], batch_size=cfg["batch_size"], shuffle=True, seed=0,
                                prefetch_tiles=cfg["prefetch_tiles"], output="csr",
                                obs=cfg.get("obs"), genes=cfg.get("panel"), where=cfg.get("where"),
                                timings=True)
    t0 = time.perf_counter()
    n = nb = 0
    wait = 0.0
    per_worker = []
    tw = time.perf_counter()
    for b in DataLoader(Timed(ds), batch_size=None, num_workers=cfg["workers"]):
        wait += time.perf_counter() - tw
        if "_timings" in b:
            per_worker.append(b["_timings"])
        else:
            nb += 1
            n += b["X"].shape[0]
            _touch(b["X"])
        tw = time.perf_counter()
    wall = time.perf_counter() - t0
    tm = {}
    for w in per_worker:
        for k, v in w.items():
            tm[k] = tm.get(k, 0) + v
    wb = tm.pop("batches", nb)
    stages = {k: 1e3 * v / max(1, wb) for k, v in tm.items()}
    recv = _xfer.stats["seconds"]
    res.update(batches=nb, cells=n, wall_ms=1e3 * wall / max(1, nb), stages_ms=stages,
               main_ms={"wait (blocked on the loader, receive included)": 1e3 * wait / max(1, nb),
                        "  in it: receive (copied where not mapped, _xfer)": 1e3 * recv / max(1, nb)},
               received_mb=_xfer.stats["bytes"] / 2**20,
               received={"mapped": _xfer.stats.get("mapped", 0),
                         "copied": _xfer.stats["arrays"] - _xfer.stats.get("mapped", 0)})
    return res


def panel_genes(db, n):
    """n gene names drawn at random (seed 0, kept in the drawn order) from the dataset's 20,000
    most expressed (the stored order is by decreasing total counts), as an HVG panel is."""
    import numpy as np
    import deltacells
    con = deltacells.connect(db)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id LIMIT 20000")]
    finally:
        con.close()
    if n > len(names):
        raise SystemExit(f"--panel {n}: the dataset has {len(names)} genes to draw from")
    return [names[i] for i in np.random.default_rng(0).choice(len(names), n, replace=False)]


def run_child(cfg, timeout=1800):
    pypath = cfg.get("pythonpath") or os.path.join(ROOT, "python")
    env = dict(os.environ, PYTHONPATH=pypath, **cfg.get("env", {}))
    env.setdefault("DELTACELLS_EXTENSION", os.path.join(ROOT, "build", "deltacells.so"))
    r = subprocess.run([PY, os.path.abspath(__file__), "--_child", json.dumps(cfg)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        return dict(cfg, error=r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv):
    if any(a.split("=")[0] in ("--bandwidth-mbps", "--latency-ms") for a in argv):
        # an emulated object store (issue 14's command line): bench_remote.py measures that,
        # with its own options (--prefetch-tiles 0,2 --max-inflight ... --workers N)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_remote
        bench_remote.main(argv)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--batch-size", default="512,5000")
    ap.add_argument("--cells", type=int, default=100000)
    ap.add_argument("--genes", type=int, default=61497)
    ap.add_argument("--prefetch-tiles", type=int, default=2)
    ap.add_argument("--backed-batches", type=int, default=3,
                    help="batches timed for anndata backed='r' (it is slow)")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--baselines", default="ceiling,ceiling_tuned,anndata_mem,anndata_backed",
                    help="which baselines run (comma-separated; anndata_mem reads the whole h5ad)")
    ap.add_argument("--before", metavar="DIR",
                    help="a python/ directory of another version of deltacells: its loader runs "
                         "too (deltacells_before; with --fresh-workers deltacells_fresh_before), "
                         "same data, same extension, same run")
    ap.add_argument("--no-global", action="store_true",
                    help="skip the loader with a global shuffle (deltacells_global)")
    ap.add_argument("--epochs", type=int, default=1,
                    help="epochs per run, loaders and baselines alike (persistent workers; "
                         "anndata backed: one pass); cells/s of the last epoch, the first kept "
                         "as epoch_cells_per_s")
    ap.add_argument("--h5ad", metavar="FILE",
                    help="a real h5ad file instead of the generated data (converted into "
                         "build/bench-data/)")
    ap.add_argument("--no-malloc", action="store_true",
                    help="skip the loader with deltacells.tune_malloc() (deltacells_malloc)")
    ap.add_argument("--map", action="store_true",
                    help="also the map-style CellMapDataset: through deltacells.WindowBatchSampler "
                         "(deltacells_map) and a plain shuffle (deltacells_map_shuffled, "
                         "--backed-batches batches)")
    ap.add_argument("--fresh-workers", action="store_true",
                    help="with workers and --epochs > 1, also the loader with workers that are not "
                         "persistent (DataLoader's default: new processes every epoch; "
                         "deltacells_fresh), and the same handing batches over through lanes "
                         "(DELTACELLS_WORKER_HANDOFF=lanes: deltacells_fresh_lanes)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every loader configuration and the ceiling this many times, "
                         "interleaved, and report the median (the machine is shared and noisy)")
    ap.add_argument("--obs", default="",
                    help="obs columns for the breakdown pass (comma-separated)")
    ap.add_argument("--read", action="store_true",
                    help="the training process reads every batch's values and column indices "
                         "(loaders and baselines alike; by default it only counts them)")
    ap.add_argument("--panel", type=int, default=0, metavar="N",
                    help="a gene panel of N genes (random among the 20,000 most expressed, random order)")
    ap.add_argument("--where", metavar="EXPR",
                    help="an obs filter (SQL, as CellDataset's where=): loaders and baselines use only "
                         "the cells it selects")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        print(json.dumps(child(json.loads(a._child))))
        return 0
    if a.cells < 100000 and not a.h5ad:
        print(f"note: --cells {a.cells} is below the 100,000 the targets are defined for",
              file=sys.stderr)
    if a.h5ad:
        h5 = os.path.abspath(a.h5ad)
        d = os.path.join(ROOT, "build", "bench-data")
        os.makedirs(d, exist_ok=True)
        db = os.path.join(d, os.path.basename(h5)[:-5] + ".dcdb")
        if not os.path.exists(db) or os.path.getmtime(db) < os.path.getmtime(h5) or _stale(db):
            subprocess.run([os.path.join(ROOT, "build", "deltacells"), "convert", h5, "-o", db,
                            "--force"], check=True, stdout=subprocess.DEVNULL)
    else:
        h5, db = ensure_data(a.cells, a.genes)
    workers = [int(w) for w in a.workers.split(",")]
    sizes = [int(b) for b in a.batch_size.split(",")]
    panel = panel_genes(db, a.panel) if a.panel else None
    results = []
    for bs in sizes:
        cfgs = []
        if not a.no_baselines:
            for kind, mb in (("ceiling", None), ("ceiling_tuned", None), ("anndata_mem", None),
                             ("anndata_backed", a.backed_batches)):
                if kind not in a.baselines.split(","):
                    continue
                cfg = {"kind": kind, "batch_size": bs, "h5": h5, "workers": 0, "epochs": a.epochs, "panel": panel,
                       "db": db, "where": a.where}
                if mb:
                    cfg["max_batches"] = max(1, mb if bs >= 5000 else mb * 10)
                cfgs.append(cfg)
        kinds = [("deltacells", {})]
        if not a.no_global:
            kinds.append(("deltacells_global", {"global_shuffle": True}))
        if not a.no_malloc:
            kinds.append(("deltacells_malloc", {"malloc_tune": True}))
        if a.before:
            kinds.append(("deltacells_before", {"pythonpath": os.path.abspath(a.before)}))
        if a.fresh_workers and a.epochs > 1:
            kinds.append(("deltacells_fresh", {"persistent": False}))
            kinds.append(("deltacells_fresh_lanes", {"persistent": False,
                                                     "env": {"DELTACELLS_WORKER_HANDOFF": "lanes"}}))
            if a.before:
                kinds.append(("deltacells_fresh_before", {"persistent": False,
                                                          "pythonpath": os.path.abspath(a.before)}))
        if a.map:
            kinds.append(("deltacells_map", {}))
            kinds.append(("deltacells_map_shuffled", {"max_batches": a.backed_batches}))
        for w in workers:
            for kind, extra in kinds:
                if kind in ("deltacells_global", "deltacells_malloc") and w != 0:
                    continue
                if kind.startswith("deltacells_fresh") and w == 0:
                    continue
                cfgs.append(dict({"kind": kind, "batch_size": bs, "db": db, "workers": w,
                                  "prefetch_tiles": a.prefetch_tiles, "epochs": a.epochs, "panel": panel,
                                  "where": a.where}, **extra))
        if a.read:
            for cfg in cfgs:
                cfg["read"] = True
        runs = {i: [] for i in range(len(cfgs))}
        for rep in range(max(1, a.repeat)):
            for i, cfg in enumerate(cfgs):
                if rep and cfg["kind"] in ("anndata_mem", "anndata_backed"):
                    continue              # far from the loader: once is enough
                r = run_child(cfg)
                runs[i].append(r)
                if not a.json:
                    show(r)
        for i in range(len(cfgs)):
            results.append(median_run(runs[i]))
        cfg = {"kind": "breakdown", "batch_size": bs, "db": db, "workers": 0,
               "obs": [c for c in a.obs.split(",") if c], "panel": panel, "where": a.where}
        results.append(run_child(cfg))
        if not a.json:
            show_breakdown(results[-1])
        for w in workers:
            if w:
                results.append(run_child(dict(cfg, workers=w, prefetch_tiles=a.prefetch_tiles)))
                if not a.json:
                    show_breakdown(results[-1])
    summary = summarize(results)
    if a.json:
        print(json.dumps({"results": results, "summary": summary}, indent=1))
    else:
        print()
        for line in summary["lines"]:
            print(line)
    return 0


def median_run(rs):
    """The run with the median cells/s (its peers' in `all_cells_per_s`); first_s and
    rss_mb are the medians of their own."""
    ok = [r for r in rs if "error" not in r]
    if not ok:
        return rs[0]
    ok.sort(key=lambda r: r["cells_per_s"])
    med = dict(ok[(len(ok) - 1) // 2])
    med["all_cells_per_s"] = [r["cells_per_s"] for r in rs if "error" not in r]
    med["runs"] = len(rs)
    for k in ("first_s", "rss_mb", "pss_mb"):     # each field's own median
        v = sorted(r[k] for r in ok)
        med[k] = v[(len(v) - 1) // 2]
    return med


def show_breakdown(r):
    if "error" in r:
        print(f"breakdown bs={r['batch_size']} ERROR {r['error']}")
        return
    st = r["stages_ms"]
    if r.get("workers"):
        print(f"per-batch breakdown, batch {r['batch_size']}, {r['workers']} workers "
              f"({r['batches']} batches, {r['wall_ms']:.1f} ms per batch of wall time; worker "
              f"stages are per batch of one worker, {r['workers']} run at once):")
        for k, label in STAGES:
            if k in st:
                print(f"  worker: {label:54s} {st[k]:8.2f} ms")
        for k, v in r["main_ms"].items():
            print(f"  main:   {k:54s} {v:8.2f} ms")
        if "received" in r:
            print(f"  main:   arrays received: {r['received']['mapped']} mapped from the workers' "
                  f"lanes, {r['received']['copied']} copied (the rest came torch's way)")
        return
    print(f"per-batch breakdown, batch {r['batch_size']}, 0 workers, no prefetch "
          f"({r['batches']} batches, {r['wall_ms']:.1f} ms per batch in all):")
    for k, label in STAGES:
        if k in st:
            print(f"  {label:62s} {st[k]:8.2f} ms  {100 * st[k] / r['wall_ms']:5.1f}%")
    other = r["wall_ms"] - sum(st.get(k, 0) for k, _ in STAGES if not k.startswith("ext_"))
    print(f"  {'the rest (the loop, the plan, the last_batch query)':62s} {other:8.2f} ms")


def show(r):
    if "error" in r:
        print(f"{r['kind']:17s} bs={r['batch_size']:5d} ERROR {r['error']}")
        return
    extra = f" workers={r['workers']}" if r["kind"].startswith("deltacells") else ""
    print(f"{r['kind']:17s} bs={r['batch_size']:5d}{extra:11s} {r['cells_per_s']:10,.0f} cells/s  "
          f"first batch {r['first_s']:6.3f} s  peak RSS {r['rss_mb']:7.0f} MB (PSS {r['pss_mb']:6.0f})",
          flush=True)


def summarize(results):
    lines = []
    out = {"lines": lines}
    for bs in sorted({r["batch_size"] for r in results}):
        ok = [r for r in results if r["batch_size"] == bs and "error" not in r
              and r["kind"] != "breakdown"]
        base = {r["kind"]: r for r in ok if not r["kind"].startswith("deltacells")}
        w0 = {r["kind"]: r for r in ok if r["kind"].startswith("deltacells") and r["workers"] == 0}
        for r in ok:
            if not r["kind"].startswith("deltacells"):
                continue
            ratios = {k: r["cells_per_s"] / b["cells_per_s"] for k, b in base.items()}
            if r["workers"] and r["kind"] in w0:
                ratios["same loader, 0 workers"] = r["cells_per_s"] / w0[r["kind"]]["cells_per_s"]
            zero = "deltacells_before" if r["kind"].endswith("_before") else "deltacells"
            if r["kind"].startswith("deltacells_fresh") and zero in w0:
                ratios["0 workers"] = r["cells_per_s"] / w0[zero]["cells_per_s"]
            if r["kind"] == "deltacells_fresh":
                lanes = [b for b in ok if b["kind"] == "deltacells_fresh_lanes"
                         and b["workers"] == r["workers"]]
                if lanes:
                    ratios["handed over through lanes"] = r["cells_per_s"] / lanes[0]["cells_per_s"]
            if r["kind"].startswith("deltacells_map"):
                cd = [b for b in ok if b["kind"] == "deltacells" and b["workers"] == r["workers"]]
                if cd:
                    ratios["CellDataset"] = r["cells_per_s"] / cd[0]["cells_per_s"]
            if r["kind"] == "deltacells_map":
                sh = [b for b in ok if b["kind"] == "deltacells_map_shuffled" and b["workers"] == r["workers"]]
                if sh:
                    ratios["DataLoader(shuffle=True)"] = r["cells_per_s"] / sh[0]["cells_per_s"]
            if r["kind"] == "deltacells_malloc" and "deltacells" in w0:
                ratios["deltacells, malloc untouched"] = r["cells_per_s"] / w0["deltacells"]["cells_per_s"]
            bef = [b for b in ok if b["kind"] == r["kind"] + "_before" and b["workers"] == r["workers"]]
            if r["kind"] in ("deltacells", "deltacells_fresh") and bef:
                ratios["before"] = r["cells_per_s"] / bef[0]["cells_per_s"]
                r["first_vs_before"] = r["first_s"] / bef[0]["first_s"]
                r["rss_vs_before"] = r["rss_mb"] / bef[0]["rss_mb"]
            key = f"bs{bs}_{r['kind']}_w{r['workers']}"
            out[key] = {"cells_per_s": r["cells_per_s"], "rss_mb": r["rss_mb"],
                        "first_s": r["first_s"], "ratios": ratios}
            rs = ", ".join(f"{v:.2f}x {k}" for k, v in ratios.items())
            runs = f" (median of {r['runs']})" if r.get("runs", 1) > 1 else ""
            lines.append(f"{r['kind']} batch {bs}, {r['workers']} workers{runs}: {r['cells_per_s']:,.0f} "
                         f"cells/s = {rs}; peak RSS {r['rss_mb']:.0f} MB; first batch "
                         f"{r['first_s']:.3f} s")
            ep, cep = r.get("epoch_cells_per_s", []), base.get("ceiling", {}).get("epoch_cells_per_s", [])
            if len(ep) > 1 and len(cep) > 1:      # the cold first epochs against each other
                out[key]["first_epoch_vs_ceiling"] = ep[0] / cep[0]
                lines.append(f"  first epoch (fresh process and memory): {ep[0]:,.0f} cells/s = "
                             f"{ep[0] / cep[0]:.2f}x the ceiling's first ({cep[0]:,.0f})")
            if "first_vs_before" in r:
                lines.append(f"  vs before: first batch {r['first_vs_before']:.2f}x, "
                             f"peak RSS {r['rss_vs_before']:.2f}x")
            if bs == 5000 and "ceiling" in ratios and r["kind"] == "deltacells":
                lines.append(
                    f"  targets: >= 3x ceiling: {'met' if ratios['ceiling'] >= 3 else 'NOT met'} "
                    f"({ratios['ceiling']:.2f}x); RSS <= 1.5 GB: "
                    f"{'met' if r['rss_mb'] <= 1536 else 'NOT met'} ({r['rss_mb'] / 1024:.2f} GB); "
                    f"first batch <= 0.3 s: {'met' if r['first_s'] <= 0.3 else 'NOT met'} "
                    f"({r['first_s']:.3f} s)")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
