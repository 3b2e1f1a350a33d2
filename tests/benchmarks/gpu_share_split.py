"""How CUDA MPS splits a GPU's SMs between two workloads given 0.5 of it each (a real GPU).

The cuda plugin (``shares = "enforced"``) gives two workloads ``cuda.shares`` 0.5 of one GPU;
each runs a CUDA program timing a compute-bound kernel (``tests/cuda/spin_kernel.py``) in the
environment the plugin gave it. Measured, as median milliseconds per launch:

- ``full``: the program alone on the whole GPU, no MPS (the floor);
- ``timesliced``: two such programs side by side on the whole GPU, no MPS (what sharing without
  enforcement gives: the driver time-slices them);
- ``share_alone``: one program under its 0.5 share, the other share idle;
- ``share_beside``: both programs under their shares, launched together.

With the SMs split, ``share_alone`` is about twice ``full`` and ``share_beside`` about
``share_alone``: a workload's compute does not depend on its neighbour. Run from the repository
root on a machine with an NVIDIA GPU and ``nvidia-cuda-mps-control`` (the GPU's settings are left
as they are; the MPS daemon is stopped at the end)::

    python tests/benchmarks/gpu_share_split.py --iters 200000 --launches 10

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from types import ModuleType

from accelkit.partition import DevicePartition
from accelkit.types import Workload
from accelkit_cuda import CUDAPlugin
from accelkit_cuda.mps import MPS


def _spin_kernel() -> ModuleType:
    path = Path(__file__).parents[1] / "cuda" / "spin_kernel.py"
    spec = importlib.util.spec_from_file_location("spin_kernel", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=200_000, help="FMAs per thread a launch")
    parser.add_argument("--launches", type=int, default=10, help="timed launches a program")
    parser.add_argument("--blocks-per-sm", type=int, default=32)
    args = parser.parse_args()
    spin = _spin_kernel()

    with tempfile.TemporaryDirectory() as tmp:
        plugin = CUDAPlugin(
            {"allocation": "fractional", "shares": "enforced", "mps-directory": f"{tmp}/mps"}
        )
        asyncio.run(plugin.init())
        try:
            asyncio.run(plugin.discover())
            device = next(d for d in plugin.devices if "parent_id" not in d.extra)
            blocks = args.blocks_per_sm * max(1, device.processing_units)
            plain = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
            whole = {**plain, "CUDA_VISIBLE_DEVICES": str(device.uuid)}

            def timed(envs: list[dict[str, str]]) -> list[float]:
                return spin.time_together(  # type: ignore[no-any-return]
                    sys.executable, envs, blocks, args.iters, args.launches
                )

            (full,) = timed([whole])
            timesliced = timed([whole, whole])
            ctx = plugin.create_agent_context("agent-1", DevicePartition.of(device.device_id))
            alloc = {"cuda.shares": {device.device_id: Decimal("0.5")}}
            hooks = [
                ctx.create_lifecycle_hook(Workload.process_tree(f"pid:split-{n}"), alloc)
                for n in (1, 2)
            ]
            envs = []
            try:
                for hook in hooks:
                    config = asyncio.run(hook.pre_create())
                    envs.append({**plain, **config.env_vars})
                (share_alone,) = timed(envs[:1])
                share_beside = timed(envs)
            finally:
                for hook in hooks:
                    asyncio.run(hook.post_terminate())
            assert plugin.mps is not None
            assert device.uuid is not None
            stopped = not MPS(plugin.mps.control, plugin.mps.root).running(device.uuid)
        finally:
            asyncio.run(plugin.cleanup())

    print(
        json.dumps(
            {
                "gpu": device.model_name,
                "uuid": device.uuid,
                "sms": device.processing_units,
                "blocks": blocks,
                "iters": args.iters,
                "enforcement": envs[0].get("ACCELKIT_CUDA_SHARE_ENFORCEMENT"),
                "sm_percent": envs[0].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                "median_ms": {
                    "full": round(full, 2),
                    "timesliced": [round(t, 2) for t in timesliced],
                    "share_alone": round(share_alone, 2),
                    "share_beside": [round(t, 2) for t in share_beside],
                },
                "ratios": {
                    "share_alone/full": round(share_alone / full, 2),
                    "share_beside/share_alone": round(max(share_beside) / share_alone, 2),
                    "timesliced/full": round(max(timesliced) / full, 2),
                },
                "daemon_stopped": stopped,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
