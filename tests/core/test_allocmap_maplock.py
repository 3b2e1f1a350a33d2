"""The alloc maps' lock: mutual exclusion, blocking waiters, hand-over and its safety net."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from accelkit.allocmap import maplock
from accelkit.allocmap.maplock import MapLock


@pytest.fixture
def _switch_often() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _until(check: Callable[[], bool]) -> None:
    """Wait (yielding) until ``check()`` is true: no fixed sleep, no bound on the machine."""
    while not check():
        time.sleep(0)


@pytest.mark.usefixtures("_switch_often")
def test_threads_never_hold_the_lock_together() -> None:
    lock = MapLock()
    counter = [0]
    inside = [0]
    overlaps: list[int] = []

    def work() -> None:
        for n in range(20_000):
            with lock:
                inside[0] += 1
                if n % 64 == 0:
                    time.sleep(0)  # let the others run while this thread holds the lock
                if inside[0] != 1:
                    overlaps.append(inside[0])
                counter[0] = counter[0] + 1
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert counter[0] == 6 * 20_000
    assert lock.waiters == []


@pytest.mark.usefixtures("_switch_often")
def test_the_inlined_form_excludes_as_the_methods_do() -> None:
    # The fast paths take and give the lock with its parts, the general paths with `with`.
    lock = MapLock()
    take, put, wait, wake, waiters = maplock.inlined(lock)
    counter = [0]

    def fast() -> None:
        for _ in range(5_000):
            try:
                take()
            except IndexError:
                wait()
            try:
                value = counter[0]
                time.sleep(0)  # let the others run while this thread holds the lock
                counter[0] = value + 1
            finally:
                put(True)
                if waiters:
                    wake()

    def general() -> None:
        for _ in range(5_000):
            with lock:
                value = counter[0]
                time.sleep(0)
                counter[0] = value + 1

    threads = [threading.Thread(target=f) for f in (fast, fast, general, general)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter[0] == 4 * 5_000


def test_a_waiter_blocks_until_the_holder_releases() -> None:
    lock = MapLock()
    lock.acquire()
    got = threading.Event()

    def waiter() -> None:
        with lock:
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    _until(lambda: len(lock.waiters) == 1)  # it is blocked on its gate
    assert not got.is_set()
    lock.release()
    t.join()
    assert got.is_set()
    assert lock.waiters == []


def test_a_waiter_takes_the_token_even_when_no_release_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The safety net: a token given back without a wake-up (as a missed wake-up would leave
    # it) is found by the waiter when it looks again by itself.
    monkeypatch.setattr(maplock, "RECHECK_S", 0.001)
    lock = MapLock()
    lock.acquire()
    got = threading.Event()

    def waiter() -> None:
        with lock:
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    _until(lambda: len(lock.waiters) == 1)
    lock.put(True)  # the token back, no wake
    t.join()
    assert got.is_set()
    assert lock.waiters == []


def test_every_waiter_gets_its_turn() -> None:
    lock = MapLock()
    lock.acquire()
    order: list[int] = []
    threads = []
    for n in range(3):
        t = threading.Thread(target=lambda n=n: (lock.acquire(), order.append(n), lock.release()))
        t.start()
        threads.append(t)
        _until(lambda n=n: len(lock.waiters) == n + 1)
    lock.release()
    for t in threads:
        t.join()
    assert sorted(order) == [0, 1, 2]
    assert lock.waiters == []


def test_an_error_inside_gives_the_lock_back() -> None:
    lock = MapLock()
    with pytest.raises(RuntimeError), lock:
        raise RuntimeError("inside")
    assert lock.acquire() is True
    lock.release()
