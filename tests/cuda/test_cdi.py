"""The CDI spec of an agent's GPUs, from the cuda hook, as CDI runtimes load it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema

from accelkit.partition import DevicePartition
from accelkit.types import AgentId, DeviceName
from accelkit.workload.cdi_spec import agent_cdi_spec

from . import fake_nvml as fk

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "cdi-schema.json").read_text())
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def spec_of(plugin) -> dict:
    ids = [d.device_id for d in plugin.devices]
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of(*ids))
    return asyncio.run(
        agent_cdi_spec(AgentId("agent-1"), {DeviceName("cuda"): ctx}, "accelkit.io/gpus")
    )


def test_each_gpu_brings_its_nodes_and_only_all_names_the_list(start):
    spec = spec_of(start(fk.gpus(2)))
    jsonschema.validate(spec, SCHEMA)
    assert spec["cdiVersion"] == "0.3.0"  # nodes at their own paths and env only
    edits = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert list(edits) == ["cuda-cuda0", "cuda-cuda1", "all"]
    for index, name in enumerate(["cuda-cuda0", "cuda-cuda1"]):
        assert [n["path"] for n in edits[name]["deviceNodes"]] == [f"/dev/nvidia{index}", *CONTROL]
        # NVIDIA_VISIBLE_DEVICES differs per GPU: requesting both would keep only the last one
        assert edits[name]["env"] == [
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            f"ACCELKIT_CDI_CUDA_CUDA{index}={name}",  # the device's own name, for the listing
        ]
    uuids = ",".join(g.uuid for g in fk.gpus(2))
    assert f"NVIDIA_VISIBLE_DEVICES={uuids}" in edits["all"]["env"]


def test_mig_instances_bring_their_caps_nodes(start, proc):
    fk.write_mig_minors(proc, {"gpu0/gi7/access": 66, "gpu0/gi7/ci0/access": 67})
    spec = spec_of(start([fk.mig_gpu(0, ["1g.10gb"])]))
    jsonschema.validate(spec, SCHEMA)
    (single, every) = spec["devices"]
    assert single["name"] == "cuda-cuda0-mig7"
    paths = [n["path"] for n in single["containerEdits"]["deviceNodes"]]
    assert paths[-2:] == ["/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67"]
    # one device alone cannot collide: it keeps its variables
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=MIG-") for e in single["containerEdits"]["env"])
    assert every["name"] == "all"
