"""Occupancy: held device-seconds from the ledger's bookings, on an injected clock."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload import Ledger, LedgerRecord
from accelkit.workload.occupancy import entry_point, held_seconds

NS = 10**9


class Clock:
    """A clock the test moves by hand, in nanoseconds."""

    def __init__(self) -> None:
        self.now = 1_700_000_000 * NS

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: Decimal) -> None:
        self.now += int(seconds * NS)


def booking(workload: str, devices: list[str], agent: str = "agent-1") -> LedgerRecord:
    alloc = {DeviceName("cuda"): {"cuda.device": {d: Decimal(1) for d in devices}}}
    return LedgerRecord(AgentId(agent), Workload.process_tree(workload), allocation=alloc)


def by_key(ledger: Ledger, clock: Clock, devices=None) -> dict[tuple[str, str, str], Decimal]:
    found = held_seconds(ledger.db, clock(), devices)
    return {(h.device, h.agent, h.workload): h.seconds for h in found}


def test_entry_points_come_from_the_workload_id():
    assert entry_point("k8s-claim:default/c:uid") == "claim"
    assert entry_point("k8s:nvidia.com/gpu:cuda0") == "pod"
    assert entry_point("slurm:42.0") == "slurm"
    assert entry_point("pid:42") == "run"


def test_a_schedule_of_bookings_is_counted_as_the_ledger_booked_it(tmp_path):
    ledger = Ledger(tmp_path)
    clock = Clock()
    ledger.clock = clock
    ledger.write(booking("pid:1", ["cuda0", "cuda1"]))
    clock.advance(Decimal("10.5"))
    ledger.write(booking("slurm:7", ["cuda2"], agent="agent-2"))
    clock.advance(Decimal(4))
    # a rewrite of the same booking (a hook's phase, say) opens nothing new
    ledger.write(booking("pid:1", ["cuda0", "cuda1"]))
    clock.advance(Decimal("0.25"))
    assert ledger.remove("agent-1", "pid:1")
    clock.advance(Decimal(100))
    assert by_key(ledger, clock, {"cuda": ["cuda0", "cuda1", "cuda2", "cuda3"]}) == {
        ("cuda0", "agent-1", "pid:1"): Decimal("14.75"),
        ("cuda1", "agent-1", "pid:1"): Decimal("14.75"),
        ("cuda2", "agent-2", "slurm:7"): Decimal("104.25"),
        ("cuda3", "", ""): Decimal(0),  # idle, and shown
    }
    [slurm] = [h for h in held_seconds(ledger.db, clock()) if h.workload == "slurm:7"]
    assert (slurm.entry, slurm.holding) == ("slurm", True)


def test_a_device_dropped_from_a_booking_stops_counting(tmp_path):
    ledger = Ledger(tmp_path)
    clock = Clock()
    ledger.clock = clock
    ledger.write(booking("pid:1", ["cuda0", "cuda1"]))
    clock.advance(Decimal(3))
    ledger.write(booking("pid:1", ["cuda0"]))
    clock.advance(Decimal(2))
    assert by_key(ledger, clock) == {
        ("cuda0", "agent-1", "pid:1"): Decimal(5),
        ("cuda1", "agent-1", "pid:1"): Decimal(3),
    }


def test_the_same_workload_id_booked_again_adds_up(tmp_path):
    ledger = Ledger(tmp_path)
    clock = Clock()
    ledger.clock = clock
    for seconds in (Decimal(2), Decimal(3)):
        ledger.write(booking("pid:1", ["cuda0"]))
        clock.advance(seconds)
        ledger.remove("agent-1", "pid:1")
        clock.advance(Decimal(50))
    assert by_key(ledger, clock) == {("cuda0", "agent-1", "pid:1"): Decimal(5)}


def test_intervals_outlive_the_process_that_booked_them(tmp_path):
    clock = Clock()
    first = Ledger(tmp_path)
    first.clock = clock
    first.write(booking("pid:1", ["cuda0"]))
    first.close()
    clock.advance(Decimal(7))
    second = Ledger(tmp_path)
    second.clock = clock
    assert by_key(second, clock) == {("cuda0", "agent-1", "pid:1"): Decimal(7)}


def test_a_transaction_rolled_back_keeps_no_interval(tmp_path):
    ledger = Ledger(tmp_path)
    clock = Clock()
    ledger.clock = clock
    try:
        with ledger.transaction():
            ledger.write(booking("pid:1", ["cuda0"]))
            raise RuntimeError("refused")
    except RuntimeError:
        pass
    assert held_seconds(ledger.db, clock()) == []


# a schedule: (workload, device, book after s, hold for s)
_STEPS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.sampled_from(["cuda0", "cuda1", "cuda2"]),
        st.decimals(0, 100, places=3),
        st.decimals("0.001", 100, places=3),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(_STEPS)
def test_held_seconds_match_the_booked_intervals_and_only_grow(tmp_path_factory, steps):
    ledger = Ledger(tmp_path_factory.mktemp("ledger"))
    clock = Clock()
    ledger.clock = clock
    start = clock()
    events: list[tuple[int, int, str, str]] = []  # (time, 0 release / 1 book, workload, device)
    for n, (_w, device, after, hold) in enumerate(steps):
        at = start + int(after * NS)
        events += [(at, 1, f"w{n}", device), (at + int(hold * NS), 0, f"w{n}", device)]
    booked: dict[tuple[str, str], Decimal] = {}
    last = Decimal(0)
    for at, kind, workload, device in sorted(events):
        clock.now = at
        if kind:
            ledger.write(booking(workload, [device]))
        else:
            ledger.remove("agent-1", workload)
            hold = next(h for n, (_w, _d, _a, h) in enumerate(steps) if f"w{n}" == workload)
            booked[(device, workload)] = hold
        total = sum((h.seconds for h in held_seconds(ledger.db, clock())), Decimal(0))
        assert total >= last  # a counter
        last = total
    found = {(h.device, h.workload): h.seconds for h in held_seconds(ledger.db, clock())}
    assert found.keys() == booked.keys()
    for key, seconds in booked.items():
        assert abs(found[key] - seconds) <= seconds / 100  # within 1 % (here: exact)


def test_a_ledger_that_cannot_be_read_leaves_the_counter_out(caplog):
    from accelkit.errors import ConfigError
    from accelkit.metrics_export.occupancy_metrics import HeldSecondsCollector

    def broken() -> list:
        raise ConfigError("ledger '/x/ledger.db': cannot open it: gone")

    assert list(HeldSecondsCollector(broken).collect()) == []
    assert "cannot read the held device-seconds" in caplog.text


def test_the_counter_carries_every_label(tmp_path):
    from accelkit.metrics_export.occupancy_metrics import HeldSecondsCollector

    ledger = Ledger(tmp_path)
    clock = Clock()
    ledger.clock = clock
    ledger.write(booking("k8s-claim:ns/c:uid", ["cuda0"]))
    clock.advance(Decimal("1.5"))
    (family,) = HeldSecondsCollector(
        lambda: held_seconds(ledger.db, clock(), {"cuda": ["cuda0", "cuda1"]})
    ).collect()
    assert [(s.name, s.labels, s.value) for s in family.samples] == [
        (
            "accelkit_device_held_seconds_total",
            {
                "plugin": "cuda",
                "device": "cuda0",
                "agent": "agent-1",
                "workload": "k8s-claim:ns/c:uid",
                "entry": "claim",
            },
            1.5,
        ),
        (
            "accelkit_device_held_seconds_total",
            {"plugin": "cuda", "device": "cuda1", "agent": "", "workload": "", "entry": ""},
            0.0,
        ),
    ]


#: what ``status --json`` read before: one aggregate over every interval, in the index order
AGGREGATE = (
    "SELECT agent, workload, plugin, device, "
    "SUM(MAX(COALESCE(until_ns, ?), since_ns) - since_ns) "
    "FROM held GROUP BY plugin, device, agent, workload, entry "
    "HAVING MAX(until_ns IS NULL) ORDER BY plugin, device, agent, workload, entry"
)

intervals = st.lists(
    st.tuples(
        st.sampled_from(["agent-1", "agent-2"]),
        st.sampled_from(["pid:1", "é"]),
        st.sampled_from(["cuda", "mem"]),
        st.sampled_from(["10", "9", "Z", "a"]),  # text order, not numbers
        st.sampled_from(["run", "slurm"]),
        st.integers(0, 10**12),
        st.none() | st.integers(0, 10**12),  # closed, also before it opened (a clock set back)
    ),
    max_size=30,
)


@settings(max_examples=60)
@given(intervals, st.integers(0, 2 * 10**12))
def test_held_now_is_the_sum_of_every_interval_of_the_open_holds(tmp_path_factory, rows, now):
    from accelkit.workload.occupancy import _seconds_text, held_now

    ledger = Ledger(tmp_path_factory.mktemp("ledger"))
    ledger.clock = lambda: now
    ledger.db.executemany("INSERT INTO held VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    expected: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for agent, workload, plugin, device, ns in ledger.db.execute(AGGREGATE, (now,)):
        per_plugin = expected.setdefault((agent, workload), {}).setdefault(plugin, {})
        per_plugin[device] = _seconds_text(int(ns))
    found = held_now(ledger)
    assert found == expected

    def ordered(held: dict[tuple[str, str], dict[str, dict[str, str]]]) -> list[object]:
        return [(k, [(p, list(d.items())) for p, d in v.items()]) for k, v in held.items()]

    assert ordered(found) == ordered(expected)  # workloads, plugins and devices in one order
