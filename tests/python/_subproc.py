"""Running a Python subprocess that might hang (forked DataLoader workers, threads across a
fork): in its own process group with faulthandler on, so that on a timeout every Python
process of the group, workers included, first prints the stacks of its threads (SIGABRT), then
the group is killed and the test fails with that output: a hang that happens once in many runs
says where it waited.  (Under ASan, see run_python.)"""
import os
import shutil
import signal
import subprocess
import tempfile
import warnings

import pytest


def run_python(argv, env, timeout, what="subprocess"):
    """(return code, output) of argv run with env; a timeout fails the test with the stacks.
    Under ASan (libasan preloaded) a hang gets one more run before it fails: ASan's allocator
    is not fork-safe with other threads running (tests/c/test_pool_fork.c skips its fork under
    a running job there), so a fork can deadlock the child; the plain build's runs, which get
    no second chance, are the check for hangs."""
    tries = 2 if "libasan" in env.get("LD_PRELOAD", "") else 1
    hung = ""
    for t in range(tries):
        rc, out = _run_once(argv, env, timeout)
        if rc is not None:
            if t:
                warnings.warn(f"{what}: hung under ASan once, then passed:\n{hung[-4000:]}")
            return rc, out
        hung = out
    pytest.fail(f"{what} HUNG (no exit within {timeout} s{', twice' if tries > 1 else ''}); its output, "
                "then each process's threads' stacks:\n" + hung[-20000:])


def _run_once(argv, env, timeout):
    """(return code, output), or (None, output with the stacks) after a timeout.  The
    subprocess gets a temporary directory of its own as TMPDIR (unless the caller chose one),
    removed afterwards: what its processes leave there (multiprocessing's pymp-* directories
    of DataLoader workers killed at exit or ended with os._exit) does not pile up in /tmp."""
    tmp = None
    if env.get("TMPDIR") == os.environ.get("TMPDIR"):
        tmp = tempfile.mkdtemp(prefix="dc-subproc-")
        env = dict(env, TMPDIR=tmp)
    try:
        return _run_in(argv, env, timeout)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run_in(argv, env, timeout):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=dict(env, PYTHONFAULTHANDLER="1"), start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        _signal_group(p.pid, signal.SIGABRT)     # faulthandler: each process prints its stacks
        try:
            out, _ = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        _signal_group(p.pid, signal.SIGKILL)     # a worker that outlived the main process
        return None, out.decode(errors="replace")


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
