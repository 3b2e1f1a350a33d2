"""Metrics under time limits: a late plugin is left out and named, the others answer in time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accelkit import hookimpl
from accelkit.config import HostConfig
from accelkit.discovery import PluginLoader
from accelkit.host import PartitionHost
from accelkit.metrics import Measurement, MetricContext, MetricType, NodeMetric
from accelkit.metrics_export import (
    SCRAPE_ERROR,
    Exposition,
    MetricsGatherer,
    MetricsSnapshot,
    ScrapeErrorCollector,
)
from accelkit.metrics_export.exposition import scrape_budget
from accelkit.selection import PluginSelection
from accelkit.types import DeviceName

from .one_device_plugin import OneDevicePlugin

HANG = 30.0  # far above every limit below: a test that waited for it would show


class Plugin(OneDevicePlugin):
    key: ClassVar[DeviceName] = DeviceName("fast")
    hangs: ClassVar[bool] = False
    calls: ClassVar[list[str]]

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        self.calls.append(self.key)
        if self.hangs:
            await asyncio.sleep(HANG)
        return [NodeMetric("answered", MetricType.GAUGE, "", Measurement(Decimal(1)))]


def loader_of(*specs: tuple[str, bool], calls: list[str]) -> PluginLoader:
    loader = PluginLoader(PluginSelection())
    for key, hangs in specs:
        cls = type(f"{key}Plugin", (Plugin,), {"key": key, "hangs": hangs, "calls": calls})

        class Distribution:
            @hookimpl
            def accelkit_compute_plugins(self, config: Any, cls: Any = cls) -> Any:
                return [cls(config)]

        loader.register(Distribution(), key)
    loader.build()
    return loader


def config_with(call_timeout: str) -> HostConfig:
    import attrs

    config = HostConfig()
    plugins = attrs.evolve(config.plugins, call_timeout=Decimal(call_timeout))
    return attrs.evolve(config, plugins=plugins)


def run_with_host(call_timeout: str, body: Any, *specs: tuple[str, bool]) -> tuple[Any, list[str]]:
    calls: list[str] = []

    async def main() -> Any:
        loader = loader_of(*specs, calls=calls)
        async with PartitionHost.open(config_with(call_timeout), loader=loader) as host:
            return await body(MetricsGatherer(host, {}))

    return asyncio.run(main()), calls


def test_a_plugin_that_hangs_is_left_out_and_named_and_the_others_report():
    async def once(gatherer: MetricsGatherer) -> tuple[MetricsSnapshot, float]:
        began = time.monotonic()
        snapshot = await gatherer.gather()
        return snapshot, time.monotonic() - began

    (snapshot, took), _ = run_with_host("0.3", once, ("fast", False), ("slow", True))
    assert took < HANG / 2
    assert set(snapshot.node) == {"fast"}
    assert snapshot.errors == {"slow": "plugin 'slow' timed out after 0.3 s in gather_node_metrics"}


def test_the_scrape_budget_shortens_the_limit_but_never_lengthens_it():
    async def twice(gatherer: MetricsGatherer) -> tuple[MetricsSnapshot, MetricsSnapshot]:
        return await gatherer.gather(Decimal("0.2")), await gatherer.gather(Decimal(1000))

    (short, long), _ = run_with_host("0.4", twice, ("fast", False), ("slow", True))
    assert short.errors["slow"] == "plugin 'slow' timed out after 0.2 s in gather_node_metrics"
    assert long.errors["slow"] == "plugin 'slow' timed out after 0.4 s in gather_node_metrics"


def test_callers_during_a_gather_share_it():
    async def burst(gatherer: MetricsGatherer) -> list[MetricsSnapshot]:
        return list(await asyncio.gather(*(gatherer.gather() for _ in range(50))))

    snapshots, calls = run_with_host("0.3", burst, ("fast", False), ("slow", True))
    assert all(s is snapshots[0] for s in snapshots)
    # one round of plugin calls for fifty callers (each plugin on its own worker, in any order)
    assert sorted(calls) == ["fast", "slow"]


def test_a_caller_that_gives_up_does_not_cancel_the_gather_for_the_others():
    async def impatient(gatherer: MetricsGatherer) -> MetricsSnapshot:
        patient = asyncio.ensure_future(gatherer.gather())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(gatherer.gather(), 0.05)
        return await patient

    snapshot, calls = run_with_host("0.3", impatient, ("fast", False), ("slow", True))
    assert set(snapshot.node) == {"fast"}
    assert sorted(calls) == ["fast", "slow"]


def test_the_next_gather_asks_the_plugins_again():
    async def two(gatherer: MetricsGatherer) -> list[MetricsSnapshot]:
        return [await gatherer.gather(), await gatherer.gather()]

    snapshots, calls = run_with_host("0.3", two, ("fast", False))
    assert snapshots[0] is not snapshots[1]
    assert calls == ["fast", "fast"]


def scrape_errors(snapshot: MetricsSnapshot) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScrapeErrorCollector(lambda: snapshot))
    text = generate_latest(registry).decode()
    (family,) = text_string_to_metric_families(text)
    assert family.name == SCRAPE_ERROR
    return {s.labels["plugin"]: s.value for s in family.samples}


def test_the_scrape_error_gauge_is_one_for_each_missing_plugin_and_zero_for_the_others():
    metric = NodeMetric("answered", MetricType.GAUGE, "", Measurement(Decimal(1)))
    snapshot = MetricsSnapshot({"fast": (metric,)}, errors={"slow": "timed out", "bad": "boom"})
    assert scrape_errors(snapshot) == {"bad": 1.0, "fast": 0.0, "slow": 1.0}
    assert scrape_errors(MetricsSnapshot()) == {}


def test_a_scrape_renders_the_answering_plugins_and_names_the_late_one():
    async def scrape(gatherer: MetricsGatherer) -> tuple[bytes, str]:
        return await Exposition(gatherer).render(Decimal("0.2"), None)

    (body, content_type), _ = run_with_host("30", scrape, ("fast", False), ("slow", True))
    assert content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert "accelkit_fast_node_answered" in families
    assert not any(name.startswith("accelkit_slow_") for name in families)
    errors = {s.labels["plugin"]: s.value for s in families[SCRAPE_ERROR].samples}
    assert errors == {"fast": 0.0, "slow": 1.0}


def test_openmetrics_is_rendered_when_asked_for():
    async def scrape(gatherer: MetricsGatherer) -> tuple[bytes, str]:
        return await Exposition(gatherer).render(None, "application/openmetrics-text")

    (body, content_type), _ = run_with_host("1", scrape, ("fast", False))
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


@pytest.mark.parametrize(
    ("header", "budget"),
    [
        (None, None),
        ("10", Decimal("9.5")),
        ("0.3", Decimal("0.1")),
        ("2.5", Decimal(2)),
        ("", None),
        ("soon", None),
        ("-1", None),
        ("0", None),
        ("NaN", None),
        ("Infinity", None),
    ],
)
def test_the_scrape_budget_comes_from_the_prometheus_header(header, budget):
    assert scrape_budget(header) == budget


@given(st.text(max_size=20))
def test_any_header_gives_no_budget_or_a_positive_one(header):
    budget = scrape_budget(header)
    assert budget is None or budget >= Decimal("0.1")
