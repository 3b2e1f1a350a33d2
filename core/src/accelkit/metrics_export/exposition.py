"""A snapshot rendered for one scrape: the format the scraper asked for, gathered in time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.health_metrics import HealthCollector
from accelkit.metrics_export.occupancy_metrics import HeldSecondsCollector
from accelkit.metrics_export.prometheus import SnapshotCollector
from accelkit.metrics_export.scrape_errors import ScrapeErrorCollector
from accelkit.metrics_export.snapshot import MetricsSnapshot
from accelkit.node.health_board import HealthBoard
from accelkit.types import ComputeDevice
from accelkit.workload.occupancy import HeldSeconds

__all__ = ["SCRAPE_TIMEOUT_HEADER", "Exposition", "scrape_budget"]

#: the header in which Prometheus sends its scrape timeout, in seconds
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
#: kept back from the scraper's timeout for rendering and sending the answer
MARGIN = Decimal("0.5")
SHORTEST = Decimal("0.1")


def scrape_budget(header: str | None) -> Decimal | None:
    """How long the plugins may take for a scrape whose timeout header reads ``header``.

    ``None`` (no header, or one that is not a positive number): the gatherer's own limit.
    """
    if header is None:
        return None
    try:
        seconds = Decimal(header.strip())
    except InvalidOperation:
        return None
    if not seconds.is_finite() or seconds <= 0:
        return None
    return max(seconds - MARGIN, SHORTEST)


class Exposition:
    """Gathers on request and renders with prometheus-client; one rendering per snapshot/format.

    Scrapes that share a gather (see :class:`MetricsGatherer`) share its rendered text too.
    ``health``, when given, returns the node's health board: every scrape then carries the
    device health series (:mod:`accelkit.metrics_export.health_metrics`), read fresh;
    ``held``, when given, the held device-seconds
    (:mod:`accelkit.metrics_export.occupancy_metrics`), read fresh too.
    """

    def __init__(
        self,
        gatherer: MetricsGatherer,
        devices: Callable[[], Mapping[str, Iterable[ComputeDevice]]] | None = None,
        *,
        health: Callable[[], HealthBoard] | None = None,
        held: Callable[[], Sequence[HeldSeconds]] | None = None,
    ) -> None:
        self.gatherer = gatherer
        self._devices = devices
        self._health = health
        self._held = held
        self._last: tuple[MetricsSnapshot, str, bytes] | None = None

    async def render(self, budget: Decimal | None, accept: str | None) -> tuple[bytes, str]:
        """The body and content type of one scrape (``accept``: the request's Accept header)."""
        snapshot = await self.gatherer.gather(budget)
        encoder, content_type = choose_encoder(accept or "")
        last = self._last
        if (
            last is not None
            and last[0] is snapshot
            and last[1] == content_type
            # health and held seconds change between gathers: render them each time
            and self._health is None
            and self._held is None
        ):
            return last[2], content_type
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(lambda: snapshot, self._devices))
        registry.register(ScrapeErrorCollector(lambda: snapshot))
        if self._health is not None:
            registry.register(HealthCollector(self._health))
        if self._held is not None:
            registry.register(HeldSecondsCollector(self._held))
        body = encoder(registry)
        self._last = (snapshot, content_type, body)
        return body, content_type
