"""The declarative host-config schema: files that cannot be read safely, line numbers, sections
for later parts (health, bridges), and the converter's key paths."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Annotated

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.config import load_host_config
from accelkit.config.converter import Rule, format_key, structure
from accelkit.config.lines import line_of
from accelkit.config.load import read_host_config
from accelkit.config.reading import MAX_CONFIG_BYTES, read_toml
from accelkit.errors import ConfigError, ConfigErrors


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- files that are not config files -----------------------------------------------------------


def test_a_character_device_is_refused_without_reading_it():
    with pytest.raises(ConfigError, match="not a regular file") as info:
        load_host_config("/dev/zero")
    assert info.value.file == "/dev/zero"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_host_config(fifo)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not a regular file"):
        load_host_config(tmp_path)


def test_a_file_over_16_mib_is_refused(tmp_path):
    path = tmp_path / "big.toml"
    with path.open("wb") as handle:
        handle.write(b"# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match="larger than 16 MiB") as info:
        load_host_config(path)
    assert info.value.file == str(path)


def test_a_file_of_exactly_16_mib_is_read(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_bytes(b"#" * (MAX_CONFIG_BYTES - 1) + b"\n")
    assert read_toml(path, "the host config") == ({}, "#" * (MAX_CONFIG_BYTES - 1) + "\n")


def test_non_utf8_text_is_a_config_error_naming_the_offset(tmp_path):
    path = tmp_path / "host.toml"
    path.write_bytes(b'[resource]\nstate-dir = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xff at offset 24\)"):
        load_host_config(path)


def test_malformed_toml_carries_its_line(tmp_path):
    path = write(tmp_path, '[resource]\nreserved-cpu = 1\nreserved-mem = "1G\n')
    with pytest.raises(ConfigError) as info:
        load_host_config(path)
    assert info.value.line == 3
    assert str(info.value).startswith(f"{path}:3: ")


def test_the_cli_reports_a_device_file_as_a_config_error(capsys):
    from accelkit.cli.app import main

    assert main(["check", "--config", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: /dev/zero: cannot read the host config: not a regular file")
    assert "Traceback" not in err


# -- lines ---------------------------------------------------------------------------------------


def test_every_problem_names_its_line(tmp_path):
    path = write(
        tmp_path,
        """[resource]
allocation-mode = "manual"
reserved-mem = "-1G"

[plugins]
strict = 2

[[agents]]
agent = { id = "a" }
[[agents]]
agent = { id = "b" }
resource = { cpu = 4 }
""",
    )
    with pytest.raises(ConfigErrors) as info:
        load_host_config(path)
    found = {(e.key, e.line, e.agent) for e in info.value.errors}
    assert found == {
        ("resource.reserved-mem", 3, None),
        ("plugins.strict", 6, None),
        ("agents[1].resource.cpu", 12, "b"),
    }
    assert f"{path}:12: agent 'b': key 'agents[1].resource.cpu'" in str(info.value)


def test_line_of_nested_arrays_of_tables():
    text = """
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
numa-node = -1
"""
    assert line_of(text, ("kinds", 1, "devices", 1, "numa-node")) == 12
    assert line_of(text, ("kinds", 1, "devices", 0, "id")) == 9
    assert line_of(text, ("kinds", 0, "devices", 0, "memory")) == 4  # absent: its table
    assert line_of(text, ("elsewhere",)) is None


def test_line_of_a_key_inside_an_inline_table_is_the_line_holding_it():
    text = '[plugins.config.cpu]\n"overcomit-factor" = 2\n[[agents]]\nagent = { id = "a" }\n'
    assert line_of(text, ("plugins", "config", "cpu", "overcomit-factor")) == 2
    assert line_of(text, ("agents", 0, "agent", "id")) == 4


# -- sections for later parts ---------------------------------------------------------------


def test_health_bridge_and_numa_sections(tmp_path):
    config = load_host_config(
        write(
            tmp_path,
            '[resource]\nnuma-aware-split = true\n[health]\nrediscover-interval = "2.5"\n'
            '[bridge.k8s]\ndomain = "example.com"\n[bridge.slurm]\n',
        )
    )
    assert config.resource.numa_aware_split is True
    assert config.health.rediscover_interval == Decimal("2.5")
    assert config.bridge.k8s is not None
    assert config.bridge.k8s.domain == "example.com"
    assert config.bridge.slurm is not None


def test_defaults_of_the_later_sections(tmp_path):
    config = load_host_config(write(tmp_path, ""))
    assert config.resource.numa_aware_split is False
    assert config.health.rediscover_interval == 60
    assert (config.bridge.k8s, config.bridge.slurm) == (None, None)


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("[health]\nrediscover = 3", "health.rediscover", "unknown key"),
        ("[health]\nrediscover-interval = 0", "health.rediscover-interval", "seconds"),
        ("[bridge.k8s]\ndomian = 'x'", "bridge.k8s.domian", "allowed: domain, kubelet-dir"),
        ("[bridge.k8s]\ndomain = ''", "bridge.k8s.domain", "expected a domain name"),
        ("[bridge.k8s]\ndomain = 'Example.com'", "bridge.k8s.domain", "not a DNS subdomain"),
        ("[bridge.k8s]\ndomain = 'gpu vendor'", "bridge.k8s.domain", "not a DNS subdomain"),
        ("[bridge.k8s]\ndomain = 'a..b'", "bridge.k8s.domain", "not a DNS subdomain"),
        ("[bridge.k8s]\ndomain = '-a.io'", "bridge.k8s.domain", "not a DNS subdomain"),
        ("[bridge.k8s]\ndomain = 'example.com/x'", "bridge.k8s.domain", "not a DNS subdomain"),
        (f"[bridge.k8s]\ndomain = '{'a' * 64}.io'", "bridge.k8s.domain", "not a DNS subdomain"),
        (f"[bridge.k8s]\ndomain = '{'a.' * 122}io'", "bridge.k8s.domain", "244 characters"),
        ("[bridge.k8s]\ndomain = 'kubernetes.io'", "bridge.k8s.domain", "keeps for its own"),
        ("[bridge.k8s]\ndomain = 'gpu.kubernetes.io'", "bridge.k8s.domain", "keeps for its own"),
        ("[bridge.k8s]\ndomain = 5", "bridge.k8s.domain", "expected a domain name"),
        ("[bridge.slurm]\nnodes = 1", "bridge.slurm.nodes", "unknown key"),
        ("[bridge.lsf]\n", "bridge.lsf", "unknown key (allowed: k8s, slurm)"),
        ("[resource]\nnuma-aware-split = 'yes'", "resource.numa-aware-split", "true or false"),
        # paths: a non-empty string, said so (not Python's "expected str, bytes or os.PathLike")
        ("[bridge.k8s]\nkubelet-dir = 5", "bridge.k8s.kubelet-dir", "expected a path"),
        ("[bridge.k8s]\nkubelet-dir = ''", "bridge.k8s.kubelet-dir", "non-empty string"),
        (
            "[bridge.k8s]\npod-resources-socket = ['a']",
            "bridge.k8s.pod-resources-socket",
            "expected a path (a non-empty string), got ['a']",
        ),
    ],
)
def test_later_sections_refuse_bad_keys(tmp_path, text, key, words):
    with pytest.raises(ConfigError) as info:
        load_host_config(write(tmp_path, text))
    assert not isinstance(info.value, ConfigErrors)
    assert info.value.key == key
    assert words in info.value.message


def test_the_draft_keeps_plugin_tables_when_other_keys_are_wrong(tmp_path):
    draft = read_host_config(
        write(tmp_path, 'colour = 1\n[plugins.config.mock]\nconfig-file = "d.toml"\n')
    )
    assert draft.config is None
    assert [e.key for e in draft.errors] == ["colour"]
    assert draft.plugins.config_for("mock") == {"config-file": str(tmp_path / "d.toml")}
    assert draft.plugins.source == str(tmp_path / "host.toml")


# -- the converter -------------------------------------------------------------------------------


def _even(value: object) -> int:
    if not isinstance(value, int) or value % 2:
        msg = f"expected an even number, got {value!r}"
        raise ValueError(msg)
    return value


@attrs.frozen
class Inner:
    even: Annotated[int, Rule(_even)] = 0
    name: str = ""


@attrs.frozen
class Outer:
    inner: tuple[Inner, ...] = ()
    flag: bool = False
    tables: dict[str, Inner] = attrs.field(factory=dict)


def test_the_converter_reports_every_problem_with_its_path():
    data = {
        "inner": [{"even": 2}, {"even": 3, "name": 1, "extra": 0}],
        "flag": "yes",
        "tables": {"a": {"even": 1}, "b": 5},
        "unknown": 1,
    }
    value, errors = structure(data, Outer, file="f.toml", prefix=("plugins", "config", "x"))
    assert value is None
    assert {(e.key, e.message) for e in errors} == {
        ("plugins.config.x.inner[1].even", "expected an even number, got 3"),
        ("plugins.config.x.inner[1].name", "expected a string, got 1"),
        ("plugins.config.x.inner[1].extra", "unknown key (allowed: even, name)"),
        ("plugins.config.x.flag", "expected true or false, got 'yes'"),
        ("plugins.config.x.tables.a.even", "expected an even number, got 1"),
        ("plugins.config.x.tables.b", "expected a table, got an integer"),
        ("plugins.config.x.unknown", "unknown key (allowed: inner, flag, tables)"),
    }
    assert all(e.file == "f.toml" for e in errors)


def test_the_converter_builds_frozen_values():
    value, errors = structure({"inner": [{"even": 4, "name": "n"}]}, Outer, file=None)
    assert errors == []
    assert value == Outer(inner=(Inner(4, "n"),))


@given(st.lists(st.one_of(st.text(max_size=5), st.integers(0, 9)), max_size=5).map(tuple))
def test_format_key_round_trips_through_the_rendered_path(parts):
    text = format_key(parts)
    for part in parts:
        assert (f"[{part}]" if isinstance(part, int) else str(part)) in text


SECTIONS = {
    "resource": [
        "allocation-mode",
        "reserved-cpu",
        "reserved-mem",
        "memory-align-size",
        "state-dir",
        "numa-aware-split",
        "reserved-gpu",
    ],
    "plugins": ["allowed", "blocked", "strict", "call-timeout", "hook-timeout", "allow"],
    "health": ["rediscover-interval", "interval"],
}
VALUES = st.one_of(
    st.integers(-5, 10**12),
    st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["16M", "shared", "manual", "2.5", "-1G", "interleaved"]),
    st.lists(st.one_of(st.text(max_size=3), st.integers(0, 3)), max_size=3),
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):  # \x7f is the one control character JSON leaves unescaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return str(value)


@given(
    st.lists(
        st.sampled_from(sorted(SECTIONS)).flatmap(
            lambda s: st.tuples(
                st.just(s),
                st.dictionaries(st.sampled_from(SECTIONS[s]), VALUES, max_size=4),
            )
        ),
        max_size=3,
        unique_by=lambda pair: pair[0],
    )
)
def test_every_problem_points_at_the_line_of_its_key(tmp_path_factory, sections):
    lines: list[str] = []
    where: dict[str, int] = {}
    for section, values in sections:
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {toml_value(value)}")
            where[f"{section}.{key}"] = len(lines)
    path = tmp_path_factory.mktemp("lines") / "host.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        load_host_config(path)
    except ConfigError as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        assert errors
        for error in errors:
            assert error.file == str(path)
            assert error.key in where, error
            assert error.line == where[error.key], error


def _silent(value: object) -> int:
    raise ValueError  # a rule that forgot its message


@attrs.frozen
class Required:
    name: str
    odd: Annotated[int, Rule(_silent)] = 0


def test_a_missing_key_and_a_rule_without_a_message_are_still_named():
    _value, errors = structure({"odd": 1}, Required, file=None)
    assert {(e.key, e.message) for e in errors} == {
        ("name", "missing (required)"),
        ("odd", "invalid value (ValueError: )"),
    }


def test_a_value_of_the_wrong_toml_type_is_not_coerced():
    _value, errors = structure({"name": 5, "odd": "1"}, Required, file=None)
    assert {e.key for e in errors} == {"name", "odd"}
    assert [e.message for e in errors if e.key == "name"] == ["expected a string, got 5"]


@pytest.mark.parametrize(
    "domain", ["accelkit.io", "example.com", "gpu-vendor.example.io", f"{'a' * 63}.io", "k8s.io"]
)
def test_a_dns_subdomain_outside_kubernetes_io_is_a_resource_domain(tmp_path, domain):
    config = load_host_config(write(tmp_path, f"[bridge.k8s]\ndomain = '{domain}'"))
    assert config.bridge.k8s is not None
    assert config.bridge.k8s.domain == domain


def test_a_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "host.toml"
    path.write_bytes(b'\xef\xbb\xbf[resource]\nallocation-mode = "shared"\n')
    assert load_host_config(path).resource.allocation_mode.value == "shared"


def test_nesting_too_deep_for_the_parser_is_a_config_error_naming_the_file(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nests arrays or inline tables too deeply") as info:
        load_host_config(path)
    assert info.value.file == str(path)
