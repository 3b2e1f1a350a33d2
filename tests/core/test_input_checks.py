"""Inputs an operator gets wrong, refused where they are read: digits other than ASCII, empty
paths, missing parents, empty items and names, relative and empty environment values."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from accelkit.bridge.slurm.job_gres import gpu_indices
from accelkit.cli.dra_cmd import _dns_subdomain
from accelkit.cli.options import Whole, given_path
from accelkit.cli.run_cmd import parse_slots
from accelkit.cli.slurm_cmd import _node_name_value
from accelkit.config import default_state_dir
from accelkit.config.reading import read_toml
from accelkit.config.search import CONFIG_ENV, find_host_config
from accelkit.errors import ConfigError, InvalidResourceArgument
from accelkit.selection import PluginSelection


@pytest.mark.parametrize("text", ["\uff13", "\u0663", "1_000", "1e3", "", "x"])
def test_a_whole_number_is_ascii_digits(text):
    with pytest.raises(click.BadParameter, match="expected a whole number in ASCII digits"):
        Whole(min=1).convert(text, None, None)


def test_a_whole_number_keeps_its_range():
    assert Whole(min=1, max=9).convert("3", None, None) == 3
    with pytest.raises(click.BadParameter, match="not in the range"):
        Whole(min=1, max=9).convert("10", None, None)


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_path_is_refused_not_the_working_directory(value):
    with pytest.raises(click.BadParameter, match="empty path"):
        given_path(None, None, value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("cpu=\uff11", "'\uff11' is not an amount"),  # a full-width 1
        ("mem=\uff11G", "is not an amount"),
        ("cpu=1,,mem=1G", "an empty item between commas"),
        ("cpu=1,", "an empty item between commas"),
        ("cpu=0", "an amount of 0 asks for nothing"),
        (",", "no slot requested"),
    ],
)
def test_slot_strings_are_checked(text, said):
    with pytest.raises(click.BadParameter, match=said):
        parse_slots(text)


def test_a_good_slot_string_reads_as_before():
    assert parse_slots("cpu=2, mem=1G") == {"cpu": 2, "mem": 1024**3}


def test_a_strict_config_does_not_hide_a_bad_strict_variable():
    strict = PluginSelection(strict=True)
    with pytest.raises(ConfigError, match="ACCELKIT_STRICT_PLUGINS='banana'"):
        strict.with_environment({"ACCELKIT_STRICT_PLUGINS": "banana"})
    assert strict.with_environment({"ACCELKIT_STRICT_PLUGINS": "0"}).strict


def test_an_empty_disable_variable_is_an_error():
    with pytest.raises(ConfigError, match="ACCELKIT_DISABLE_PLUGINS is set but empty"):
        PluginSelection().with_environment({"ACCELKIT_DISABLE_PLUGINS": " "})
    chosen = PluginSelection().with_environment({"ACCELKIT_DISABLE_PLUGINS": "cuda, mem"})
    assert chosen.disabled == {"cuda", "mem"}


def test_a_relative_state_dir_variable_is_an_error():
    with pytest.raises(ConfigError, match="ACCELKIT_STATE_DIR='state' is a relative path"):
        default_state_dir({"ACCELKIT_STATE_DIR": "state"})


def test_a_config_variable_naming_no_file_is_an_error_naming_the_variable(tmp_path):
    missing = tmp_path / "no.toml"
    for path, said in ((tmp_path, "a directory"), (missing, "a file that does not exist")):
        choice = find_host_config(None, {CONFIG_ENV: str(path)})
        with pytest.raises(ConfigError, match=f"ACCELKIT_CONFIG names {said}"):
            choice.checked()
    given = tmp_path / "host.toml"
    given.write_text("")
    assert find_host_config(None, {CONFIG_ENV: str(given)}).checked() == given
    # --config is checked by its option; a path it names is read (and its error names it)
    assert find_host_config(tmp_path / "x.toml", {}).checked() == tmp_path / "x.toml"


def test_an_integer_too_long_to_read_is_a_config_error_with_its_line(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text("[resource]\nreserved-cpu = " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"host.toml:2: .*integer too long"):
        read_toml(path, "the host config")


def test_an_empty_plugin_name_is_a_config_error(tmp_path):
    from accelkit.config import load_host_config

    path = tmp_path / "host.toml"
    path.write_text('[plugins]\nallowed = ["mock", ""]\n')
    with pytest.raises(ConfigError, match="an empty plugin name"):
        load_host_config(path)


def test_slurms_gpu_list_error_names_its_variable():
    with pytest.raises(InvalidResourceArgument, match="SLURM_JOB_GPUS: not a GRES index list"):
        gpu_indices({"SLURM_JOB_GPUS": "\uff10"})


@pytest.mark.parametrize("name", ["", "node 1", "a,b", "node[1-2]", "a\nb", "-n", "n" * 65])
def test_a_slurm_node_name_is_one_host_name(name):
    with pytest.raises(click.BadParameter, match="is not a Slurm NodeName"):
        _node_name_value(None, None, name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "Node1", "node 1", "a..b", "n" * 254])
def test_a_kubernetes_node_name_is_a_dns_subdomain(name):
    with pytest.raises(click.BadParameter, match="is not a Kubernetes node name"):
        _dns_subdomain(None, None, name)  # type: ignore[arg-type]


def test_good_node_names_pass():
    assert _node_name_value(None, None, "gpu-node_1.rack2") == "gpu-node_1.rack2"  # type: ignore[arg-type]
    assert _dns_subdomain(None, None, "node-1.example") == "node-1.example"  # type: ignore[arg-type]
    assert Path("x") == given_path(None, None, "x")


@pytest.mark.parametrize("runtime", ["process", "docker"])
def test_an_empty_image_is_refused_whatever_the_runtime(runtime, capsys):
    from accelkit.cli.app import main

    args = ["run", "--slots", "cpu=1", "--runtime", runtime, "--image", "", "--", "true"]
    assert main(args) == 125
    assert capsys.readouterr().err.startswith("error: --image is empty: name a container image")


@pytest.mark.parametrize(
    ("section", "key"), [("[resource]", "state-dir"), ("[bridge.slurm]", "scontrol")]
)
def test_a_blank_string_is_no_path_or_command(tmp_path, section, key):
    from accelkit.config import load_host_config

    path = tmp_path / "host.toml"
    path.write_text(f'{section}\n{key} = "  "\n')
    with pytest.raises(ConfigError, match=f"{key}': expected a .*got '  '"):
        load_host_config(path)


@pytest.mark.parametrize("value", ["", "Node 1"])
def test_the_node_name_variable_is_checked_as_the_option_is(monkeypatch, value):
    from accelkit.cli.dra_cmd import _node_from_environment

    monkeypatch.setenv("NODE_NAME", value)
    with pytest.raises(click.UsageError, match=r"NODE_NAME=.* is not a Kubernetes node name"):
        _node_from_environment()
    monkeypatch.setenv("NODE_NAME", "node-1")
    assert _node_from_environment() == "node-1"
    monkeypatch.delenv("NODE_NAME")
    assert _node_from_environment() is None


def test_a_state_dir_that_cannot_be_made_is_a_config_error(tmp_path):
    from accelkit.workload.state_dir import open_state_dir

    # /proc makes no directories: mkdir there fails as if the parent were missing
    with pytest.raises(ConfigError, match="cannot create the state directory '/proc/1/x'"):
        open_state_dir(Path("/proc/1/x"), source="host.toml")
    with pytest.raises(FileNotFoundError):  # without create, a missing one is only missing
        open_state_dir(tmp_path / "absent", create=False)
