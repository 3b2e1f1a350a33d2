"""`accelkit cdi`: the CDI spec of an agent's devices, as the CDI reference library accepts it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest

from accelkit.runtime.render.cdi import cdi_container_edits
from accelkit.testing.cli_runner import run_accelkit
from accelkit.types import Mount, MountType, WorkloadConfig
from accelkit.workload.cdi_spec import (
    ALL,
    default_cdi_kind,
    own_variable,
    unique_names,
    with_own_variables,
    without_colliding_env,
)

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "cdi-schema.json").read_text())

DEVICES = """
[[kinds]]
key = "cpu"
[[kinds.devices]]
id = "0"

[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
[[kinds.devices]]
id = "cuda1"
[[kinds.devices]]
id = "cuda2"
"""


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "devices.toml").write_text(DEVICES)
    config = tmp_path / "host.toml"
    config.write_text(
        '[resource]\nallocation-mode = "auto-split"\nreserved-cpu = 0\n'
        f'state-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
        '[[agents]]\n[agents.agent]\nid = "agent-1"\n[[agents]]\n[agents.agent]\nid = "agent-2"\n'
    )
    return config


def accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args)


def test_prints_a_valid_spec_of_the_agents_devices_only(node):
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    jsonschema.validate(spec, SCHEMA)
    assert spec["cdiVersion"] == "0.3.0"  # env only: the oldest version the library reads
    assert spec["kind"] == "accelkit.io/agent-1"
    edits = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    # auto-split: agent-1 holds cuda0 and cuda1; cpu is not a CDI device. Each mock device sets
    # only MOCK_CUDA_DEVICES, which two requested devices would overwrite: the list stays in
    # "all", and each single device keeps the variable naming itself
    assert edits == {
        "cuda-cuda0": {"env": ["ACCELKIT_CDI_CUDA_CUDA0=cuda-cuda0"]},
        "cuda-cuda1": {"env": ["ACCELKIT_CDI_CUDA_CUDA1=cuda-cuda1"]},
        "all": {
            "env": [
                "MOCK_CUDA_DEVICES=cuda0,cuda1",
                "ACCELKIT_CDI_CUDA_CUDA0=cuda-cuda0",
                "ACCELKIT_CDI_CUDA_CUDA1=cuda-cuda1",
            ]
        },
    }


def one_agent_node(tmp_path: Path, devices: str) -> Path:
    (tmp_path / "devices.toml").write_text(devices)
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nreserved-cpu = 0\nstate-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
    )
    return config


def cdi_devices(config: Path) -> dict[str, dict[str, list[object]]]:
    result = accelkit("cdi", "--config", str(config), "--agent", "agent-1")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    jsonschema.validate(spec, SCHEMA)
    return {d["name"]: d["containerEdits"] for d in spec["devices"]}


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_every_device_of_an_env_only_plugin_is_listed_whatever_the_count(tmp_path, count):
    ids = [f"cuda{i}" for i in range(count)]
    listing = "".join(f'[[kinds.devices]]\nid = "{i}"\n' for i in ids)
    edits = cdi_devices(one_agent_node(tmp_path, f'[[kinds]]\nkey = "cuda"\n{listing}'))
    assert list(edits) == [*(f"cuda-{i}" for i in ids), "all"]
    own = [f"ACCELKIT_CDI_CUDA_{i.upper()}=cuda-{i}" for i in ids]
    for i, variable in zip(ids, own, strict=True):
        single = edits[f"cuda-{i}"]["env"]
        assert variable in single
        # one device alone sets the plugin's list for itself; among several nobody claims it
        assert ("MOCK_CUDA_DEVICES=cuda0" in single) == (count == 1)
        assert not any(v.startswith("MOCK_CUDA_DEVICES=") for v in single[count == 1 :])
    assert edits["all"]["env"] == [f"MOCK_CUDA_DEVICES={','.join(ids)}", *own]


def test_devices_sharing_a_device_node_give_it_once(tmp_path):
    shared = '\ndevice-node = "/dev/null"\n'
    edits = cdi_devices(
        one_agent_node(
            tmp_path,
            f'[[kinds]]\nkey = "cuda"\n[[kinds.devices]]\nid = "cuda0"{shared}'
            f'[[kinds.devices]]\nid = "cuda1"{shared}',
        )
    )
    node = [{"path": "/dev/null", "permissions": "rwm"}]
    assert edits["cuda-cuda0"]["deviceNodes"] == node
    assert edits["cuda-cuda1"]["deviceNodes"] == node
    assert edits["all"]["deviceNodes"] == node


def test_identical_nodes_and_mounts_are_written_once_and_differing_ones_kept():
    null, lib = Mount.device("/dev/null"), Mount("/usr/lib", "/vendor", MountType.BIND)
    edits = cdi_container_edits(
        WorkloadConfig(mounts=[null, lib, null, lib, Mount("/usr/lib", "/vendor", read_only=True)])
    )
    assert edits["deviceNodes"] == [{"path": "/dev/null", "permissions": "rwm"}]
    assert [m["options"][0] for m in edits["mounts"]] == ["rw", "ro"]


def test_each_device_variable_names_that_device_alone():
    singles = [(n, WorkloadConfig(env_vars={"L": n})) for n in ["gpu-0", "gpu.0", "gpu_0", "a:b"]]
    devices = dict(with_own_variables(singles, WorkloadConfig(env_vars={"L": "all of them"})))
    assert devices["gpu-0"].env_vars == {"ACCELKIT_CDI_GPU_0": "gpu-0"}
    assert devices["gpu.0"].env_vars == {"ACCELKIT_CDI_GPU_0_2": "gpu.0"}
    assert devices["gpu_0"].env_vars == {"ACCELKIT_CDI_GPU_0_3": "gpu_0"}
    assert devices["a:b"].env_vars == {"ACCELKIT_CDI_A_B": "a:b"}
    assert devices[ALL].env_vars == {
        "L": "all of them",
        **{k: v for n, _c in singles for k, v in devices[n].env_vars.items()},
    }
    assert own_variable("cuda-MIG-1g.5gb") == "ACCELKIT_CDI_CUDA_MIG_1G_5GB"


def test_writes_the_spec_into_a_directory(node, tmp_path):
    out = tmp_path / "cdi"
    result = accelkit(
        "cdi",
        "--config",
        str(node),
        "--agent",
        "agent-2",
        "--output",
        str(out),
        "--kind",
        "example.com/gpu",
    )
    assert result.returncode == 0, result.stderr
    written = out / "example.com-gpu.json"
    assert result.stdout.strip() == str(written)
    spec = json.loads(written.read_text())
    jsonschema.validate(spec, SCHEMA)
    # one device: its variables cannot collide, so it keeps them
    assert [d["name"] for d in spec["devices"]] == ["cuda-cuda2", "all"]
    assert spec["devices"][0]["containerEdits"] == {
        "env": ["MOCK_CUDA_DEVICES=cuda2", "ACCELKIT_CDI_CUDA_CUDA2=cuda-cuda2"]
    }
    assert [p.name for p in out.iterdir()] == ["example.com-gpu.json"]


def test_output_never_silently_replaces_another_spec(node, tmp_path):
    out = tmp_path / "cdi"
    common = ("cdi", "--config", str(node), "--output", str(out), "--kind", "example.com/gpu")
    assert accelkit(*common, "--agent", "agent-1").returncode == 0
    written = out / "example.com-gpu.json"
    first = written.read_text()
    # the same spec again is fine (idempotent)
    assert accelkit(*common, "--agent", "agent-1").returncode == 0
    result = accelkit(*common, "--agent", "agent-2")
    assert result.returncode == 2
    assert f"error: '{written}' already holds another spec of kind 'example.com/gpu'" in (
        result.stderr
    )
    assert "--replace" in result.stderr
    assert written.read_text() == first
    result = accelkit(*common, "--agent", "agent-2", "--replace")
    assert result.returncode == 0, result.stderr
    assert "cuda2" in written.read_text()


def test_agents_whose_ids_make_the_same_class_get_distinct_kinds(tmp_path):
    (tmp_path / "devices.toml").write_text(DEVICES)
    config = tmp_path / "host.toml"
    assert default_cdi_kind("agent-1") == "accelkit.io/agent-1"
    assert default_cdi_kind("gpu.node") != default_cdi_kind("gpu-node")
    assert "." not in default_cdi_kind("gpu.node").partition("/")[2]  # a dot needs spec 0.6.0
    agents = "".join(f'[[agents]]\n[agents.agent]\nid = "{a}"\n' for a in ("x", "x-", "0"))
    config.write_text(
        '[resource]\nallocation-mode = "auto-split"\nreserved-cpu = 0\n'
        f'state-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
        + agents
    )
    out = tmp_path / "cdi"
    kinds = []
    for agent in ("x", "x-", "0"):
        result = accelkit("cdi", "--config", str(config), "--agent", agent, "--output", str(out))
        assert result.returncode == 0, result.stderr
        spec = json.loads(Path(result.stdout.strip()).read_text())
        jsonschema.validate(spec, SCHEMA)
        kinds.append(spec["kind"])
    # a one-letter class would crash the CDI library's check: both get a digest of their id
    assert kinds[0].startswith("accelkit.io/x-")
    assert kinds[1].startswith("accelkit.io/x-")
    assert kinds[1] != kinds[0]
    # a class must start with a letter
    assert kinds[2].startswith("accelkit.io/agent-0-")
    assert len(list(out.iterdir())) == 3


def test_unknown_agent_and_bad_kind_exit_2(node):
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-9")
    assert result.returncode == 2
    assert "unknown agent 'agent-9'" in result.stderr
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--kind", "nokind")
    assert result.returncode == 2
    assert "not a CDI kind" in result.stderr
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--kind", "9vendor.com/x")
    assert result.returncode == 2
    assert "the vendor '9vendor.com' must start with a letter" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_agent_without_accelerators_is_an_error(tmp_path):
    (tmp_path / "devices.toml").write_text('[[kinds]]\nkey = "cpu"\n[[kinds.devices]]\nid = "0"\n')
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nreserved-cpu = 0\nstate-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
    )
    result = accelkit("cdi", "--config", str(config), "--agent", "agent-1")
    assert result.returncode == 2
    assert "error: agent 'agent-1' has no device a CDI spec can describe" in result.stderr


def test_devices_whose_names_collide_get_unique_names():
    # the first keeps its name; the second takes the first suffix no other device's name uses
    names = ["cuda-gpu-0", "cuda-gpu-0", "cuda-gpu-0-2", "all"]
    assert unique_names(names) == ["cuda-gpu-0", "cuda-gpu-0-3", "cuda-gpu-0-2", "all-2"]


def test_only_variables_that_two_devices_set_differently_leave_the_single_devices():
    node = Mount.device("/dev/null")
    devices = [
        ("a", WorkloadConfig(env_vars={"LIST": "0", "SAME": "x", "ONLY_A": "1"}, mounts=[node])),
        ("b", WorkloadConfig(env_vars={"LIST": "1", "SAME": "x"})),
    ]
    combined = WorkloadConfig(env_vars={"LIST": "0,1", "SAME": "x", "ONLY_A": "1"})
    kept = dict(without_colliding_env(devices, combined))
    assert kept["a"].env_vars == {"SAME": "x", "ONLY_A": "1"}
    assert kept["a"].mounts == (node,)
    assert kept["b"].env_vars == {"SAME": "x"}


def test_an_output_directory_that_cannot_be_created_is_an_error_naming_it(node, tmp_path):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "cdi"
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot create the directory '{out}'")
    assert "internal error" not in result.stderr


def test_an_output_whose_parent_is_missing_is_an_error_and_creates_nothing(node, tmp_path):
    out = tmp_path / "missing" / "deeper" / "cdi"
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot create the directory '{out}': its parent")
    assert "does not exist" in result.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("kind", ["fifo", "dangling link"])
def test_an_output_that_is_no_directory_is_an_error_saying_so(node, tmp_path, kind):
    out = tmp_path / "specs"
    if kind == "fifo":
        os.mkfifo(out)  # (a plain file is refused by the option itself)
    else:
        out.symlink_to(tmp_path / "gone")
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: '{out}' is not a directory (--output names")
    assert "File exists" not in result.stderr


def test_a_spec_that_cannot_be_written_is_an_error_and_leaves_no_temp_file(node, tmp_path):
    out = tmp_path / "cdi"
    (out / "accelkit.io-agent-1.json").mkdir(parents=True)  # in the way of the rename
    result = accelkit("cdi", "--config", str(node), "--agent", "agent-1", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot write '{out / 'accelkit.io-agent-1.json'}'")
    assert "internal error" not in result.stderr
    assert [p.name for p in out.iterdir()] == ["accelkit.io-agent-1.json"]
