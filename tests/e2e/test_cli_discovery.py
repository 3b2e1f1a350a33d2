"""The installed `accelkit` command, run as a real process, over real entry points."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

from accelkit.cli.app import main
from accelkit.testing.cli_runner import run_accelkit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def accelkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, env=env)


def test_plugins_json_lists_the_shipped_plugins_from_package_metadata():
    result = accelkit("plugins", "--json")
    assert result.returncode == 0, result.stderr
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert {"cpu", "mem", "cuda", "mock"} <= records.keys()
    for name in ("cpu", "mem", "cuda", "mock"):
        assert records[name]["distribution"] == f"accelkit-{name}"
        # the single version source of each distribution, as its metadata reports it
        about = importlib.import_module(f"accelkit_{name}.__about__")
        assert records[name]["version"] == about.__version__
        assert set(records[name]) == {"name", "distribution", "version", "status", "error"}
    assert records["mock"]["status"] == "loaded"


def test_devices_json_shows_mock_devices_exactly_as_declared():
    result = accelkit("devices", "--config", str(EXAMPLES / "demo.toml"), "--json")
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)
    assert list(devices) == ["cpu", "mem", "cuda"]
    assert [d["device_id"] for d in devices["cpu"]] == [str(i) for i in range(8)]
    health = devices["cuda"][2].pop("health")
    assert (health["state"], health["reason"]) == ("healthy", "")
    assert isinstance(devices["cuda"][2].pop("held_by"), list)  # this machine's ledger says
    assert devices["cuda"][2] == {
        "device_id": "cuda2",
        "numa_node": 1,
        "hw_location": "mock:cuda/cuda2",
        "memory_size": 40 * 1024**3,
        "processing_units": 108,
        "model_name": "Mock GPU 40G",
        "uuid": "MOCK-cuda-cuda2",
    }
    assert devices["mem"][0]["memory_size"] == 32 * 1024**3


def test_broken_distribution_is_failed_and_the_others_load(broken_site: Path):
    env = {"PYTHONPATH": str(broken_site)}
    result = accelkit("plugins", "--json", env=env)
    assert result.returncode == 0, result.stderr
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert records["broken"]["status"] == "failed"
    assert records["broken"]["distribution"] == "accelkit-broken"
    assert "cannot load its native library" in records["broken"]["error"]
    assert records["mock"]["status"] == "loaded"
    assert "Traceback" not in result.stderr


def test_strict_mode_turns_the_broken_plugin_into_exit_2(broken_site: Path):
    env = {"PYTHONPATH": str(broken_site), "ACCELKIT_STRICT_PLUGINS": "1"}
    result = accelkit("plugins", "--json", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("error: strict plugin loading")
    assert "broken" in result.stderr
    assert "Traceback" not in result.stderr


def test_disabled_plugin_is_blocked(broken_site: Path):
    env = {"PYTHONPATH": str(broken_site), "ACCELKIT_DISABLE_PLUGINS": "broken,cuda"}
    records = {r["name"]: r for r in json.loads(accelkit("plugins", "--json", env=env).stdout)}
    assert records["broken"]["status"] == "blocked"
    assert records["cuda"]["status"] == "blocked"


def test_config_errors_are_one_line_without_traceback(tmp_path: Path, capsys):
    bad = tmp_path / "host.toml"
    bad.write_text('[resource]\nallocation-mode = "sideways"\n')
    assert main(["devices", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    expected = f"error: {bad}:2: key 'resource.allocation-mode': unknown mode 'sideways'"
    assert err.startswith(expected)
    assert "Traceback" not in err


def test_missing_config_file(tmp_path: Path, capsys):
    assert main(["devices", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read the host config" in capsys.readouterr().err


def test_usage_errors_exit_2_with_error_prefix(capsys):
    assert main(["devices", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No such option")
    assert main(["no-such-command"]) == 2


def test_plugins_table_for_people(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "accelkit-mock" in out


def test_help_lists_the_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "plugins" in out
    assert "devices" in out
