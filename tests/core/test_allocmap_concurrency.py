"""Many threads sharing one map (SHARED mode) never double-allocate and leave it consistent."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator, Mapping
from decimal import Decimal

import pytest

from accelkit.allocmap import (
    AbstractAllocMap,
    AffinityHint,
    AffinityPolicy,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
)
from accelkit.errors import InsufficientResource, InvalidResourceArgument
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
THREADS = 8
OPS = 10_000
SLOT = SlotName("x.shares")
UNIQUE = SlotName("x.mig")
Alloc = Mapping[SlotName, Mapping[DeviceId, Decimal]]


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    # Switch threads far more often than the default 5 ms so races have a chance to show.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def devices() -> dict[DeviceId, DeviceSlotInfo]:
    out = {DeviceId(f"d{i}"): DeviceSlotInfo(SlotType.COUNT, SLOT, D(4), i // 8) for i in range(16)}
    for i in range(4):
        out[DeviceId(f"u{i}")] = DeviceSlotInfo(SlotType.UNIQUE, UNIQUE, D(1), i // 2)
    return out


def worker(m: AbstractAllocMap, seed: int, held: list[Alloc], errors: list[str]) -> None:
    rng = random.Random(seed)
    q = m.quantum_size if isinstance(m, FractionAllocMap) else D(1)
    hints = [
        None,
        AffinityHint(AffinityPolicy.INTERLEAVED),
        AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE, frozenset({1})),
    ]
    for _ in range(OPS):
        op = rng.random()
        try:
            if op < 0.45 or not held:
                if rng.random() < 0.1:
                    request = {UNIQUE: D(1)}
                else:
                    request = {SLOT: rng.randint(1, 40) * q, UNIQUE: D(rng.random() < 0.05)}
                alloc = m.allocate(request, affinity_hint=rng.choice(hints))
                for slot, per in alloc.items():
                    if sum(per.values()) != request[slot]:
                        errors.append(f"inexact grant {per} for {request[slot]}")
                held.append(alloc)
            elif op < 0.9:
                m.free(held.pop(rng.randrange(len(held))))
            elif op < 0.95:
                dev = DeviceId(f"d{rng.randrange(16)}")
                alloc = {SLOT: {dev: q}}
                m.apply_allocation(alloc)
                held.append(alloc)
            else:
                snapshot = m.allocations
                for per in snapshot.values():
                    for dev, amount in per.items():
                        cap = 1 if dev.startswith("u") else 4
                        if not 0 <= amount <= cap:
                            errors.append(f"{dev} shows {amount}")
        except (InsufficientResource, InvalidResourceArgument):
            pass
        except Exception as exc:
            errors.append(repr(exc))
            return


def test_threads_share_a_single_device_map_safely() -> None:
    # The specialised path of one-device maps (the mem root) must be just as safe.
    root = {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(10**6))}
    m = DiscretePropertyAllocMap(root, strategy=AllocationStrategy.FILL)
    held: list[list[Alloc]] = [[] for _ in range(THREADS)]

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(OPS):
            try:
                if rng.random() < 0.5 or not held[seed]:
                    held[seed].append(m.allocate({SlotName("mem"): D(rng.randint(1, 200_000))}))
                else:
                    m.free(held[seed].pop(rng.randrange(len(held[seed]))))
            except InsufficientResource:
                pass

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(a[SlotName("mem")][DeviceId("root")] for mine in held for a in mine)
    assert m.allocations == {"mem": {"root": total}}
    assert total <= 10**6
    for mine in held:
        for alloc in mine:
            m.free(alloc)
    assert m.allocatable() == {"mem": D(10**6)}


def test_threads_share_a_fill_map_of_a_few_devices_safely() -> None:
    # FILL over a few devices of one slot scans instead of keeping buckets (fillscan): its
    # single-device grants, splits and frees must be just as safe.
    gpus = {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, SLOT, D("1.0"), i // 4)
        for i in range(8)
    }
    m = FractionAllocMap(gpus, strategy=AllocationStrategy.FILL)
    shares = [D(s) for s in ("0.1", "0.25", "0.5", "1", "1.5", "2", "2.5", "3.3")]
    held: list[list[Alloc]] = [[] for _ in range(THREADS)]
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        hint = AffinityHint(AffinityPolicy.INTERLEAVED)
        for _ in range(OPS):
            try:
                if rng.random() < 0.5 or not held[seed]:
                    request = rng.choice(shares)
                    alloc = m.allocate({SLOT: request}, affinity_hint=rng.choice([None, hint]))
                    if sum(alloc[SLOT].values()) != request:
                        errors.append(f"inexact grant {alloc} for {request}")
                    held[seed].append(alloc)
                else:
                    m.free(held[seed].pop(rng.randrange(len(held[seed]))))
            except InsufficientResource:
                pass

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    expected = {d: D(0) for d in gpus}
    for mine in held:
        for alloc in mine:
            for dev, amount in alloc[SLOT].items():
                expected[dev] += amount
    assert m.allocations[SLOT] == expected
    assert all(v <= 1 for v in expected.values())
    for mine in held:
        for alloc in mine:
            m.free(alloc)
    assert m.allocatable() == m.capacity()


@pytest.mark.parametrize("kind", ["discrete", "fraction"])
def test_threads_share_one_map_safely(kind: str) -> None:
    m: AbstractAllocMap
    if kind == "discrete":
        m = DiscretePropertyAllocMap(devices(), strategy=AllocationStrategy.EVENLY)
    else:
        m = FractionAllocMap(devices(), strategy=AllocationStrategy.FILL, quantum_size=D("0.25"))
    held: list[list[Alloc]] = [[] for _ in range(THREADS)]
    errors: list[str] = []
    threads = [
        threading.Thread(target=worker, args=(m, seed, held[seed], errors))
        for seed in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # What the threads hold, added up, is exactly what the map shows: no grant was lost or
    # given twice, and no device is over capacity.
    expected: dict[DeviceId, Decimal] = {d: D(0) for d in devices()}
    for mine in held:
        for alloc in mine:
            for per in alloc.values():
                for dev, amount in per.items():
                    expected[dev] += amount
    shown = {d: a for per in m.allocations.values() for d, a in per.items()}
    assert shown == expected
    assert all(expected[DeviceId(f"u{i}")] <= 1 for i in range(4))
    assert all(expected[DeviceId(f"d{i}")] <= 4 for i in range(16))
    for mine in held:
        for alloc in mine:
            m.free(alloc)
    assert m.allocatable() == m.capacity()
