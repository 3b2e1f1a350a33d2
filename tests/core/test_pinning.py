"""The pinned assignment of an AUTO_SPLIT node (``state-dir/assignments.json``): a file that is
not one of ours is refused with the file and the remedy named, and a pin that no longer fits
the node is applied as far as it can be, with a warning for the rest."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelkit.config import load_host_config
from accelkit.errors import ConfigError
from accelkit.host import PartitionHost
from accelkit.host.pinning import ASSIGNMENTS_FILE, FORMAT, PinnedAssignment, read_pinned
from accelkit.types import AgentId, DeviceId, DeviceName

SOURCE = "/etc/accelkit/host.toml"
REMEDY = "remove it to split the devices afresh"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    return directory


def refusal(state: Path) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        read_pinned(state, source=SOURCE)
    error = refused.value
    assert error.file == SOURCE
    assert error.key == "resource.state-dir"  # the key of [resource] state-dir
    assert str(state / ASSIGNMENTS_FILE) in str(error)
    return error


def test_no_file_is_no_pin_and_a_written_pin_reads_back(state: Path) -> None:
    assert read_pinned(state) is None
    pin = PinnedAssignment(["a", "b"], {"cuda": {"a": ["cuda10", "cuda2"], "b": []}})
    (state / ASSIGNMENTS_FILE).write_text(json.dumps(pin.to_json()))
    back = read_pinned(state)
    assert back == pin
    assert back is not None
    assert back.devices[DeviceName("cuda")][AgentId("a")] == ("cuda2", "cuda10")  # natural order


GOOD: dict[str, Any] = {"format": FORMAT, "agents": ["a"], "devices": {"cuda": {"a": ["cuda0"]}}}


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "Expecting property name"),
        (json.dumps([GOOD]), f"expected format {FORMAT!r}"),
        (json.dumps({**GOOD, "format": "accelkit-assignments/9"}), "expected format"),
        (json.dumps({"format": FORMAT, "devices": {}}), "'agents'"),
        (json.dumps({"format": FORMAT, "agents": []}), "'devices'"),
        (json.dumps({**GOOD, "agents": "a"}), "'agents' must be a list of agent ids"),
        (json.dumps({**GOOD, "agents": ["a", 7]}), "'agents' must be a list of agent ids"),
        (json.dumps({**GOOD, "devices": ["cuda0"]}), "'devices' must map each plugin"),
        (json.dumps({**GOOD, "devices": {"cuda": ["cuda0"]}}), "'devices' must map each plugin"),
        (json.dumps({**GOOD, "devices": {"cuda": {"a": "cuda0"}}}), "'devices' must map"),
        (json.dumps({**GOOD, "devices": {"cuda": {"a": [0]}}}), "'devices' must map"),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "other-format",
        "no-agents",
        "no-devices",
        "agents-a-string",
        "agent-not-a-string",
        "devices-a-list",
        "plugin-a-list",
        "ids-a-string",
        "id-not-a-string",
    ],
)
def test_a_file_that_is_not_an_assignment_is_refused_with_the_remedy(
    state: Path, content: str, why: str
) -> None:
    (state / ASSIGNMENTS_FILE).write_text(content)
    message = str(refusal(state))
    assert "cannot parse it (" in message
    assert why in message
    assert message.endswith(REMEDY)


def test_a_file_larger_than_a_mebibyte_is_refused_unread(state: Path) -> None:
    (state / ASSIGNMENTS_FILE).write_bytes(b" " * ((1 << 20) + 1))
    assert "larger than 1 MiB" in str(refusal(state))


def test_a_symbolic_link_is_not_followed(state: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(GOOD))
    (state / ASSIGNMENTS_FILE).symlink_to(target)
    assert "cannot read it: Too many levels of symbolic links" in str(refusal(state))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_a_directory_is_refused_without_blocking(state: Path, kind: str) -> None:
    path = state / ASSIGNMENTS_FILE
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading used to wait for a writer forever
    else:
        path.mkdir()
    assert "not a regular file of the user running accelkit" in str(refusal(state))


def test_a_state_dir_that_is_not_a_directory_is_named(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("")
    with pytest.raises(ConfigError) as refused:
        read_pinned(not_a_dir, source=SOURCE)
    assert refused.value.key == "resource.state-dir"
    assert f"the state directory {str(not_a_dir)!r} is not a directory" in str(refused.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(state: Path) -> None:
    path = state / ASSIGNMENTS_FILE
    path.write_text(json.dumps(GOOD))
    os.chown(path, 65534, 65534)
    assert "not a regular file of the user running accelkit" in str(refusal(state))


AGENTS = '[[agents]]\nagent = { id = "a" }\n[[agents]]\nagent = { id = "b" }\n'


Split = tuple[dict[AgentId, tuple[DeviceId, ...]], tuple[DeviceId, ...], list[str]]


def split_of(config: Path) -> Split:
    """Each agent's GPUs, the unassigned GPUs and the host's warnings."""

    async def main() -> Split:
        async with PartitionHost.open(load_host_config(config)) as host:
            result = host.result
            cuda = DeviceName("cuda")
            mine = {a: result.assignments[a][cuda].device_ids for a in result.assignments}
            return mine, result.unassigned.get(cuda, ()), host.warnings

    return asyncio.run(main())


@pytest.fixture
def auto_split(mock_node: Callable[..., Path]) -> Path:
    config = mock_node(gpus=4)
    mode = '[resource]\nallocation-mode = "auto-split"\n'
    text = config.read_text().replace("[resource]\n", mode)
    config.write_text(text + AGENTS)
    (config.parent / "state").mkdir(mode=0o700, exist_ok=True)
    return config


def pin(config: Path, agents: list[str], devices: dict[str, list[str]]) -> None:
    content = {"format": FORMAT, "agents": agents, "devices": {"cuda": devices}}
    (config.parent / "state" / ASSIGNMENTS_FILE).write_text(json.dumps(content))


def test_a_pin_gives_each_agent_its_recorded_devices(auto_split: Path) -> None:
    assert split_of(auto_split)[:2] == ({"a": ("cuda0", "cuda1"), "b": ("cuda2", "cuda3")}, ())
    pin(auto_split, ["a", "b"], {"a": ["cuda0", "cuda2", "cuda3"], "b": ["cuda1"]})
    mine, unassigned, warnings = split_of(auto_split)
    assert mine == {"a": ("cuda0", "cuda2", "cuda3"), "b": ("cuda1",)}
    assert unassigned == ()
    assert not any("assign" in w for w in warnings)


def test_a_pin_for_other_agents_is_not_applied(auto_split: Path) -> None:
    pin(auto_split, ["a", "c"], {"a": ["cuda0", "cuda1", "cuda2", "cuda3"], "c": []})
    mine, _unassigned, warnings = split_of(auto_split)
    assert mine == {"a": ("cuda0", "cuda1"), "b": ("cuda2", "cuda3")}  # the fresh split
    assert any(
        f"the recorded assignment ({ASSIGNMENTS_FILE}) is for agents ['a', 'c'], not ['a', 'b']"
        in w
        for w in warnings
    )


def test_devices_gone_are_left_out_and_new_ones_wait_unassigned(auto_split: Path) -> None:
    # cuda7 no longer exists; cuda2 and cuda3 are pinned to nobody (they came later)
    pin(auto_split, ["a", "b"], {"a": ["cuda0", "cuda7"], "b": ["cuda1", "cuda0"]})
    mine, unassigned, warnings = split_of(auto_split)
    assert mine == {"a": ("cuda0",), "b": ("cuda1",)}  # a device pinned twice goes to the first
    assert unassigned == (DeviceId("cuda2"), DeviceId("cuda3"))
    assert any(
        "cuda device(s) cuda2, cuda3 not assigned to any agent: "
        "'accelkit repartition' gives them to agents" in w
        for w in warnings
    )
