"""One rule for durations, the same for every key that takes seconds.

A duration is an integer (``30``), a decimal string (``"2.5"``) or a TOML float (``2.5``); it is
above 0 and at most a day. Anything else (a unit, a sign, an exponent string, non-ASCII digits,
a boolean, nan or inf) is an ``error:`` naming the file and the key, from every command.
"""

from __future__ import annotations

import tomllib
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.cli.app import main
from accelkit.config.rules import MAX_SECONDS, SECONDS

#: (section, key) of every duration in a host config, the plugins' sections included
DURATION_KEYS = [
    ("plugins", "call-timeout"),
    ("plugins", "hook-timeout"),
    ("health", "rediscover-interval"),
    ("bridge.k8s", "release-interval"),
    ("bridge.k8s", "admission-grace"),
    ("bridge.k8s", "kubelet-settle"),
    ("plugins.config.cpu", "health-interval"),
    ("plugins.config.cuda", "health-interval"),
    ("plugins.config.mock", "health-interval"),
]
GOOD = [("30", Decimal(30)), ("2.5", Decimal("2.5")), ('"2.5"', Decimal("2.5")),
        ("0.2", Decimal("0.2")), ('"86400"', MAX_SECONDS), ("1e-3", Decimal("0.001"))]  # fmt: skip
BAD = ["0", "-1", "0.0", "86401", "1e9", "nan", "inf", '"1e3"', '"2.5s"', '" 2"', '"+2"',
       '"-2"', '""', '"\uff12"', '"nan"', "true", "[1]", '"1_0"']  # fmt: skip


def parse(value: object) -> Decimal:
    result = SECONDS.parse(value)
    assert isinstance(result, Decimal)
    return result


def host_config(tmp_path: Path, section: str, key: str, value: str) -> Path:
    """A host config setting ``section.key = value`` (a mock plugin with one device kind)."""
    (tmp_path / "devices.toml").write_text('[[kinds]]\nkey = "testdur"\n')
    host = tmp_path / "host.toml"
    mock = '\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
    body = f"[{section}]\n{key} = {value}\n"
    if section == "plugins":
        # no plugin is started: a call timeout of 1 ms must not decide the test on a busy machine
        body += "allowed = []\n"
    if section == "plugins.config.mock":
        body = f"{mock}{key} = {value}\n"
    elif section.startswith("plugins.config."):
        body = f"{mock}{body}"
    host.write_text(f'[resource]\nstate-dir = "{tmp_path}/state"\n{body}')
    return host


@pytest.mark.parametrize(("section", "key"), DURATION_KEYS)
@pytest.mark.parametrize(("value", "expected"), GOOD)
def test_every_duration_key_takes_integers_decimal_strings_and_floats(
    tmp_path, capsys, section, key, value, expected
):
    host = host_config(tmp_path, section, key, value)
    assert main(["check", "--config", str(host)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("value", "expected"), GOOD)
def test_each_form_reads_as_the_decimal_written(value, expected):
    parsed = tomllib.loads(f"x = {value}")["x"]
    assert parse(parsed) == expected


@pytest.mark.parametrize(("section", "key"), DURATION_KEYS)
@pytest.mark.parametrize("value", BAD)
def test_every_duration_key_refuses_the_same_values_naming_file_and_key(
    tmp_path, capsys, section, key, value
):
    host = host_config(tmp_path, section, key, value)
    assert main(["check", "--config", str(host)]) == 2
    err = capsys.readouterr().err
    assert f"{section}.{key}" in err
    assert str(host) in err
    assert "seconds" in err
    assert "Traceback" not in err


@given(st.decimals(min_value=Decimal("0.001"), max_value=MAX_SECONDS, places=3))
def test_the_three_forms_of_one_duration_read_alike(amount):
    text = f"{amount:f}"
    assert parse(text) == amount
    assert parse(float(text)) == Decimal(repr(float(text)))  # the float as TOML writes it
    if amount == amount.to_integral_value():
        assert parse(int(amount)) == amount


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_is_read_as_written_or_refused(value):
    if 0 < value <= float(MAX_SECONDS):
        assert parse(value) == Decimal(repr(value))
    else:
        with pytest.raises(ValueError, match="seconds"):
            parse(value)
