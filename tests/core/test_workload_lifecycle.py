"""The lifecycle driver: order, merging, and the exactly-once guarantees under fault injection."""

from __future__ import annotations

import asyncio
import itertools
from decimal import Decimal

import pytest

from accelkit.errors import (
    HookConflict,
    InvalidResourceArgument,
    WorkloadCreationDeferred,
    WorkloadCreationDenied,
    WorkloadError,
)
from accelkit.events import WorkloadPhase
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import AgentId, DeviceName, Mount, Workload, WorkloadConfig
from accelkit.workload import HookTarget, LifecycleState, WorkloadLifecycle

KEYS = ("cuda", "cpu", "mem")
PHASES = ("pre_create", "post_create", "pre_terminate", "post_terminate")


class Journal:
    """Every hook call, and the faults to inject: (plugin, phase) -> exception."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.faults: dict[tuple[str, str], BaseException] = {}
        self.configs: dict[str, WorkloadConfig] = {}

    def enter(self, key: str, phase: str) -> None:
        self.calls.append((key, phase))
        if (fault := self.faults.get((key, phase))) is not None:
            raise fault

    def count(self, key: str, phase: str) -> int:
        return self.calls.count((key, phase))


class RecordingHook(AbstractLifecycleHook):
    def __init__(self, journal: Journal, key: str, workload, device_alloc) -> None:
        super().__init__(workload, device_alloc)
        self.journal = journal
        self.key = key

    async def pre_create(self) -> WorkloadConfig:
        self.journal.enter(self.key, "pre_create")
        return self.journal.configs.get(self.key, WorkloadConfig(env_vars={self.key: "1"}))

    async def post_create(self) -> None:
        self.journal.enter(self.key, "post_create")

    async def pre_terminate(self) -> None:
        self.journal.enter(self.key, "pre_terminate")

    async def post_terminate(self) -> None:
        self.journal.enter(self.key, "post_terminate")


class FakeContext:
    def __init__(self, journal: Journal, key: str, refuse: bool = False) -> None:
        self.journal = journal
        self.key = key
        self.refuse = refuse

    def create_lifecycle_hook(self, workload, device_alloc):
        if (fault := self.journal.faults.get((self.key, "create_lifecycle_hook"))) is not None:
            raise fault
        if self.refuse:
            raise InvalidResourceArgument(f"{self.key}: device outside the mask")
        return RecordingHook(self.journal, self.key, workload, device_alloc)


class Release:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def make(journal: Journal, keys=KEYS, *, refuse: str = "", on_phase=None, notify=None):
    release = Release()
    targets = [
        HookTarget(
            DeviceName(k),
            FakeContext(journal, k, refuse=k == refuse),  # type: ignore[arg-type]
            {f"{k}.device": {f"{k}0": Decimal(1)}},
        )
        for k in keys
    ]
    driver = WorkloadLifecycle(
        AgentId("agent-1"),
        Workload.process_tree("w1"),
        targets,
        release=release,
        on_phase=on_phase,
        notify=notify,
    )
    return driver, release


async def full_life(driver: WorkloadLifecycle) -> WorkloadConfig:
    """What a caller does: prepare, create, post_create, then always terminate."""
    config = await driver.prepare()
    try:
        await driver.post_create()
    finally:
        await driver.pre_terminate()
        await driver.post_terminate()
    return config


def run(coro):
    return asyncio.run(coro)


def test_happy_path_runs_every_phase_in_order_and_reverse():
    journal = Journal()
    driver, release = make(journal)
    config = run(full_life(driver))
    assert config.env_vars == {"cuda": "1", "cpu": "1", "mem": "1"}
    assert journal.calls == [
        *((k, "pre_create") for k in KEYS),
        *((k, "post_create") for k in KEYS),
        *((k, "pre_terminate") for k in reversed(KEYS)),
        *((k, "post_terminate") for k in reversed(KEYS)),
    ]
    assert release.count == 1
    assert driver.state is LifecycleState.DONE
    assert driver.released


@pytest.mark.parametrize(("phase", "position"), list(itertools.product(PHASES, range(3))))
def test_fault_in_any_phase_at_any_position_keeps_exactly_once(phase, position):
    journal = Journal()
    failing = KEYS[position]
    journal.faults[(failing, phase)] = RuntimeError(f"{failing} broke in {phase}")
    driver, release = make(journal)
    with pytest.raises(WorkloadError) as info:
        run(full_life(driver))
    # the plugin and the hook are named, the hook's own error kept as the cause
    named = f"plugin '{failing}' {phase}: RuntimeError: {failing} broke in {phase}"
    assert named in str(info.value)
    if phase in ("pre_create", "post_create"):
        assert isinstance(info.value.__cause__, RuntimeError)
    # a hook whose pre_create was started gets post_terminate, the failing one too (DESIGN §9)
    prepared = KEYS[: position + 1] if phase == "pre_create" else KEYS
    for key in KEYS:
        assert journal.count(key, "post_terminate") == (1 if key in prepared else 0), key
        assert journal.count(key, "pre_create") <= 1
    created = phase != "pre_create"
    for key in KEYS:
        assert journal.count(key, "pre_terminate") == (1 if created else 0)
    assert release.count == 1
    # every post_terminate comes after every pre_terminate, in reverse order
    post = [k for k, p in journal.calls if p == "post_terminate"]
    assert post == [k for k in reversed(KEYS) if k in prepared]


@pytest.mark.parametrize("error", [WorkloadCreationDenied("no"), WorkloadCreationDeferred("later")])
@pytest.mark.parametrize("position", range(3))
def test_denied_and_deferred_keep_their_type_and_name_the_plugin(error, position):
    journal = Journal()
    journal.faults[(KEYS[position], "pre_create")] = error
    driver, release = make(journal)
    with pytest.raises(type(error)) as info:
        run(driver.prepare())
    assert str(info.value) == f"plugin '{KEYS[position]}' pre_create: {error}"
    assert info.value.__cause__ is error
    assert release.count == 1
    started = KEYS[: position + 1]  # the refusing hook was started: it gets post_terminate
    assert [k for k, p in journal.calls if p == "post_terminate"] == list(reversed(started))


def test_creation_failure_after_prepare_skips_pre_terminate():
    journal = Journal()
    driver, release = make(journal)

    async def life():
        await driver.prepare()
        # the workload could not be created: terminate without post_create
        await driver.terminate()
        await driver.terminate()  # idempotent
        await driver.post_terminate()

    run(life())
    assert [p for _k, p in journal.calls].count("pre_terminate") == 0
    assert all(journal.count(k, "post_terminate") == 1 for k in KEYS)
    assert release.count == 1


def test_hook_creation_refused_by_the_context_tears_down_the_earlier_hooks():
    journal = Journal()
    driver, release = make(journal, refuse="cpu")
    with pytest.raises(InvalidResourceArgument):
        run(driver.prepare())
    assert journal.calls == [("cuda", "pre_create"), ("cuda", "post_terminate")]
    assert release.count == 1


def test_conflict_names_both_plugins_and_the_key_and_tears_everything_down():
    journal = Journal()
    journal.configs = {
        "cuda": WorkloadConfig(env_vars={"SHARED": "a"}),
        "cpu": WorkloadConfig(env_vars={"SHARED": "b"}),
    }
    driver, release = make(journal)
    with pytest.raises(HookConflict) as info:
        run(driver.prepare())
    message = str(info.value)
    assert "'cuda'" in message
    assert "'cpu'" in message
    assert "'SHARED'" in message
    assert all(journal.count(k, "post_terminate") == 1 for k in KEYS)
    assert release.count == 1


def test_invalid_config_is_refused_and_its_hook_still_gets_post_terminate():
    journal = Journal()
    journal.configs = {"cpu": WorkloadConfig(mounts=[Mount("/x", "relative/target")])}
    driver, release = make(journal)
    with pytest.raises(WorkloadError, match=r"'cpu'.*not an absolute path"):
        run(driver.prepare())
    assert journal.count("cpu", "post_terminate") == 1
    assert journal.count("mem", "pre_create") == 0
    assert release.count == 1


def test_failing_release_is_not_retried_and_is_reported():
    journal = Journal()
    calls = []

    def release():
        calls.append(1)
        raise OSError("disk gone")

    targets = [HookTarget(DeviceName("cpu"), FakeContext(journal, "cpu"), {})]  # type: ignore[arg-type]
    driver = WorkloadLifecycle(AgentId("a"), Workload.process_tree("w"), targets, release=release)

    async def life():
        await driver.prepare()
        with pytest.raises(WorkloadError, match="disk gone"):
            await driver.terminate()
        await driver.terminate()

    run(life())
    assert calls == [1]


def test_failing_phase_listener_during_teardown_does_not_skip_hooks():
    journal = Journal()

    def listener(plugin, phase):
        if phase is WorkloadPhase.POST_TERMINATE:
            raise OSError("ledger unwritable")

    driver, release = make(journal, on_phase=listener)
    with pytest.raises(WorkloadError, match="ledger unwritable"):
        run(full_life(driver))
    assert all(journal.count(k, "post_terminate") == 1 for k in KEYS)
    assert release.count == 1


def test_failing_record_of_pre_terminate_does_not_skip_post_terminate():
    journal = Journal()

    def listener(plugin, phase):
        if (plugin, phase) == ("cpu", WorkloadPhase.PRE_TERMINATE):
            raise OSError("ledger unwritable")

    driver, release = make(journal, on_phase=listener)
    with pytest.raises(WorkloadError, match="ledger unwritable"):
        run(full_life(driver))
    assert all(journal.count(k, "pre_terminate") == 1 for k in KEYS)
    assert all(journal.count(k, "post_terminate") == 1 for k in KEYS)
    assert release.count == 1
    assert driver.state is LifecycleState.DONE


def test_failing_listener_in_pre_create_counts_as_a_failure_with_teardown():
    journal = Journal()

    def listener(plugin, phase):
        if (plugin, phase) == ("cpu", WorkloadPhase.PRE_CREATE):
            raise OSError("ledger unwritable")

    driver, release = make(journal, on_phase=listener)
    with pytest.raises(OSError, match="ledger unwritable"):
        run(driver.prepare())
    assert journal.count("cpu", "post_terminate") == 1  # its pre_create had succeeded
    assert journal.count("mem", "pre_create") == 0
    assert release.count == 1


def test_events_follow_the_phases_and_observer_errors_are_contained():
    journal = Journal()
    seen = []

    def notify(event):
        seen.append(event.phase)
        raise RuntimeError("observer broke")

    driver, _release = make(journal, notify=notify)
    run(full_life(driver))
    assert seen == [p for p in WorkloadPhase if p is not WorkloadPhase.DEVICE_UNHEALTHY]


def test_no_post_terminate_event_when_pre_create_was_never_announced():
    journal = Journal()
    journal.faults[("cuda", "pre_create")] = WorkloadCreationDenied("no")
    seen = []
    driver, _release = make(journal, notify=lambda e: seen.append(e.phase))
    with pytest.raises(WorkloadCreationDenied):
        run(driver.prepare())
    assert seen == []


def test_calls_out_of_order_are_refused():
    journal = Journal()
    driver, _release = make(journal)
    with pytest.raises(WorkloadError, match="post_create"):
        run(driver.post_create())

    async def twice():
        await driver.prepare()
        await driver.prepare()

    with pytest.raises(WorkloadError, match="prepare"):
        run(twice())


def test_resume_runs_only_post_terminate_of_the_given_hooks():
    journal = Journal()
    hooks = [
        (DeviceName(k), RecordingHook(journal, k, Workload.process_tree("w"), {}))
        for k in ("cuda", "cpu")
    ]
    release = Release()
    driver = WorkloadLifecycle.resume(
        AgentId("a"), Workload.process_tree("w"), hooks, release=release
    )
    run(driver.post_terminate())
    run(driver.post_terminate())
    assert journal.calls == [("cpu", "post_terminate"), ("cuda", "post_terminate")]
    assert release.count == 1


@pytest.mark.parametrize(
    ("fault", "shown"),
    [
        (RuntimeError(), "RuntimeError"),
        (KeyError("slot"), "KeyError: 'slot'"),
        (WorkloadError("no room"), "no room"),  # accelkit's own errors need no type name
        (HookConflict("both set X"), "both set X"),
    ],
)
def test_hook_errors_name_the_plugin_and_the_hook(fault, shown):
    journal = Journal()
    journal.faults[("cpu", "post_create")] = fault
    driver, release = make(journal)
    with pytest.raises(WorkloadError) as info:
        run(full_life(driver))
    assert str(info.value) == f"plugin 'cpu' post_create: {shown}"
    assert type(info.value) is WorkloadError
    assert info.value.__cause__ is fault
    assert release.count == 1


def test_teardown_errors_name_each_plugin_and_hook():
    journal = Journal()
    journal.faults[("cuda", "pre_terminate")] = ValueError("bad state")
    journal.faults[("mem", "post_terminate")] = OSError("gone")
    driver, release = make(journal)
    with pytest.raises(WorkloadError) as info:
        run(full_life(driver))
    text = str(info.value)
    assert "plugin 'cuda' pre_terminate: ValueError: bad state" in text
    assert "plugin 'mem' post_terminate: OSError: gone" in text
    assert release.count == 1


def test_cancellation_inside_a_hook_is_not_renamed():
    journal = Journal()
    journal.faults[("cpu", "pre_create")] = asyncio.CancelledError()
    driver, release = make(journal)
    with pytest.raises(asyncio.CancelledError):
        run(driver.prepare())
    assert release.count == 1


def test_a_plugin_bug_while_creating_its_hook_is_named_and_tears_down_the_earlier_hooks():
    journal = Journal()
    fault = AttributeError("no attribute 'uuid'")
    journal.faults[("cpu", "create_lifecycle_hook")] = fault
    driver, release = make(journal)
    with pytest.raises(WorkloadError) as info:
        run(driver.prepare())
    named = "plugin 'cpu' create_lifecycle_hook: AttributeError: no attribute 'uuid'"
    assert str(info.value) == named
    assert info.value.__cause__ is fault
    assert journal.calls == [("cuda", "pre_create"), ("cuda", "post_terminate")]
    assert release.count == 1
