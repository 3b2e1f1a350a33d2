"""Alloc maps of an earlier commit beside the working tree's, on W1-W4, in one process.

    python tests/benchmarks/compare_allocmap.py --base HEAD~3 [--rounds 6] [--only W3 ...]

``accelkit.allocmap`` as of ``--base`` (read with ``git show``) is loaded under another
package name from a temporary folder, so both versions run side by side on the same traces
(``workloads_allocmap.replay``), round after round with the workload's loop floor, in an order
that alternates every round. Each row prints the floor's µs/op and both map costs in floor
units, medians of the timed rounds (after one untimed round), and their ratio: this is how a
change to the maps is shown to cost nothing (a ratio of 1 within the spread of two copies of
the same code, about ±2% here) or to gain something. Both versions share the rest of accelkit
(types, ...) as it is in the working tree, except ``accelkit.errors``: the base gets its own copy,
since the fast paths build their refusals with what that module offers.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workloads_allocmap as w  # noqa: E402 - importable only once this folder is on sys.path

from accelkit import allocmap  # noqa: E402
from accelkit.errors import ResourceError  # noqa: E402
from accelkit.types import SlotName  # noqa: E402

PACKAGE = "core/src/accelkit/allocmap"
ERRORS = "core/src/accelkit/errors.py"
BASE_NAME = "allocmap_base"
BASE_ERRORS = f"{BASE_NAME}._errors"

# name, devices, slot, draw, seed, max_live, map kind, strategy
ROWS: Sequence[tuple[str, w.Devices, str, w.Draw, int, int, str, str]] = [
    ("W1.discrete.EVENLY", w.W1_DEVICES, "cpu", w._draw_w1, 101, 16, "discrete", "EVENLY"),
    ("W1.discrete.FILL", w.W1_DEVICES, "cpu", w._draw_w1, 101, 16, "discrete", "FILL"),
    ("W2.discrete.EVENLY", w.W2_DEVICES, "cuda.device", w._draw_w2, 202, 16, "discrete", "EVENLY"),
    ("W2.discrete.FILL", w.W2_DEVICES, "cuda.device", w._draw_w2, 202, 16, "discrete", "FILL"),
    ("W3.fraction.EVENLY", w.W3_DEVICES, "cuda.shares", w._draw_w3, 303, 12, "fraction", "EVENLY"),
    ("W3.fraction.FILL", w.W3_DEVICES, "cuda.shares", w._draw_w3, 303, 12, "fraction", "FILL"),
    (
        "W3-as-written.fraction.EVENLY",
        w.W3_DEVICES,
        "cuda.shares",
        w._draw_w3_as_written,
        303,
        12,
        "fraction",
        "EVENLY",
    ),
    (
        "W3-as-written.fraction.FILL",
        w.W3_DEVICES,
        "cuda.shares",
        w._draw_w3_as_written,
        303,
        12,
        "fraction",
        "FILL",
    ),
    ("W4.discrete.FILL", w.W4_DEVICES, "mem", w._draw_w4, 404, 16, "discrete", "FILL"),
    ("W4.discrete.EVENLY", w.W4_DEVICES, "mem", w._draw_w4, 404, 16, "discrete", "EVENLY"),
    ("W4.fraction.EVENLY", w.W4_DEVICES, "mem", w._draw_w4, 404, 16, "fraction", "EVENLY"),
    ("W4.fraction.FILL", w.W4_DEVICES, "mem", w._draw_w4, 404, 16, "fraction", "FILL"),
]


def load_base(revision: str, folder: Path) -> ModuleType:
    """``accelkit.allocmap`` at ``revision``, importable as :data:`BASE_NAME`."""
    root = Path(
        subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", revision, f"{PACKAGE}/"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    target = folder / BASE_NAME
    target.mkdir()
    for name in [*names, ERRORS]:
        if not name.endswith(".py"):
            continue
        text = subprocess.run(
            ["git", "show", f"{revision}:{name}"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        text = text.replace("accelkit.allocmap", BASE_NAME).replace("accelkit.errors", BASE_ERRORS)
        (target / ("_errors.py" if name == ERRORS else Path(name).name)).write_text(text)
    sys.path.insert(0, str(folder))
    return importlib.import_module(BASE_NAME)


def factory(module: Any, kind: str, devices: w.Devices, strategy: str) -> Callable[[], Any]:
    """A map of ``kind`` from ``module`` (this tree's allocmap or the base's)."""
    chosen = module.AllocationStrategy[strategy]
    if kind == "discrete":
        return lambda: module.DiscretePropertyAllocMap(devices, strategy=chosen)
    return lambda: module.FractionAllocMap(devices, strategy=chosen, quantum_size=w.QUANTUM)


def measure(
    base: ModuleType, rounds: int, only: Sequence[str]
) -> list[tuple[str, float, float, float]]:
    """Per row: floor µs/op, base cost and tree cost in floor units (medians)."""
    out = []
    for name, devices, slot, draw, seed, live, kind, strategy in ROWS:
        if only and not any(o in name for o in only):
            continue
        makers: dict[str, Callable[[], Any]] = {
            "floor": w._NullMap,
            "base": factory(base, kind, devices, strategy),
            "tree": factory(allocmap, kind, devices, strategy),
        }
        errors = (ResourceError, importlib.import_module(BASE_ERRORS).ResourceError)
        times: dict[str, list[float]] = {k: [] for k in makers}
        for r in range(rounds + 1):
            order = ("floor", "base", "tree") if r % 2 else ("floor", "tree", "base")
            for key in order:
                trial = w.replay(
                    makers[key](), SlotName(slot), draw, seed=seed, max_live=live, errors=errors
                )
                if r:  # round 0 warms up
                    times[key].append(trial.seconds / trial.ops * 1e6)
        floor = statistics.median(times["floor"])
        base_cost = (statistics.median(times["base"]) - floor) / floor
        tree_cost = (statistics.median(times["tree"]) - floor) / floor
        out.append((name, floor, base_cost, tree_cost))
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds (default 6)")
    parser.add_argument("--only", action="append", default=[], help="rows containing this")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        base = load_base(args.base, Path(folder))
        rows = measure(base, args.rounds, args.only)
    print(f"| row | floor µs/op | {args.base} cost | tree cost | tree / {args.base} |")
    print("|---|---|---|---|---|")
    for name, floor, base_cost, tree_cost in rows:
        ratio = tree_cost / base_cost
        print(f"| {name} | {floor:.3f} | {base_cost:.2f} | {tree_cost:.2f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
