"""DataLoader workers hand batches over through reused slots (python/deltacells/_xfer.py):
the main process copies each array once from the worker (process_vm_readv) and frees the
slot.  Every scenario runs in a subprocess with a timeout (workers are forked there), so
a hang fails instead of blocking the suite."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT, gen  # noqa: E402

TIMEOUT = 120
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "python"))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    # 1,500 cells in 6 tiles, 300 genes
    return str(gen(tmp_path_factory.mktemp("py_workers"), 1500, 300, 7, 250)[1])


def run(code, db, env=None, timeout=TIMEOUT):
    p = subprocess.Popen([PY, "-c", textwrap.dedent(code), db], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=env or ENV, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"HUNG (no exit within {timeout} s):\n{out.decode(errors='replace')[-3000:]}")
    out = out.decode(errors="replace")
    assert p.returncode == 0, out[-3000:]
    return out


SAME = """
    import sys, numpy as np, torch
    from torch.utils.data import DataLoader
    import deltacells
    from deltacells import _xfer
    db = sys.argv[1]
    def batches(workers, **kw):
        ds = deltacells.CellDataset(db, batch_size=100, seed=3, obs=["cell_type"], **kw)
        out = []
        for b in DataLoader(ds, batch_size=None, num_workers=workers,
                            multiprocessing_context="fork" if workers else None):
            out.append(b)                     # every batch kept: slots must not be reused under it
        return out
    def dense(X):
        if isinstance(X, deltacells.CSRBatch):
            X = X.to_sparse_csr()
        return X.to_dense()
    for kw in ({}, {"output": "csr_parts"}, {"dtype": torch.int16}, {"dtype": torch.int32}):
        ref = batches(0, **kw)
        got = batches(2, **kw)
        key = lambda b: int(b["cell_id"][0])
        ref.sort(key=key); got.sort(key=key)
        assert len(ref) == len(got) and len(ref) >= 10, (len(ref), len(got))
        for r, g in zip(ref, got):
            assert torch.equal(r["cell_id"], g["cell_id"])
            assert torch.equal(r["cell_type"], g["cell_type"])
            assert dense(g["X"]).dtype == dense(r["X"]).dtype
            assert torch.equal(dense(r["X"]), dense(g["X"])), kw
    print("copied", COPIED_CHECK)
    print("ok")
"""


def test_two_workers_deliver_the_same_batches_through_slots(db):
    if not sys.platform.startswith("linux"):
        pytest.skip("the slot hand-off is Linux only (process_vm_readv)")
    code = SAME.replace("COPIED_CHECK", "_xfer._pool['pool'] is not None and "
                        "len(_xfer._pool['pool']._bufs) > 0")
    out = run(code, db)
    assert "ok" in out.splitlines()[-1], out
    avail = run("import deltacells._xfer as x; print(x.available())", db).strip().splitlines()[-1]
    if avail == "True":
        # the batches really came through the receiving pool (not torch's shared memory)
        assert "copied True" in out, out
    else:
        assert "copied False" in out, out


def test_torch_path_when_turned_off(db):
    env = dict(ENV, DELTACELLS_WORKER_COPY="0")
    code = SAME.replace("COPIED_CHECK", "_xfer._pool['pool'] is not None")
    out = run(code, db, env=env)
    assert "copied False" in out and out.strip().endswith("ok"), out


def test_slots_are_freed_by_the_receiver_or_when_unsent(db):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    code = """
        import os, pickle, sys, numpy as np, torch
        import deltacells
        from deltacells import _xfer, _core
        from deltacells._convert import install_csr_reduction
        from multiprocessing.reduction import ForkingPickler
        assert _xfer.available()
        install_csr_reduction()
        r, w = os.pipe()
        back_r, back_w = os.pipe()   # the worker's checks are done: the receiver may copy (and free)
        pid = os.fork()
        if pid == 0:                                   # the "worker"
            slots = _xfer.WorkerSlots(_core.BufferPool(), max_slots=6)
            a, b, c = slots.take_batch(3, 5, np.float32)
            a[:] = [0, 2, 4, 5]; b[:] = [1, 2, 3, 4, 0]; c[:] = [1.5, 2, 3, 4, 5]
            busy = int((slots.ctrl != 0).sum())
            t = [torch.from_numpy(x) for x in (a, b, c)]
            data = bytes(ForkingPickler.dumps(t))
            del a, b, c, t
            os.write(w, len(data).to_bytes(8, "little") + data)
            # unsent arrays free their slots when dropped
            d = slots.take_batch(1, 1, np.int32)
            assert int((slots.ctrl != 0).sum()) == 6, slots.ctrl
            del d
            assert int((slots.ctrl != 0).sum()) == 3, slots.ctrl
            # every slot busy: plain buffers (torch's way), not a failure
            e = slots.take_batch(1, 1, np.int32)
            f = slots.take_batch(1, 1, np.int32)
            assert slots.fallbacks == 1 and slots.find(f[0].ctypes.data, 4) is None
            os.write(back_w, b"x")
            import time
            for _ in range(500):                       # the receiver frees the sent ones
                if int((slots.ctrl != 0).sum()) == 3:
                    break
                time.sleep(0.01)
            print("worker", busy, int((slots.ctrl != 0).sum()), flush=True)
            os._exit(0)
        n = int.from_bytes(os.read(r, 8), "little")
        data = b""
        while len(data) < n:
            data += os.read(r, n - len(data))
        os.read(back_r, 1)      # (receiving frees the sent slots: the worker counts them busy first)
        t = pickle.loads(data)
        assert t[0].tolist() == [0, 2, 4, 5] and t[1].tolist() == [1, 2, 3, 4, 0]
        assert t[2].tolist() == [1.5, 2, 3, 4, 5] and t[2].dtype == torch.float32
        _, st = os.waitpid(pid, 0)
        assert st == 0, st
        print("ok")
    """
    out = run(code, db)
    assert "worker 3 3" in out and out.strip().endswith("ok"), out


def test_worker_threads_share_the_cores(monkeypatch):
    sys.path.insert(0, str(ROOT / "python"))
    from deltacells.dataset import worker_threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    assert [worker_threads(n) for n in (1, 2, 3, 4, 6, 12)] == [6, 3, 2, 1, 1, 1]


def test_a_worker_reads_with_its_share_of_threads_and_no_prefetch_thread(db):
    code = """
        import sys, os, torch
        from torch.utils.data import DataLoader, IterableDataset
        import deltacells
        from deltacells.dataset import worker_threads
        class Probe(IterableDataset):
            def __init__(self, ds): self.ds = ds
            def __iter__(self):
                with iter(self.ds) as it:
                    b = next(it)
                    th = it._con.execute("SELECT dc_config('threads')").fetchone()[0]
                    yield {"threads": th, "prefetch_thread": it._prod is not None,
                           "expect": worker_threads(2), "n": len(b["cell_id"])}
        ds = deltacells.CellDataset(sys.argv[1], batch_size=100, prefetch_tiles=2)
        got = list(DataLoader(Probe(ds), batch_size=None, num_workers=2,
                              multiprocessing_context="fork"))
        assert len(got) == 2, got
        for g in got:
            assert g["threads"] == g["expect"] and not g["prefetch_thread"] and g["n"] == 100, g
        # in the main process the same dataset reads ahead in a thread
        with iter(ds) as it:
            next(it)
            assert it._prod is not None
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out


def test_workers_own_whole_windows_and_the_last_one_takes_every_core(db):
    # 6 tiles of 250 cells, window 2, batches of 100: windows start at batches 0, 5, 10 of
    # 15; 2 workers get batches [0, 5) and [5, 15) (whole windows, no tile read by both),
    # and the second, alone for its last 5 batches, decodes them with both cores
    code = """
        import sys, torch
        from torch.utils.data import DataLoader, IterableDataset, get_worker_info
        import deltacells, deltacells.dataset as D
        D._cores = lambda: 2
        class Probe(IterableDataset):
            def __init__(self, ds): self.ds = ds
            def __iter__(self):
                w = get_worker_info().id
                with iter(self.ds) as it:
                    for b in it:
                        th = it._con.execute("SELECT dc_config('threads')").fetchone()[0]
                        tiles = sorted(set((b["cell_id"] // 250).tolist()))
                        yield {"w": w, "threads": th, "tiles": tiles, "ids": b["cell_id"]}
        ds = deltacells.CellDataset(sys.argv[1], batch_size=100, shuffle_window=2, seed=5)
        got = list(DataLoader(Probe(ds), batch_size=None, num_workers=2,
                              multiprocessing_context="fork", timeout=60))
        ids = torch.cat([g["ids"] for g in got])
        assert len(got) == 15 and len(ids) == 1500 and len(set(ids.tolist())) == 1500
        per = {w: [g for g in got if g["w"] == w] for w in (0, 1)}
        assert [len(per[0]), len(per[1])] == [5, 10], [len(per[0]), len(per[1])]
        t0 = {t for g in per[0] for t in g["tiles"]}
        t1 = {t for g in per[1] for t in g["tiles"]}
        assert not t0 & t1, (t0, t1)
        assert [g["threads"] for g in per[0]] == [1] * 5, per[0]
        assert [g["threads"] for g in per[1]] == [1] * 5 + [2] * 5, [g["threads"] for g in per[1]]
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out
