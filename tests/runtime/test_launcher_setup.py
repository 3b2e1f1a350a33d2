"""The launcher's setup: sent ahead of the plan, while the booking and the hooks run, it joins
the workload's cgroups and contains the launcher; read whole however it arrives, refused when
malformed, and reported like the plan's own failures."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.runtime import launcher
from accelkit.runtime.launcher import PlanError, encode_plan, encode_setup, split_setup
from accelkit.runtime.process_tree import ProcessTree
from accelkit.runtime.render.process import ProcessPlan

from .launcher_pipes import finish_launcher, start_launcher

_PATH = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20)


@given(procs=st.lists(_PATH, max_size=5), contain=st.booleans(), rest=st.binary(max_size=20))
def test_a_setup_splits_off_exactly_as_encoded_and_no_part_of_it_is_taken_for_whole(
    procs, contain, rest
):
    setup = encode_setup(procs, contain=contain)
    assert split_setup(setup + rest) == ([os.fsencode(p) for p in procs], contain, rest)
    for cut in range(1, len(setup)):
        assert split_setup(setup[:cut]) is None


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"\0x\0\0", "expected a count"), (b"\x000\0yes\0", "bad containment flag")],
)
def test_a_malformed_setup_is_refused(data, why):
    with pytest.raises(PlanError, match=why):
        split_setup(data)


def test_a_nul_in_a_cgroup_path_is_refused_when_encoding():
    with pytest.raises(ValueError, match="NUL"):
        encode_setup(["/sys/fs/cgroup/a\0b/tasks"])


def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.01)


def test_the_setup_is_done_before_the_plan_comes_and_the_plan_then_runs(tmp_path: Path):
    joined = tmp_path / "tasks"  # a file the launcher writes 0 to, as it joins a cgroup
    joined.write_text("")
    process, plan_w, status_r = start_launcher()
    os.write(plan_w, encode_setup([str(joined)]))
    _until(lambda: joined.read_text() == "0", "joined while waiting for the plan")
    os.write(plan_w, encode_plan(["echo", "ran"], {"PATH": os.defpath}))
    assert finish_launcher(process, plan_w, status_r) == (0, "ran\n", "")


@pytest.mark.parametrize("split", [1, 3, None])
def test_a_setup_and_plan_read_in_any_pieces_run(tmp_path: Path, split: int | None):
    joined = tmp_path / "tasks"
    joined.write_text("")
    data = encode_setup([str(joined)]) + encode_plan(["echo", "ran"], {"PATH": os.defpath})
    process, plan_w, status_r = start_launcher()
    for start in range(0, len(data), split or len(data)):
        os.write(plan_w, data[start : start + (split or len(data))])
    assert finish_launcher(process, plan_w, status_r) == (0, "ran\n", "")
    assert joined.read_text() == "0"


def test_a_cgroup_the_setup_cannot_join_is_reported_with_125(tmp_path: Path):
    missing = tmp_path / "missing" / "tasks"
    process, plan_w, status_r = start_launcher()
    os.write(plan_w, encode_setup([str(missing)]) + encode_plan(["true"], {}))
    status, _, message = finish_launcher(process, plan_w, status_r)
    assert status == launcher.EXIT_FAILED
    assert message.startswith("125 setup: ")
    assert "No such file or directory" in message


def test_a_malformed_setup_is_reported_with_125():
    process, plan_w, status_r = start_launcher()
    os.write(plan_w, b"\0x\0\0")
    assert finish_launcher(process, plan_w, status_r) == (
        125,
        "",
        "125 plan: expected a count, got b'x'",
    )


@pytest.mark.parametrize("sent", [b"\x001\0", encode_setup()], ids=["part", "whole"])
def test_a_setup_with_no_plan_after_it_runs_nothing(sent: bytes):
    process, plan_w, status_r = start_launcher()
    os.write(plan_w, sent)
    assert finish_launcher(process, plan_w, status_r) == (launcher.EXIT_ABORTED, "", "")


def test_a_prepared_tree_sends_its_plan_without_cgroups_and_a_setup_only_once(tmp_path: Path):
    joined = tmp_path / "tasks"
    joined.write_text("")
    tree = ProcessTree.spawn()
    tree.prepare([str(joined)])
    tree.prepare([str(tmp_path / "never" / "tasks")])  # sent once: this one is not
    # the plan's own cgroups are left out: the launcher joined the setup's already
    tree.launch(["true"], ProcessPlan(env={"PATH": os.defpath}), [str(tmp_path / "x" / "tasks")])
    assert asyncio.run(tree.wait()) == 0
    assert joined.read_text() == "0"


def test_an_aborted_tree_is_sent_no_setup():
    tree = ProcessTree.spawn()
    tree.abort()
    tree.prepare(["/nonexistent/tasks"])  # nothing to write to: no error
    assert asyncio.run(tree.wait()) == launcher.EXIT_ABORTED
