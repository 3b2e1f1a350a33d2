"""A stamp's check reads /proc/PID/stat once, and says what psutil says (which it falls back to)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from accelkit.runtime import process_stamp
from accelkit.runtime.process_stamp import ProcessStamp


@pytest.fixture(params=["proc", "psutil"])
def way(request, monkeypatch) -> str:
    """Each check made from /proc, and again with /proc unable to say (psutil asked)."""
    if request.param == "psutil":
        monkeypatch.setattr(process_stamp, "_proc_stat", lambda _pid: None)
    return str(request.param)


def _zombie() -> tuple[subprocess.Popen[bytes], ProcessStamp]:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stamp = ProcessStamp.of(child.pid)
    assert stamp is not None
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped
        time.sleep(0.01)
    return child, stamp


def test_both_ways_tell_live_reused_zombie_and_gone_apart(way):
    me = ProcessStamp.of(os.getpid())
    assert me is not None
    assert me.is_running()
    assert not ProcessStamp(os.getpid(), "1").is_running()  # the pid, another start time
    child, stamp = _zombie()
    assert not stamp.is_running()
    child.wait()
    assert not stamp.is_running()


def test_the_start_time_read_from_proc_is_psutils():
    state, created = process_stamp._proc_stat(os.getpid()) or ("?", 0.0)
    assert state in ("R", "S")
    assert abs(created - psutil.Process().create_time()) < 0.05


def test_a_pid_proc_will_not_show_is_asked_of_psutil(monkeypatch):
    """A /proc mounted with hidepid: the file cannot be read; psutil decides."""
    real_open = open

    def hidden(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith("/proc/") and str(path).endswith("/stat"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    me = ProcessStamp.of(os.getpid())
    assert me is not None
    monkeypatch.setattr(process_stamp, "open", hidden, raising=False)  # this module's reads
    assert process_stamp._proc_stat(os.getpid()) is None
    assert me.is_running()
    assert not ProcessStamp(os.getpid(), "1").is_running()


def test_an_unparsable_stat_line_is_asked_of_psutil(monkeypatch, tmp_path):
    bad = tmp_path / "stat"
    bad.write_bytes(b"12 (odd) S 1")
    real_open = open
    monkeypatch.setattr(process_stamp, "open", lambda _path, *a: real_open(bad, *a), raising=False)
    assert process_stamp._proc_stat(os.getpid()) is None


def test_a_stamp_made_from_proc_is_psutils_to_the_digit():
    """Stamps recorded by a version that asked psutil still match, and the other way round."""
    stamp = ProcessStamp.of(os.getpid())
    assert stamp is not None
    assert stamp.start_time == repr(psutil.Process().create_time())
    assert process_stamp._boot_time() == psutil.boot_time()


def test_a_gone_pid_has_no_stamp_either_way(way):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert ProcessStamp.of(child.pid) is None


def test_stamping_and_checking_a_process_leave_psutil_unimported():
    """psutil stays the fallback; a command that only stamps processes does not import it."""
    code = (
        "import os, sys\n"
        "from accelkit.runtime.process_stamp import ProcessStamp\n"
        "stamp = ProcessStamp.of(os.getpid())\n"
        "assert stamp is not None and stamp.is_running()\n"
        "assert ProcessStamp.of(2**22 + 1) is None\n"
        "print('psutil' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
