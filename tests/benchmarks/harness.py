"""A small registry of named benchmarks and the runner that times them.

A benchmark is a function doing one complete run on fresh state and returning a :class:`Trial`
(its own timing of the measured part, plus outcome counts). It takes no argument, or one named
``check``: true for the warm-up runs, which should then also verify the results (outside the
timed part), false for the timed repeats. Register it under a dotted name; the runner does the
warm-up, the repeats and the medians::

    from harness import Trial, register

    @register("W9.partition.autosplit")
    def _bench(check: bool) -> Trial:
        ...
        return Trial(ops=n, seconds=elapsed)

``run.py`` imports every ``workloads_*.py`` module next to it, so a new workload module is
picked up by dropping it into this folder.
"""

from __future__ import annotations

import enum
import fnmatch
import inspect
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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


class Role(enum.StrEnum):
    """What a benchmark is within its group."""

    #: the loop against a map that does nothing: the unit a group's costs are given in
    FLOOR = "floor"
    #: accelkit (or whatever the project measures)
    SUBJECT = "subject"
    #: the same loop against another implementation, measured in the same run
    REFERENCE = "reference"


@attrs.frozen
class Benchmark:
    """A registered benchmark.

    Benchmarks of one ``group`` are timed in alternation (one trial of each, round after
    round), so a drift of the machine's speed hits them alike. ``of`` names the subject a
    reference row is measured against. ``goal`` is a map-cost goal in floor units taken from
    figures measured elsewhere; it is printed as such, never turned into a ratio.
    """

    name: str
    fn: BenchFn
    takes_check: bool = False
    group: str | None = None
    role: Role = Role.SUBJECT
    of: str | None = None
    goal: float | None = None

    def run(self, check: bool) -> Trial:
        """One run; ``check`` asks for verification when the function supports it."""
        if self.takes_check:
            return self.fn(check)  # type: ignore[call-arg]
        return self.fn()  # type: ignore[call-arg]


@attrs.frozen
class Row:
    """The summary of one benchmark over its timed repeats.

    ``floor_us_per_op`` is the median of the group's floor row in the same run, ``cost`` this
    row's time above it in floor units. ``reference_cost`` is the cost of the reference row
    measured beside it in the same run.
    """

    name: str
    ops: int
    ops_per_s: float
    us_per_op: float
    spread: float
    repeats: int
    ok: int | None
    failed: int | None
    exact: bool | None
    notes: Mapping[str, str]
    role: Role = Role.SUBJECT
    floor_us_per_op: float | None = None
    cost: float | None = None
    reference_cost: float | None = None
    goal: float | None = None

    @property
    def ratio(self) -> float | None:
        """How many times cheaper than the reference above the floor, both measured together."""
        if self.reference_cost is None or self.cost is None:
            return None
        return self.reference_cost / self.cost if self.cost > 0 else float("inf")

    @property
    def goal_met(self) -> bool | None:
        """The map cost within REFERENCE.md's goal for the row (``None`` without a goal)."""
        if self.goal is None or self.cost is None:
            return None
        return self.cost <= self.goal

    @property
    def ratio_met(self) -> bool | None:
        """At least :data:`GOAL_RATIO` times cheaper than the reference measured beside it
        (``None`` when the reference did not run)."""
        if self.ratio is None:
            return None
        return self.ratio >= GOAL_RATIO

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the row."""
        return {
            **attrs.asdict(self),
            "role": self.role.value,
            "notes": dict(self.notes),
            "ratio": self.ratio,
            "goal_met": self.goal_met,
            "ratio_met": self.ratio_met,
        }


_REGISTRY: dict[str, Benchmark] = {}

#: the clock of loops that only compute (the alloc maps): CPU time of the calling thread, which
#: a loaded machine's other processes do not add to as they add to wall time (``run.py --wall``
#: switches back to ``time.perf_counter``)
loop_clock: Callable[[], float] = time.thread_time

#: a row meets its goal when it is this many times cheaper than the reference, same run
GOAL_RATIO = 5.0


def add(
    name: str,
    run: BenchFn,
    *,
    group: str | None = None,
    role: Role = Role.SUBJECT,
    of: str | None = None,
    goal: float | None = None,
) -> None:
    """Register ``run`` under ``name``; a name may be registered once."""
    if name in _REGISTRY:
        msg = f"benchmark {name!r} is registered twice"
        raise ValueError(msg)
    takes_check = "check" in inspect.signature(run).parameters
    _REGISTRY[name] = Benchmark(name, run, takes_check, group, role, of, goal)


def register(
    name: str, *, group: str | None = None, role: Role = Role.SUBJECT, goal: float | None = None
) -> Callable[[BenchFn], BenchFn]:
    """Decorator form of :func:`add`."""

    def deco(run: BenchFn) -> BenchFn:
        add(name, run, group=group, role=role, goal=goal)
        return run

    return deco


def registered() -> Mapping[str, Benchmark]:
    """Every registered benchmark, in registration order."""
    return dict(_REGISTRY)


def select(patterns: Iterable[str]) -> list[Benchmark]:
    """Benchmarks whose name matches any pattern (fnmatch, or a plain substring).

    The floor of a selected benchmark's group comes along, and so does the reference row of a
    selected subject: a cost or a ratio is only printed when what it divides by was measured
    in the same run.
    """
    pats = list(patterns)
    if not pats:
        return list(_REGISTRY.values())

    def hit(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) or p in name for p in pats)

    chosen = {b.name for b in _REGISTRY.values() if hit(b.name)}
    groups = {_REGISTRY[n].group for n in chosen} - {None}
    for b in _REGISTRY.values():
        if (b.role is Role.FLOOR and b.group in groups) or (b.of is not None and b.of in chosen):
            chosen.add(b.name)
    return [b for b in _REGISTRY.values() if b.name in chosen]


def _summary(bench: Benchmark, first: Trial, trials: list[Trial]) -> Row:
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
        notes=notes,
        role=bench.role,
        goal=bench.goal,
    )


def measure_many(benches: Sequence[Benchmark], *, repeats: int = 5, warmup: int = 1) -> list[Row]:
    """Warm up every benchmark, then time them in alternation, ``repeats`` rounds.

    Each round runs one trial of every benchmark of a group before the next round starts, so
    the rows of a group (floor, subject, reference) share the machine's state of the moment.
    Costs are relative to the group's floor row; ratios to its reference row.
    """
    firsts: dict[str, Trial] = {}
    for bench in benches:
        for _ in range(warmup):
            firsts[bench.name] = bench.run(True)
    trials: dict[str, list[Trial]] = {b.name: [] for b in benches}
    for _ in range(max(1, repeats)):
        for bench in benches:
            trials[bench.name].append(bench.run(False))
    rows = {
        b.name: _summary(b, firsts.get(b.name, trials[b.name][0]), trials[b.name]) for b in benches
    }
    floors = {b.group: rows[b.name].us_per_op for b in benches if b.role is Role.FLOOR and b.group}
    for b in benches:
        floor = floors.get(b.group) if b.group else None
        if floor and b.role is not Role.FLOOR:
            cost = (rows[b.name].us_per_op - floor) / floor
            rows[b.name] = attrs.evolve(rows[b.name], floor_us_per_op=floor, cost=cost)
    for b in benches:
        if b.role is Role.REFERENCE and b.of in rows and rows[b.name].cost is not None:
            rows[b.of] = attrs.evolve(rows[b.of], reference_cost=rows[b.name].cost)
    return [rows[b.name] for b in benches]


def measure(bench: Benchmark, *, repeats: int = 5, warmup: int = 1) -> Row:
    """Run ``warmup`` untimed and ``repeats`` timed trials; summarise by the median time."""
    (row,) = measure_many([bench], repeats=repeats, warmup=warmup)
    return row


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(rows: Iterable[Row]) -> str:
    """A Markdown table: speed, the floor of the same run, costs in floor units, goals.

    "ref. cost" and "ratio" come from the reference measured in the same run; "goal" is the
    map cost in floor units that the reference figures measured elsewhere ask for, and "within
    goal" says whether the cost is at most that; "≥ 5x" says whether the ratio of the same run
    is at least :data:`GOAL_RATIO`.
    """
    lines = [
        "| configuration | ops | ops/s | µs/op | spread | floor µs/op | map cost (floor units) "
        "| ref. cost, same run | ratio, same run | goal (floor units, measured elsewhere) "
        f"| within goal | ≥ {GOAL_RATIO:g}x, same run | allocations ok / failed | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    said = {True: "yes", False: "no", None: "-"}
    for r in rows:
        outcome = f"{r.ok} / {r.failed}" if r.ok is not None else "-"
        exact = {True: "yes", False: "NO", None: "-"}[r.exact]
        lines.append(
            f"| {r.name} | {r.ops} | {r.ops_per_s:,.0f} | {r.us_per_op:,.2f} | "
            f"{r.spread:.0%} | {_num(r.floor_us_per_op, ',.2f')} | {_num(r.cost, ',.2f')} | "
            f"{_num(r.reference_cost, ',.2f')} | {_num(r.ratio, ',.2f')}{'x' if r.ratio else ''} | "
            f"{_num(r.goal, ',.2f')} | {said[r.goal_met]} | {said[r.ratio_met]} | {outcome} | "
            f"{exact} |"
        )
    return "\n".join(lines)
