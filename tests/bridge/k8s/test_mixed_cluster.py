"""``accelkit run``, device-plugin pods and DRA claims on one node of the real cluster.

Both bridges run side by side over one ledger and four mock GPUs, and a seeded random sequence
of operations starts and stops the three kinds of holder (see ``mixed_node.py``). After every
operation, once the bridges advertise what the ledger holds:

- no GPU is held by two live holders: what each run and device-plugin pod got (its
  ``$MOCK_CUDA_DEVICES``), each claim's allocation (the same as its CDI spec), and the
  ledger's bookings;
- a start is granted whenever a GPU was free before it, and refused (``accelkit run`` exits
  125, the kubelet rejects the pod or the scheduler finds no room) only when none was.

``ACCELKIT_K8S_MIXED_OPS`` sets the number of operations (150 by default, about 100 s; 300 take
about 3.5 minutes), ``ACCELKIT_K8S_MIXED_SEED`` the seed (printed, so that a failure can be
replayed).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .mixed_node import Holders, MixedNode, mixed_node, wait
from .real_cluster import Cluster

pytestmark = pytest.mark.k8s

GPUS = 4
KINDS = ("run", "pod", "claim")
#: the runtime of each kind's bookings in the ledger
RUNTIMES = {"run": "process", "pod": "kubelet-pods", "claim": "k8s-claims"}
REFUSED = 125


def operations() -> int:
    return int(os.environ.get("ACCELKIT_K8S_MIXED_OPS", "150"))


def seed() -> int:
    configured = os.environ.get("ACCELKIT_K8S_MIXED_SEED")
    return int(configured) if configured else random.SystemRandom().randrange(1 << 32)


class Mix:
    """The operations, their outcomes and the checks after each."""

    def __init__(self, node: MixedNode) -> None:
        self.node = node
        self.tally: Counter[str] = Counter()
        self.log: list[str] = []
        self.refusal = ""

    def live(self, kind: str) -> list[str]:
        if kind == "run":
            return sorted(self.node.runs)
        return sorted(n for n, k in self.node.pods.items() if k == kind)

    def step(self, index: int, rng: random.Random) -> None:
        kind = rng.choice(KINDS)
        live = self.live(kind)
        free = self.node.free()
        began = time.monotonic()
        if live and rng.random() < 0.5:
            name = rng.choice(live)
            self.stop(kind, name)
            self.log.append(f"{index}: stop {kind} {name} (free before: {free})")
        else:
            name = f"mx-{kind}-{index}"
            outcome = self.start(kind, name, free)
            self.log.append(f"{index}: start {kind} {name}: {outcome} (free before: {free})")
        self.tally["operations"] += 1
        acted = time.monotonic()
        self.check()
        self.log[-1] += f" [{acted - began:.2f} s, checked in {time.monotonic() - acted:.2f} s]"

    # --- starting and stopping ------------------------------------------------------------

    def start(self, kind: str, name: str, free: list[str]) -> str:
        granted = self.start_run(name) if kind == "run" else self.start_pod(kind, name, free)
        if granted is None:
            self.tally[f"refused {kind}"] += 1
            assert not free, self.fail(f"{kind} {name} refused while {free} were free")
            return f"refused ({self.refusal})"
        self.tally[f"granted {kind}"] += 1
        assert free, self.fail(f"{kind} {name} granted {granted} while no GPU was free")
        return f"granted {granted}"

    def start_run(self, name: str) -> str | None:
        run = self.node.start_run(name)
        got = wait(lambda: run.got() or run.process.poll() is not None, f"run {name} to go on")
        if isinstance(got, str):
            return got
        assert run.process.stderr is not None
        err = run.process.stderr.read()
        del self.node.runs[name]
        self.refusal = err.strip().splitlines()[-1] if err.strip() else ""
        assert run.process.returncode == REFUSED, self.fail(f"run {name}: {err}")
        assert "error:" in err, self.fail(f"run {name} refused without saying why: {err}")
        return None

    def start_pod(self, kind: str, name: str, free: list[str]) -> str | None:
        self.node.create_pod(name, kind)

        def outcome() -> str | None:
            status = self.node.pod(name).status
            if status.phase == "Running":
                got = self.node.got(name) if kind == "pod" else self.node.prepared(name)
                return f"granted:{got}" if got else None
            if status.phase == "Failed":
                return f"rejected:{status.reason}: {status.message}"
            unscheduled = any(
                c.type == "PodScheduled" and c.status == "False" for c in status.conditions or []
            )
            # with a GPU free, the scheduler may not have seen it yet: wait for it
            return "no room" if unscheduled and not free else None

        seen = str(wait(outcome, f"{kind} {name} to run or be refused"))
        if seen.startswith("granted:"):
            return seen.removeprefix("granted:")
        self.refusal = seen
        self.node.delete_pod(name)
        return None

    def stop(self, kind: str, name: str) -> None:
        if kind == "run":
            self.node.stop_run(name)
        else:
            self.node.delete_pod(name)
        self.tally[f"stopped {kind}"] += 1

    # --- the checks -----------------------------------------------------------------------

    def check(self) -> None:
        """No double grant now; then wait until the ledger and the bridges show exactly the
        live holders (a stopped holder's booking is freed, its GPU advertised again)."""
        holders = self.node.holders()
        self.no_double(holders)
        wanted = self.expected(holders)

        def consistent() -> bool:
            booked = self.node.booked()
            self.no_double(holders, booked)
            now = {d: h[0][0] for d, h in booked.items()}
            return now == wanted and self.node.settled() is None

        try:
            wait(consistent, "the ledger and the bridges to show the live holders")
        except AssertionError:
            raise AssertionError(
                self.fail(
                    f"live holders {holders.devices}, ledger {self.node.booked()}, "
                    f"bridges: {self.node.settled()}; the device plugin's last events: "
                    f"{self.node.bridge.events[-8:] if self.node.bridge else []}"
                )
            ) from None

    def expected(self, holders: Holders) -> dict[str, str]:
        wanted: dict[str, str] = {}
        for holder, devices in holders.devices.items():
            kind = holder.split(":", 1)[0]
            for device in devices:
                wanted[device] = RUNTIMES[kind]
        return wanted

    def no_double(self, holders: Holders, booked: dict[str, Any] | None = None) -> None:
        doubles = holders.doubles()
        if booked is not None:
            doubles.update({d: h for d, h in booked.items() if len(h) > 1})
        if doubles:
            self.tally["double grants"] += len(doubles)
        assert not doubles, self.fail(f"GPUs held twice: {doubles}")

    def fail(self, what: str) -> str:
        recent = "\n".join(self.log[-15:])
        return f"{what}\nafter {dict(self.tally)}; the last operations:\n{recent}"


def test_run_pods_and_claims_never_share_a_gpu(k8s_cluster: Cluster, k8s_root: Path) -> None:
    count, chosen = operations(), seed()
    print(f"mixed operations: {count}, seed {chosen} (ACCELKIT_K8S_MIXED_SEED replays it)")
    rng = random.Random(chosen)
    began = time.monotonic()
    with mixed_node(k8s_cluster, k8s_root, GPUS) as node:
        mix = Mix(node)
        for index in range(count):
            mix.step(index, rng)
        granted = {k: mix.tally[f"granted {k}"] for k in KINDS}
        refused = {k: mix.tally[f"refused {k}"] for k in KINDS}
        print(
            f"{mix.tally['operations']} operations in {time.monotonic() - began:.0f} s: "
            f"granted {granted}, refused {refused}, stopped "
            f"{ {k: mix.tally[f'stopped {k}'] for k in KINDS} }, "
            f"double grants {mix.tally['double grants']}"
        )
    assert mix.tally["operations"] == count
    assert all(granted.values()), granted  # each kind was granted at least once
