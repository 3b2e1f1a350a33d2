"""A small registry of named benchmarks and the runner that times them.

A benchmark is a function doing one complete run on fresh state and returning a :class:`Trial`
(its own timing of the measured part, plus outcome counts). It takes no argument, or one named
``check``: true for the warm-up runs, which should then also verify the results (outside the
timed part), false for the timed repeats. Register it under a dotted name; the runner does the
warm-up, the repeats and the medians::

    from harness import Trial, register

    @register("W9.partition.autosplit", reference_ops_per_s=1_000)
    def _bench(check: bool) -> Trial:
        ...
        return Trial(ops=n, seconds=elapsed)

``run.py`` imports every ``workloads_*.py`` module next to it, so a new workload module is
picked up by dropping it into this folder.
"""

from __future__ import annotations

import fnmatch
import inspect
import statistics
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

BenchFn = Callable[[], "Trial"] | Callable[[bool], "Trial"]


@attrs.frozen
class Trial:
    """One run of a benchmark: operations, seconds spent on them, and what came out."""

    ops: int
    seconds: float
    ok: int | None = None
    failed: int | None = None
    exact: bool | None = None
    notes: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Benchmark:
    """A registered benchmark."""

    name: str
    fn: BenchFn
    reference_ops_per_s: float | None = None
    takes_check: bool = False

    def run(self, check: bool) -> Trial:
        """One run; ``check`` asks for verification when the function supports it."""
        if self.takes_check:
            return self.fn(check)  # type: ignore[call-arg]
        return self.fn()  # type: ignore[call-arg]


@attrs.frozen
class Row:
    """The summary of one benchmark over its timed repeats."""

    name: str
    ops: int
    ops_per_s: float
    us_per_op: float
    spread: float
    repeats: int
    ok: int | None
    failed: int | None
    exact: bool | None
    reference_ops_per_s: float | None
    notes: Mapping[str, str]

    @property
    def ratio(self) -> float | None:
        """Our ops/s over the reference's, when there is a reference figure."""
        if not self.reference_ops_per_s:
            return None
        return self.ops_per_s / self.reference_ops_per_s

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the row."""
        return {**attrs.asdict(self), "notes": dict(self.notes), "ratio": self.ratio}


_REGISTRY: dict[str, Benchmark] = {}


def add(name: str, run: BenchFn, *, reference_ops_per_s: float | None = None) -> None:
    """Register ``run`` under ``name``; a name may be registered once."""
    if name in _REGISTRY:
        msg = f"benchmark {name!r} is registered twice"
        raise ValueError(msg)
    takes_check = "check" in inspect.signature(run).parameters
    _REGISTRY[name] = Benchmark(name, run, reference_ops_per_s, takes_check)


def register(
    name: str, *, reference_ops_per_s: float | None = None
) -> Callable[[BenchFn], BenchFn]:
    """Decorator form of :func:`add`."""

    def deco(run: BenchFn) -> BenchFn:
        add(name, run, reference_ops_per_s=reference_ops_per_s)
        return run

    return deco


def registered() -> Mapping[str, Benchmark]:
    """Every registered benchmark, in registration order."""
    return dict(_REGISTRY)


def select(patterns: Iterable[str]) -> list[Benchmark]:
    """Benchmarks whose name matches any pattern (fnmatch, or a plain substring)."""
    pats = list(patterns)
    if not pats:
        return list(_REGISTRY.values())

    def hit(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) or p in name for p in pats)

    return [b for b in _REGISTRY.values() if hit(b.name)]


def measure(bench: Benchmark, *, repeats: int = 5, warmup: int = 1) -> Row:
    """Run ``warmup`` untimed and ``repeats`` timed trials; summarise by the median time."""
    for _ in range(warmup):
        first = bench.run(True)
    trials = [bench.run(False) for _ in range(max(1, repeats))]
    if warmup < 1:
        first = trials[0]
    times = [t.seconds for t in trials]
    median = statistics.median(times)
    ops = trials[0].ops
    outcomes = {(t.ops, t.ok, t.failed) for t in trials} | {(first.ops, first.ok, first.failed)}
    notes = dict(first.notes)
    if len(outcomes) > 1:
        notes["nondeterministic"] = repr(sorted(outcomes, key=repr))
    exact_values = [t.exact for t in (first, *trials) if t.exact is not None]
    return Row(
        name=bench.name,
        ops=ops,
        ops_per_s=ops / median if median > 0 else float("inf"),
        us_per_op=median / ops * 1e6 if ops else 0.0,
        spread=(max(times) - min(times)) / median if median > 0 else 0.0,
        repeats=len(trials),
        ok=first.ok,
        failed=first.failed,
        exact=all(exact_values) if exact_values else None,
        reference_ops_per_s=bench.reference_ops_per_s,
        notes=notes,
    )


def format_table(rows: Iterable[Row]) -> str:
    """A Markdown table in the shape of the shared reference figures."""
    lines = [
        "| configuration | ops | ops/s | µs/op | spread | allocations ok / failed | exact "
        "| reference ops/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        outcome = f"{r.ok} / {r.failed}" if r.ok is not None else "-"
        exact = {True: "yes", False: "NO", None: "-"}[r.exact]
        ref = f"{r.reference_ops_per_s:,.0f}" if r.reference_ops_per_s else "-"
        ratio = f"{r.ratio:,.1f}x" if r.ratio is not None else "-"
        lines.append(
            f"| {r.name} | {r.ops} | {r.ops_per_s:,.0f} | {r.us_per_op:,.1f} | "
            f"{r.spread:.0%} | {outcome} | {exact} | {ref} | {ratio} |"
        )
    return "\n".join(lines)
