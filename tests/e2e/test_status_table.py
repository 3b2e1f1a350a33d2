"""Tables for people: ``status`` in 80 columns with amounts in units, ``--agent``, ``--wide``,
``-q``; ``devices`` saying who holds each device."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelkit.cli.output import render_table
from accelkit.cli.status_cmd import SHORT_ID, _devices, _short
from accelkit.plugin import PluginRole
from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit

pytestmark = pytest.mark.slow  # a real `accelkit run` process

ROLES = {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY, "cuda": PluginRole.ACCELERATOR}


def accelkit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, config=config)


@pytest.fixture
def running(mock_node):
    """A node with one workload holding two cores, 1.5 GiB and a GPU; yields the config path."""
    config = mock_node(cpus=2, mem="8G", gpus=1)
    slots = "cpu=2,mem=1.5G,cuda.device=1"
    run = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(config), "--slots", slots, "--", "sleep", "300"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60  # a guard against hanging, not an assertion on time
        while time.monotonic() < deadline:
            shown = json.loads(accelkit(config, "status", "--json").stdout)
            if any(w["phase"] == "post_create" for w in shown):
                break
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            time.sleep(0.1)
        else:
            pytest.fail("the workload never showed up in 'accelkit status'")
        yield config
    finally:
        run.terminate()
        run.wait(timeout=60)


def test_the_table_fits_80_columns_and_shows_amounts_with_units(running):
    table = accelkit(running, "status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "Workloads"
    assert lines[1].split() == ["WORKLOAD", "AGENT", "PHASE", "AGE", "LIVENESS", "DEVICES"]
    [row] = lines[2:]
    assert row.split()[1:3] == ["agent-1", "post_create"]
    assert row.endswith("cpu:0-1 mem:1.5G cuda:cuda0")
    assert all(len(line) <= 80 for line in lines)


def test_quiet_prints_ids_that_json_names(running):
    [workload] = json.loads(accelkit(running, "status", "--json").stdout)
    assert workload["amounts"] == {
        "cpu": {"0": "1", "1": "1"},
        "cuda": {"cuda0": "1"},
        "mem": {"root": str(3 * 512 * 1024**2)},
    }
    quiet = accelkit(running, "status", "-q")
    assert (quiet.returncode, quiet.stdout) == (0, workload["workload"] + "\n")
    wide = accelkit(running, "status", "--wide")
    assert "RUNTIME" in wide.stdout
    assert workload["handle"] in wide.stdout


def test_agent_filters_and_an_unknown_agent_is_an_error(running):
    mine = accelkit(running, "status", "-q", "--agent", "agent-1")
    assert mine.returncode == 0
    assert len(mine.stdout.splitlines()) == 1
    unknown = accelkit(running, "status", "--agent", "agent-9")
    assert unknown.returncode == 2
    assert "unknown agent 'agent-9' (agents: agent-1)" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_quiet_with_json_is_a_usage_error(running):
    both = accelkit(running, "status", "-q", "--json")
    assert both.returncode == 2
    assert "-q prints ids only" in both.stderr


def test_long_ids_are_shortened_and_devices_show_shares():
    long_id = "k8s:default/pod-with-a-long-name/container"
    assert len(_short(long_id)) == SHORT_ID
    assert _short(long_id).endswith("…")
    assert _short("pid:12") == "pid:12"
    row = {"amounts": {"cuda": {"cuda0": "0.25", "cuda1": "1", "cuda2": "1"}, "cpu": {"3": "1"}}}
    assert _devices(row, ROLES) == "cpu:3 cuda:cuda1-2,cuda0:0.25"
    assert _devices({"amounts": {}}, ROLES) == "-"


def test_a_table_aligns_columns_and_never_pads_the_last():
    lines = render_table(["a", "bb"], [["xxx", None], ["y", "z"]])
    assert lines == ["A    BB", "xxx  -", "y    z"]


def test_devices_says_who_holds_each_device_and_what_is_free(running):
    [workload] = json.loads(accelkit(running, "status", "--json").stdout)
    who = f"{workload['workload']} (agent-1)"
    table = accelkit(running, "devices")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[-2:] == ["HELD", "BY"]
    held = {line.split()[1]: line.split("healthy", 1)[1].strip() for line in lines[2:]}
    assert held == {"0": who, "1": who, "root": f"{who} 1.5G", "cuda0": who}
    devices = json.loads(accelkit(running, "devices", "--json").stdout)
    [gpu] = devices["cuda"]
    assert gpu["held_by"] == [{"agent": "agent-1", "workload": workload["workload"], "amount": "1"}]


def test_devices_of_a_node_with_nothing_booked_are_free(mock_node):
    config = mock_node(cpus=1, gpus=1)
    table = accelkit(config, "devices")
    assert [line.split()[-1] for line in table.stdout.splitlines()[2:]] == ["free", "free"]


def test_devices_without_a_state_directory_reads_no_ledger(mock_node):
    """Nothing was ever booked where there is no state directory: no SQLite is imported."""
    config = mock_node(cpus=1, gpus=1)
    assert not (config.parent / "state").exists()
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('sqlite3' in sys.modules, file=sys.stderr))\n"
        "from accelkit.cli.app import run; run()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "devices", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=cli_env(),
        check=True,
    )
    assert [d["held_by"] for d in json.loads(done.stdout)["cuda"]] == [[]]
    assert done.stderr.splitlines()[-1] == "False"
    assert not (config.parent / "state").exists()
