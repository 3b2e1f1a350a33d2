"""A problem in a ``[plugins.config.NAME]`` section is a config error in every command, never a
plugin silently left out; ``check`` reports it beside the file's other problems."""

from __future__ import annotations

import pytest

from accelkit.cli.app import main

TYPO = '[plugins]\nallowed = ["cpu", "mem"]\n\n[plugins.config.cpu]\novercomit-factor = 2\n'


def run(capsys, *args):
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    "command",
    [
        ["devices"],
        ["devices", "--json"],
        ["plan", "--json"],
        ["check"],
        ["metrics", "--json"],
        ["cdi", "--agent", "agent-1"],
        ["plugins"],
        ["run", "--agent", "agent-1", "--slots", "cpu=1", "--", "true"],
    ],
)
def test_a_typo_in_a_plugin_section_stops_every_command(capsys, tmp_path, command):
    path = tmp_path / "host.toml"
    path.write_text(TYPO, encoding="utf-8")
    status, out, err = run(capsys, command[0], "--config", str(path), *command[1:])
    assert status == (125 if command[0] == "run" else 2), (out, err)  # run's own failures: 125
    assert out == ""
    assert err.startswith(f"error: {path}:5: key 'plugins.config.cpu.overcomit-factor': ")
    assert "unknown key (allowed: overcommit-factor, health-interval)" in err
    assert "Traceback" not in err


def test_check_reports_schema_plugin_and_device_file_problems_together(capsys, tmp_path):
    (tmp_path / "devices.toml").write_text(
        '[[kinds]]\nkey = "cuda"\n[[kinds.devices]]\nid = "a"\nnuma-node = -1\n'
        '[[kinds.devices]]\nid = "a"\n[[kinds]]\nkey = "Bad"\n',
        encoding="utf-8",
    )
    path = tmp_path / "host.toml"
    path.write_text(
        'colour = "blue"\n[plugins]\nallowed = ["cpu", "mock", "gpu"]\n'
        "[plugins.config.cpu]\novercommit-factor = 11\n"
        '[plugins.config.mock]\nconfig-file = "devices.toml"\n',
        encoding="utf-8",
    )
    status, _, err = run(capsys, "check", "--config", str(path))
    assert status == 2
    assert "\nerror: 5 problem(s) in the configuration:" in err
    devices = tmp_path / "devices.toml"
    for line in (
        f"{path}:1: key 'colour': unknown key",
        f"{path}:5: key 'plugins.config.cpu.overcommit-factor': must be from 1 to 10, got 11",
        f"{devices}:5: key 'kinds[0].devices[0].numa-node': expected a NUMA node number",
        f"{devices}:7: key 'kinds[0].devices[1].id': duplicate device id 'a'",
        f"{devices}:9: key 'kinds[1].key': a kind needs a lower-case key",
    ):
        assert line in err


def test_check_warns_about_plugin_names_nothing_answers_to(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_DISABLE_PLUGINS", "cuda,tpu")
    path = tmp_path / "host.toml"
    path.write_text(
        '[plugins]\nallowed = ["cpu", "mem", "gpu"]\nblocked = ["nope"]\n'
        "[plugins.config.cpuu]\novercommit-factor = 2\n",
        encoding="utf-8",
    )
    status, _out, err = run(capsys, "check", "--config", str(path))
    assert status == 0, err
    for origin, name in (
        ("plugins.allowed", "gpu"),
        ("plugins.blocked", "nope"),
        ("ACCELKIT_DISABLE_PLUGINS", "tpu"),
        ("[plugins.config.NAME]", "cpuu"),
    ):
        assert f"warning: {origin} names {name!r}, which matches no installed plugin" in err
    assert "'cuda', which" not in err


def test_check_prints_its_warnings_before_its_problems(capsys, tmp_path):
    path = tmp_path / "host.toml"
    path.write_text('colour = 1\n[plugins]\nallowed = ["cpu", "mem", "gpu"]\n', encoding="utf-8")
    status, _out, err = run(capsys, "check", "--config", str(path))
    assert status == 2
    warning = err.index("warning: plugins.allowed names 'gpu'")
    assert warning < err.index(f"error: {path}:1: key 'colour': unknown key")
