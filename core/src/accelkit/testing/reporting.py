"""Every failed conformance check reports one sentence: plugin, rule broken, and the fix.

Most checks fail through :func:`~accelkit.testing.expectations.fail_rule` and say so
themselves. The rest (a plain expectation, or an exception a broken plugin raised inside a
check: a ``float`` where a ``Decimal`` belongs, a method that is not a coroutine) are rewritten
here, by the pytest hook the kit's plugin module exports, into the same form, so that a vendor
always reads ``breaks the rule ...`` and ``Fix: ...`` first; an exception's traceback follows.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from accelkit.testing.expectations import broken_rule

__all__ = ["FIXES", "pytest_runtest_makereport", "rule_of"]

#: check name -> how to fix what it found, for the checks that do not say it themselves
FIXES = {
    "test_devices_are_named_for_the_plugin": (
        "give every device of list_devices() a unique device_id and the plugin's key as device_name"
    ),
    "test_every_device_slot_is_a_configurable_slot": (
        "make device_slots() describe each device with a slot of configurable_slots(), of the "
        "type declared there, and the device's own NUMA node"
    ),
    "test_device_slots_cover_only_the_devices_asked_for": (
        "build device_slots() from the devices it is given, never from all the plugin found"
    ),
    "test_devices_are_listed_in_the_same_order_every_time": (
        "sort the devices in list_devices() (natural_sort_key on the id)"
    ),
    "test_node_metrics_are_well_formed": (
        "make gather_node_metrics an `async def` returning NodeMetrics in a unit of the table "
        "(docs/metrics.md), with readings for the plugin's own devices only"
    ),
    "test_node_info_is_a_node_info": "make get_node_info an `async def` returning a NodeInfo",
}


def rule_of(check: str) -> str:
    """A check's rule in words: ``test_devices_are_named_for_the_plugin`` reads
    ``devices are named for the plugin``."""
    return check.removeprefix("test_").replace("_", " ")


def _fix(check: str, exc: BaseException) -> str:
    if isinstance(exc, ValueError) and "a coroutine was expected" in str(exc):
        return "declare the plugin's methods `async def` as accelkit.plugin does"
    if isinstance(exc, TypeError) and "float" in str(exc):
        return "use int or Decimal for amounts and readings, never float"
    return FIXES.get(check, f"make the plugin keep the rule {rule_of(check)!r} (the line above)")


def _is_conformance(item: pytest.Item) -> bool:
    from accelkit.testing.suite import PluginConformance

    cls = getattr(item, "cls", None)
    return isinstance(cls, type) and issubclass(cls, PluginConformance)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed conformance check whose message is not yet a broken rule is made one."""
    report = yield
    if report.when != "call" or not report.failed or call.excinfo is None:
        return report
    if not _is_conformance(item):
        return report
    exc = call.excinfo.value
    text = str(exc) if isinstance(exc, pytest.fail.Exception) else ""
    if "breaks the rule" in text:
        return report
    funcargs = getattr(item, "funcargs", {})
    plugin = funcargs.get("plugin", funcargs.get("started"))
    check = getattr(item, "originalname", item.name)
    if isinstance(exc, pytest.fail.Exception):
        problem, trace = text, ""
    else:
        problem = f"the check raised {type(exc).__name__}: {exc}"
        trace = f"\n\n{report.longreprtext}"
    report.longrepr = broken_rule(plugin, rule_of(check), problem, _fix(check, exc)) + trace
    return report
