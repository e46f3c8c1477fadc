"""Temporary files of the converter (issue 12 case 7): SIGKILL during a convert leaves
`.OUT.tmp-XXXXXX` beside OUT; the next convert to the same OUT removes every such file whose
writer is gone, and leaves alone one whose writer still holds its lock."""
import fcntl
import os
import signal
import subprocess
import time

import pytest

from _cells_data import CONVERTER, ROOT, need_build


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tempfiles")
    small, big = d / "small.h5ad", d / "big.h5ad"
    for p, cells, genes in ((small, 300, 100), (big, 20000, 3000)):
        subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", str(cells), "--genes",
                        str(genes), "--seed", "2", "-o", str(p)], check=True, capture_output=True, timeout=600)
    return small, big


def temps(out):
    return sorted(n for n in os.listdir(out.parent) if n.startswith(f".{out.name}.tmp-"))


def convert(src, out, *opts):
    need_build()
    return subprocess.run([str(CONVERTER), "convert", str(src), "-o", str(out), "--quiet", *opts],
                          capture_output=True, text=True, timeout=600)


def test_sigkill_leftovers_removed_by_the_next_convert(inputs, tmp_path):
    small, big = inputs
    out = tmp_path / "k.dcdb"
    kills = 0
    for i in range(20):
        # --threads 1 and small tiles: the writer spends long in the write phase
        p = subprocess.Popen([str(CONVERTER), "convert", str(big), "-o", str(out), "--quiet", "--force",
                              "--threads", "1", "--tile-cells", "500"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not temps(out) and p.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(0.02 * (i % 5))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait(timeout=60)
    assert kills >= 15
    left = temps(out)
    assert left, "SIGKILL left no temporary file to clean up (the test did not kill in the write phase)"
    r = convert(small, out, "--force")
    assert r.returncode == 0, r.stderr
    assert temps(out) == [], temps(out)
    assert out.exists()


def test_live_writer_file_is_left_alone(inputs, tmp_path):
    small, _ = inputs
    out = tmp_path / "live.dcdb"
    stale = tmp_path / f".{out.name}.tmp-AbC123"
    live = tmp_path / f".{out.name}.tmp-XyZ789"
    other = tmp_path / f".other.dcdb.tmp-AbC123"          # another output's: not ours to touch
    orphan = tmp_path / f".{out.name}.tmp-QqQ111-journal"   # a journal whose database is gone
    for p in (stale, live, other, orphan):
        p.write_bytes(b"x" * 100)
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)                           # as a running writer holds it
    try:
        r = convert(small, out)
        assert r.returncode == 0, r.stderr
        assert not stale.exists() and not orphan.exists()
        assert live.exists() and other.exists()
    finally:
        os.close(fd)
    r = convert(small, out, "--force")
    assert r.returncode == 0, r.stderr
    assert not live.exists() and other.exists()
    assert temps(out) == []


def test_help_does_not_promise_what_sigkill_cannot_keep():
    need_build()
    h = subprocess.run([str(CONVERTER), "convert", "--help"], capture_output=True, text=True).stdout
    assert "SIGKILL" in h and "next convert to the same OUT removes it" in h
    assert "leaves no partial\ndataset and no temporary file" not in h
