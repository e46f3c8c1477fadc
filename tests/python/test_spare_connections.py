"""A finished reader's connection serves the next reader of the same file (the next epoch):
the extension's decoder threads and tile buffers stay warm instead of being faulted in again.

Checked here: two epochs share one connection; a file converted again and renamed over the
path is read afresh (the old connection is closed, not used); an append in place between
epochs is seen; a forked child never takes (nor closes) its parent's; a reader that failed
inside SQLite does not leave its connection for the next."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import CONVERTER, gen  # noqa: E402

import deltacells  # noqa: E402
from deltacells import _core  # noqa: E402


def spares(path):
    with _core._spare_cons_lock:
        return [c for k, _, c in _core._spare_list() if k[0] == str(path)]


def epoch(ds):
    cells, total = [], 0
    for b in ds:
        cells.append(b["cell_id"].numpy())
        total += int(b["X"].values().sum())
    return np.sort(np.concatenate(cells)), total


def first_epoch(path, batch_size):
    """A dataset, its first epoch (cells, total count), and the one connection it left kept."""
    ds = deltacells.CellDataset(str(path), batch_size=batch_size)
    first = epoch(ds)
    kept = spares(path)
    assert len(kept) == 1
    return ds, first, kept


@pytest.fixture()
def files(tmp_path):
    a_h5, a = gen(tmp_path, 1500, 200, 21, 400)
    b_h5, b = gen(tmp_path, 900, 200, 22, 400)
    return tmp_path, a_h5, a, b_h5, b


def test_the_next_epoch_takes_the_last_epochs_connection(files):
    d, _, a, _, _ = files
    ds, first, kept = first_epoch(a, 256)
    ds.set_epoch(1)
    it = iter(ds)
    next(it)                                  # the prefetch thread has taken it
    assert spares(a) == []
    rest = [b["cell_id"].numpy() for b in it]
    assert spares(a) == kept                  # and given it back
    assert len(np.concatenate(rest)) + 256 == 1500
    cells, tot = epoch(ds)                    # the same cells and counts through it
    np.testing.assert_array_equal(cells, first[0])
    assert tot == first[1]


def test_a_file_converted_again_over_the_path_is_read_afresh(files):
    d, _, a, b_h5, _ = files
    path = d / "moving.dcdb"
    shutil.copy(a, path)
    _, (_, tot_a), old = first_epoch(path, 300)
    subprocess.run([str(CONVERTER), "convert", str(b_h5), "-o", str(path), "--force", "--quiet",
                    "--tile-cells", "400"], check=True)
    cells, tot = epoch(deltacells.CellDataset(str(path), batch_size=300))
    assert len(cells) == 900 and tot != tot_a
    assert old[0] not in spares(path)         # the old file's connection was closed, not used


def test_an_append_between_epochs_is_seen(files):
    d, a_h5, a, b_h5, b = files
    path = d / "growing.dcdb"
    shutil.copy(a, path)
    _, (_, tot_a), _ = first_epoch(path, 300)
    subprocess.run([str(CONVERTER), "append", str(path), str(b_h5), "--quiet"], check=True)
    cells, tot = epoch(deltacells.CellDataset(str(path), batch_size=300))
    _, tot_b = epoch(deltacells.CellDataset(str(b), batch_size=300))
    assert len(cells) == 2400 and tot == tot_a + tot_b
    assert subprocess.run([str(CONVERTER), "verify", str(path), "--quiet"]).returncode == 0


def test_a_forked_child_neither_takes_nor_closes_the_parents(files):
    d, _, a, _, _ = files
    ds, first, kept = first_epoch(a, 500)
    pid = os.fork()
    if pid == 0:                               # the child: its own connection, the parent's left alone
        code = 1
        try:
            cells, tot = epoch(ds)
            code = 0 if (len(cells) == 1500 and tot == first[1] and kept[0] not in spares(a)) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert spares(a) == kept
    cells, tot = epoch(ds)                     # the parent's still works
    assert tot == first[1]


def test_a_reader_that_failed_does_not_leave_its_connection(files, tmp_path):
    d, _, a, _, _ = files
    bad = tmp_path / "bad.dcdb"
    shutil.copy(a, bad)
    import sqlite3
    con = sqlite3.connect(bad)
    blob = con.blobopen("tiles_data", "data", 1)
    blob.seek(len(blob) // 2)
    x = blob.read(16)
    blob.seek(len(blob) // 2)
    blob.write(bytes(v ^ 0x5A for v in x))
    blob.close()
    con.commit()
    con.close()
    ds = deltacells.CellDataset(str(bad), batch_size=300, shuffle=False)
    with pytest.raises(Exception, match="checksum"):
        epoch(ds)
    assert spares(bad) == []


def test_giving_back_from_a_destructor_never_waits_for_the_lock(files):
    """An iterator's __del__ (close(wait=False)) may run wherever the collector does, even on a
    thread that holds the spares' lock: it closes its connection instead of waiting (a wait there
    would never end); a plain give keeps it."""
    import sqlite3
    path = str(files[2])
    con = _core.take_connection(path)
    with _core._spare_cons_lock:
        _core.give_connection(con, path, wait=False)        # returns at once
    with pytest.raises(sqlite3.ProgrammingError):
        con.execute("SELECT 1")
    assert all(c is not con for c in spares(path))
    con = _core.take_connection(path)
    _core.give_connection(con, path)
    assert any(c is con for c in spares(path))


@pytest.mark.parametrize("change", ["converted again", "appended to"])
def test_a_dataset_object_refuses_another_version(files, change):
    """A CellDataset (or CellMapDataset) made before its file was converted again or appended to
    read the new version's batches through the old version's plan: a mix (a remote dataset
    replaced on the server gave cells outside `where`).  Its next reader now refuses, naming
    what changed, in this process and in DataLoader workers; a new object reads the new one."""
    import torch
    d, a_h5, a, b_h5, _ = files
    path = d / "changing.dcdb"
    shutil.copy(a, path)
    ds = deltacells.CellDataset(str(path), batch_size=300)
    mp = deltacells.CellMapDataset(str(path))
    epoch(ds)
    if change == "converted again":
        subprocess.run([str(CONVERTER), "convert", str(a_h5), "-o", str(path), "--force", "--quiet",
                        "--tile-cells", "400"], check=True)
    else:
        subprocess.run([str(CONVERTER), "append", str(path), str(b_h5), "--quiet"], check=True)
    with pytest.raises(RuntimeError, match="the dataset changed since this dataset object was made"):
        epoch(ds)
    with pytest.raises(RuntimeError, match=r"dc_meta\.(dataset_id|n_cells)"):
        mp[0]
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=120)
    with pytest.raises(RuntimeError, match="the dataset changed"):
        for _ in loader:
            pass
    cells, _ = epoch(deltacells.CellDataset(str(path), batch_size=300))
    assert len(cells) == (1500 if change == "converted again" else 2400)
