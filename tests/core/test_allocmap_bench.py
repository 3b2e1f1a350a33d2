"""The benchmark harness: registry, selection, and the W1-W4 traces' outcomes."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark traces

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[ModuleType, ModuleType, ModuleType]]:
    sys.path.insert(0, str(BENCH_DIR))
    try:
        harness = importlib.import_module("harness")
        run = importlib.import_module("run")
        run.load_workloads()
        yield harness, importlib.import_module("workloads_allocmap"), run
    finally:
        sys.path.remove(str(BENCH_DIR))


def test_every_reference_row_is_registered(bench: tuple[ModuleType, ...]) -> None:
    harness, workloads, _ = bench
    names = set(harness.registered())
    assert set(workloads.REFERENCE) <= names
    assert [b.name for b in harness.select(["W4.*"])] == [
        "W4.discrete.FILL.nohint",
        "W4.discrete.EVENLY.nohint",
        "W4.fraction.EVENLY.nohint",
        "W4.fraction.FILL.nohint",
    ]
    assert {b.name for b in harness.select(["hint-"])} == {n for n in names if "hint-" in n}


def test_registering_a_name_twice_is_refused(bench: tuple[ModuleType, ...]) -> None:
    harness = bench[0]
    with pytest.raises(ValueError, match="twice"):
        harness.add("W1.discrete.EVENLY.nohint", lambda check: None)


# Outcome counts of the full 20,000-operation traces as the reference recorded them: the trace
# is outcome-dependent, so equal counts show the generator replays it exactly.
REFERENCE_COUNTS = {
    "W1.discrete.EVENLY.nohint": (8663, 2689),
    "W1.discrete.FILL.hint-PREFER_SINGLE_NODE": (8663, 2689),
    "W2.discrete.FILL.nohint": (8412, 3191),
    "W3.fraction.EVENLY.nohint": (7193, 5625),
    "W3.fraction.FILL.nohint": (7193, 5625),
    "W4.discrete.FILL.nohint": (8823, 2370),
    "W4.fraction.EVENLY.nohint": (8823, 2370),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_COUNTS))
def test_traces_replay_exactly_with_exact_grants(bench: tuple[ModuleType, ...], name: str) -> None:
    harness = bench[0]
    row = harness.measure(harness.registered()[name], repeats=1, warmup=1)
    assert (row.ok, row.failed) == REFERENCE_COUNTS[name]
    assert row.exact is True
    assert row.ops == 20_000
    assert row.ratio is not None
    assert row.ratio > 0


def test_w3_splits_fewer_small_requests_than_the_reference(bench: tuple[ModuleType, ...]) -> None:
    harness = bench[0]
    row = harness.measure(harness.registered()["W3.fraction.EVENLY.nohint"], repeats=1)
    assert int(row.notes["split_requests_fitting_one_device"]) < 1100


def test_run_prints_json(bench: tuple[ModuleType, ...], capsys: pytest.CaptureFixture[str]) -> None:
    run = bench[2]
    assert (
        run.main(["--json", "--only", "W4.discrete.FILL*", "--repeats", "1", "--warmup", "1"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["rows"]
    assert row["name"] == "W4.discrete.FILL.nohint"
    assert row["ops"] == 20_000
    assert row["exact"] is True
    assert row["ops_per_s"] > 0
    assert row["us_per_op"] > 0


def test_run_table_and_unknown_pattern(
    bench: tuple[ModuleType, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    run = bench[2]
    assert run.main(["--only", "W4.fraction.FILL*", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| configuration | ops | ops/s | µs/op |")
    assert "| W4.fraction.FILL.nohint | 20000 |" in out
    assert run.main(["--only", "nothing-matches-this"]) == 2
