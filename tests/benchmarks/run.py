"""Run the registered benchmarks and print a table (or JSON).

    python tests/benchmarks/run.py [--json] [--only PATTERN ...] [--repeats N] [--warmup N]
                                   [--reference DIR]

Every ``workloads_*.py`` module in this folder is imported and registers its benchmarks with
:mod:`harness`. Each benchmark runs ``--warmup`` untimed trials, then ``--repeats`` timed ones;
figures are medians of the timed trials. The benchmarks of one group (a workload's floor,
accelkit's rows and, with ``--reference``, the reference's rows) are timed in alternation.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import harness  # noqa: E402 - importable only once this folder is on sys.path
from reference_allocmap import ReferenceUnavailable, load  # noqa: E402


def load_workloads() -> list[Any]:
    """Import every workload module next to this file (each registers its benchmarks)."""
    return [importlib.import_module(path.stem) for path in sorted(HERE.glob("workloads_*.py"))]


def summaries(modules: list[Any], rows: list[harness.Row]) -> list[str]:
    """Lines the workload modules make of several rows together (``summarize(rows)``)."""
    return [line for m in modules if hasattr(m, "summarize") for line in m.summarize(rows)]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run benchmarks whose name matches (fnmatch glob or substring); repeatable",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs (default 1)")
    parser.add_argument("--list", action="store_true", help="list benchmark names and exit")
    parser.add_argument(
        "--reference",
        metavar="DIR",
        help="also measure Backend.AI's alloc maps from DIR (its src/ai/backend/agent) in the "
        "same run; default: $ACCELKIT_BENCH_REFERENCE",
    )
    parser.add_argument(
        "--wall",
        action="store_true",
        help="time the alloc-map loops in wall time, not the thread's CPU time",
    )
    args = parser.parse_args(argv)
    if args.wall:
        harness.loop_clock = time.perf_counter

    try:
        reference = load(args.reference)
    except ReferenceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    modules = load_workloads()
    if reference is not None:
        workloads = importlib.import_module("workloads_allocmap")
        if not any(b.role is harness.Role.REFERENCE for b in harness.registered().values()):
            workloads.add_reference(reference)
    benches = harness.select(args.only)
    if args.list:
        print("\n".join(b.name for b in benches))
        return 0
    if not benches:
        print(f"error: no benchmark matches {args.only}", file=sys.stderr)
        return 2
    rows = []
    groups: dict[str | None, list[harness.Benchmark]] = {}
    for bench in benches:
        groups.setdefault(bench.group or bench.name, []).append(bench)
    for members in groups.values():
        for row in harness.measure_many(members, repeats=args.repeats, warmup=args.warmup):
            rows.append(row)
            if not args.json:
                print(f"  {row.name}: {row.ops_per_s:,.0f} ops/s", file=sys.stderr, flush=True)
    if args.json:
        doc = {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "repeats": args.repeats,
            "warmup": args.warmup,
            "rows": [r.as_json() for r in rows],
            "summaries": summaries(modules, rows),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(harness.format_table(rows))
        for r in rows:
            if r.notes:
                notes = ", ".join(f"{k}={v}" for k, v in sorted(r.notes.items()))
                print(f"- {r.name}: {notes}")
        for line in summaries(modules, rows):
            print(line)
    bad = [r.name for r in rows if r.exact is False]
    if bad:
        print(f"error: inexact grants in {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
