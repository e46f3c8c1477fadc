"""Running a Python subprocess that might hang (forked DataLoader workers, threads across a
fork): in its own process group with faulthandler on, so that on a timeout every Python
process of the group, workers included, first prints the stacks of its threads (SIGABRT), then
the group is killed and the test fails with that output: a hang that happens once in many runs
says where it waited."""
import os
import signal
import subprocess

import pytest


def run_python(argv, env, timeout, what="subprocess"):
    """(return code, output) of argv run with env; a timeout fails the test with the stacks."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=dict(env, PYTHONFAULTHANDLER="1"), start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(p.pid, signal.SIGABRT)     # faulthandler: each process prints its stacks
        try:
            out, _ = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        _signal_group(p.pid, signal.SIGKILL)     # a worker that outlived the main process
        pytest.fail(f"{what} HUNG (no exit within {timeout} s); its output, then each process's "
                    "threads' stacks:\n" + out.decode(errors="replace")[-20000:])
    return p.returncode, out.decode(errors="replace")


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
