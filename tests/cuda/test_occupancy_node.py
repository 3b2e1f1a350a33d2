"""Held GPU-seconds of a real node over a fake NVML: bookings and releases on a schedule, read
from the ledger by an injected clock, as the Prometheus counter and in ``status --json``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from accelkit.cli.status_cmd import _held
from accelkit.metrics_export.exposition import Exposition
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.node import Node
from accelkit.types import Workload, WorkloadType
from accelkit.workload.occupancy import read_held

from . import fake_nvml as fk
from .test_node_health import AGENT, node_over

NS = 10**9
#: (workload, book at s, release at s or None); one GPU each
SCHEDULE = [("pid:1", 0, 30), ("slurm:5.0", 10, 25), ("k8s:nvidia.com/gpu:x", 12, None)]


async def _scrape(node: Node) -> dict[tuple[str, ...], float]:
    found = node.host.device_map
    exposition = Exposition(
        MetricsGatherer(node.host),
        lambda: {k: v.devices for k, v in found.items()},
        held=lambda: read_held(
            node.bookkeeper.ledger,
            {str(k): [d.device_id for d in v.devices] for k, v in found.items()},
        ),
    )
    body, _type = await exposition.render(None, None)
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == "accelkit_device_held_seconds_total":
                labels = s.labels
                key = (labels["device"], labels["workload"], labels["entry"])
                samples[key] = s.value
    return samples


def test_held_seconds_follow_the_schedule(tmp_path: Path, sysfs: Path) -> None:
    nvml = fk.FakeNVML(fk.gpus(4))
    now = [1_700_000_000 * NS]

    async def main() -> None:
        async with node_over(tmp_path, nvml, sysfs) as node:
            node.bookkeeper.ledger.clock = lambda: now[0]
            start = now[0]
            devices: dict[str, str] = {}
            events = sorted(
                [(at, 1, w) for w, at, _r in SCHEDULE]
                + [(r, 0, w) for w, _a, r in SCHEDULE if r is not None]
            )
            for at, book, workload in events:
                now[0] = start + at * NS
                if book:
                    record = await node.book(
                        AGENT, Workload(workload, WorkloadType.PROCESS_TREE), {"cuda.device": 1}
                    )
                    (devices[workload],) = record.allocation["cuda"]["cuda.device"]
                else:
                    node.bookkeeper.release((AGENT, workload))  # its lifecycle's release
            now[0] = start + 40 * NS
            scraped = await _scrape(node)
            assert scraped == {
                (devices["pid:1"], "pid:1", "run"): 30.0,
                (devices["slurm:5.0"], "slurm:5.0", "slurm"): 15.0,
                (devices["k8s:nvidia.com/gpu:x"], "k8s:nvidia.com/gpu:x", "pod"): 28.0,
                **{(d, "", ""): 0.0 for d in ("cuda3",)},  # never held: shown, at 0
            }
            # status --json: the seconds each live workload has held its devices so far
            held = _held(node.bookkeeper.ledger)
            assert held == {
                ("agent-1", "k8s:nvidia.com/gpu:x"): {
                    "cuda": {devices["k8s:nvidia.com/gpu:x"]: "28"}
                }
            }
            # later scrapes only grow; released workloads keep their seconds
            now[0] += 5 * NS
            later = await _scrape(node)
            assert later[(devices["pid:1"], "pid:1", "run")] == 30.0
            assert later[(devices["k8s:nvidia.com/gpu:x"], "k8s:nvidia.com/gpu:x", "pod")] == 33.0

    asyncio.run(main())
