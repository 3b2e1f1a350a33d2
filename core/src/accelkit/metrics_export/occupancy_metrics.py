"""Held device-seconds as a Prometheus counter, from the ledger (see ``occupancy``).

``accelkit_device_held_seconds_total{plugin,device,agent,workload,entry}`` counts the seconds
each workload held each device (a shared device counts in full for each holder); ``entry`` is
how the workload came (``run``, ``pod``, ``claim``, ``slurm``). A device never held reads 0
with empty ``agent``, ``workload`` and ``entry``, so idle devices are seen, not missing.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from accelkit.errors import AccelkitError
from accelkit.workload.occupancy import HeldSeconds

log = logging.getLogger(__name__)

__all__ = ["HELD", "HeldSecondsCollector"]

HELD = "accelkit_device_held_seconds"


class HeldSecondsCollector(Collector):
    """The held-seconds counter of what ``source()`` reads, on every scrape; a ledger that
    cannot be read leaves the counter out of that scrape (logged)."""

    def __init__(self, source: Callable[[], Sequence[HeldSeconds]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        held = CounterMetricFamily(
            HELD,
            "Seconds each workload held each device, from the ledger's bookings",
            labels=["plugin", "device", "agent", "workload", "entry"],
        )
        try:
            found = self._source()
        except (AccelkitError, sqlite3.Error) as exc:
            # the scrape still answers with everything else
            log.warning("metrics: cannot read the held device-seconds from the ledger: %s", exc)
            return
        for h in found:
            # prometheus-client only takes floats: the one place seconds become a float
            held.add_metric([h.plugin, h.device, h.agent, h.workload, h.entry], float(h.seconds))
        yield held
