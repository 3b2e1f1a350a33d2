"""The note ``accelkit release`` leaves the process that runs a workload (real files)."""

from __future__ import annotations

import os

from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.workload.release_notes import drop_release_note, note_release, take_release_note


def _me() -> ProcessStamp:
    stamp = ProcessStamp.of(os.getpid())
    assert stamp is not None
    return stamp


def test_the_owner_takes_its_note_once(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    note_release(state, _me(), "accelkit release (pid 1, uid 0)")
    assert take_release_note(state) == "accelkit release (pid 1, uid 0)"
    assert take_release_note(state) is None
    assert list((state / "released").iterdir()) == []


def test_a_note_for_an_earlier_process_of_the_same_pid_is_not_taken(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    earlier = ProcessStamp(os.getpid(), "12.5")
    note_release(state, earlier, "accelkit release (pid 1, uid 0)")
    assert take_release_note(state) is None


def test_without_a_note_or_a_state_dir_there_is_nothing_to_say(tmp_path):
    assert take_release_note(tmp_path / "missing") is None
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    assert take_release_note(state) is None
    note_release(tmp_path / "missing", _me(), "x")  # nowhere to write: nothing happens


def test_a_dropped_note_is_gone(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    note_release(state, _me(), "accelkit release (pid 1, uid 0)")
    drop_release_note(state, _me())
    assert take_release_note(state) is None
