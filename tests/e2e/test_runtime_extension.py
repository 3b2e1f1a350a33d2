"""A runtime another distribution registers: offered by ``accelkit run``, its records kept.

``tests/fixtures/runtime-plugin`` registers the runtime ``extra`` (the process runtime under
another name) through the ``accelkit`` entry-point group and nothing else; it is installed
into a directory of its own (``runtime_site``) and put on ``PYTHONPATH`` of some commands
only. A process without it cannot tell whether a workload of ``extra`` runs: it keeps the
record (liveness ``unknown``, devices held) and names the runtime, and a process with it
manages the workload as its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.workload import Ledger

pytestmark = pytest.mark.slow  # installs a distribution, kills a real run

SLOTS = "cuda.device=1,cpu=1,mem=1G"


def accelkit(site: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, site=site)


@pytest.fixture
def node(mock_node) -> Path:
    path = mock_node(cpus=1, mem="1G", gpus=1)
    text = path.read_text().replace('allowed = ["mock"]', 'allowed = ["mock", "extra-runtime"]')
    path.write_text(text)
    return path


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + 60  # a guard against hanging, not an assertion on time
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_a_wrong_runtime_name_lists_the_registered_ones(runtime_site, node):
    result = accelkit(runtime_site, "run", "--config", str(node), "--runtime", "nope", "--", "true")
    assert result.returncode == 125, result.stderr  # a refusal of accelkit run
    assert "'nope' is not a registered runtime (registered: process, docker, extra)" in (
        result.stderr
    )
    without = accelkit(None, "run", "--config", str(node), "--runtime", "extra", "--", "true")
    assert without.returncode == 125
    assert "(registered: process, docker)" in without.stderr


def test_a_workload_runs_in_the_registered_runtime(runtime_site, node):
    result = accelkit(
        runtime_site, "run", "--config", str(node), "--runtime", "extra", "--slots", SLOTS,
        "--", "sh", "-c", "exit 3",
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert Ledger(node.parent / "state").read_all() == {}


def test_a_process_without_the_runtime_keeps_its_workload_and_names_it(
    runtime_site, node, tmp_path
):
    started, finish = tmp_path / "started", tmp_path / "finish"
    script = f"touch {started}; while [ ! -e {finish} ]; do sleep 0.05; done"
    run = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(node), "--runtime", "extra", "--slots", SLOTS,
         "--", "sh", "-c", script],
        env=cli_env(site=runtime_site), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(started.exists, "the workload to start")
        os.kill(run.pid, signal.SIGKILL)  # the owner dies; the workload runs on in its cgroups
        run.wait()
        [record] = Ledger(node.parent / "state").read_all().values()
        assert record.handle is not None
        assert record.handle.runtime == "extra"

        lacking = accelkit(None, "status", "--config", str(node), "--json")
        assert lacking.returncode == 0, lacking.stderr
        [row] = json.loads(lacking.stdout)
        assert (row["liveness"], row["devices"]["cuda"]) == ("unknown", ["cuda0"])
        assert "its runtime 'extra' is not installed here" in lacking.stderr
        refused = accelkit(
            None, "run", "--config", str(node), "--slots", "cuda.device=1", "--no-memory-limit",
            "--", "true",
        )  # fmt: skip
        assert refused.returncode == 125, refused.stderr  # cuda0 is still held

        having = accelkit(runtime_site, "status", "--config", str(node), "--json")
        [row] = json.loads(having.stdout)
        assert row["liveness"] == "running", having.stderr
    finally:
        finish.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    wait_until(
        lambda: (
            accelkit(runtime_site, "status", "--config", str(node), "--json").stdout.strip() == "[]"
        ),
        "the ended workload to be torn down by a process that has its runtime",
    )


def test_accelkit_plugins_lists_the_registered_runtimes(runtime_site, node):
    having = accelkit(runtime_site, "plugins", "--config", str(node))
    assert having.returncode == 0, having.stderr
    runtimes = having.stdout.split("Runtimes", 1)[1].splitlines()
    assert any(line.split()[:3] == ["extra", "runs", "accelkit_extra_runtime"] for line in runtimes)
    assert any(line.split()[:2] == ["kubelet-pods", "tracks"] for line in runtimes)
    lacking = accelkit(None, "plugins", "--config", str(node))
    assert "extra" not in lacking.stdout.split("Runtimes", 1)[1]
    as_json = accelkit(runtime_site, "plugins", "--config", str(node), "--json")
    statuses = {r["name"]: r["status"] for r in json.loads(as_json.stdout)}
    assert statuses["extra-runtime"] == "loaded"  # a distribution of runtimes alone
