from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.errors import ConfigError, ConfigErrors
from accelkit_mock.spec import load_kinds


def kinds_of(toml_text: str, tmp_path: Path):
    path = tmp_path / "devices.toml"
    path.write_text(toml_text)
    return load_kinds({"config-file": str(path)})


def test_no_config_means_no_kinds():
    assert load_kinds({}) == ()


def test_full_declaration(tmp_path):
    (kind,) = kinds_of(
        """
[[kinds]]
key = "cuda"
allocation = "fractional"
quantum = "0.25"
[[kinds.devices]]
id = "cuda0"
model = "Mock GPU 40G"
numa-node = 1
memory = "40G"
processing-units = 108
amount = "2.5"
""",
        tmp_path,
    )
    assert kind.key == "cuda"
    assert kind.allocation == "fractional"
    assert kind.quantum == Decimal("0.25")
    (device,) = kind.devices
    assert (device.id, device.model, device.numa_node) == ("cuda0", "Mock GPU 40G", 1)
    assert device.memory == 40 * 1024**3
    assert device.processing_units == 108
    assert device.amount == Decimal("2.5")


def test_mem_kind_defaults_to_root_sized_by_memory():
    (kind,) = load_kinds({"kinds": [{"key": "mem", "devices": [{"memory": "2G"}]}]})
    assert kind.devices[0].id == "root"
    assert kind.devices[0].amount == Decimal(2 * 1024**3)


@pytest.mark.parametrize(
    ("kinds", "key", "message"),
    [
        ([{"key": "cuda", "devices": [{"model": "x"}]}], "kinds[0].devices[0].id", "needs an id"),
        *(
            ([{"key": "cuda", "devices": [{"id": bad}]}], "kinds[0].devices[0].id", "no spaces")
            for bad in ("a,b", "x y", "a\nb", "tab\t", "bell\x07")
        ),
        (
            [{"key": "cuda", "devices": [{"id": "a"}, {"id": "a"}]}],
            "kinds[0].devices[1].id",
            "duplicate device id 'a'",
        ),
        (
            [{"key": "cuda", "devices": [{"id": "a", "memory": "12X"}]}],
            "kinds[0].devices[0].memory",
            "not a size",
        ),
        (
            [{"key": "cuda", "allocation": "sliced"}],
            "kinds[0].allocation",
            r"unknown allocation mode 'sliced' \(use 'discrete' or 'fractional'\)$",
        ),
        (
            [{"key": "cuda", "devices": [{"id": "a", "amount": "abc"}]}],
            "kinds[0].devices[0].amount",
            r"amount': not a decimal amount: 'abc'$",  # said once
        ),
        (  # a capacity the ledger could not hold a booking of
            [{"key": "cuda", "devices": [{"id": "a", "amount": "1E+999999"}]}],
            "kinds[0].devices[0].amount",
            r"amount': 1E\+999999 is out of range \(at most 25 digits before the decimal point",
        ),
        (
            [{"key": "mem", "devices": [{"memory": "100000000000000T"}]}],
            "kinds[0].devices[0].memory",
            "is out of range",
        ),
        (
            [{"key": "cuda", "allocation": "fractional", "quantum": "1E-30"}],
            "kinds[0].quantum",
            "is out of range",
        ),
        ([{"key": "Bad Key"}], "kinds[0].key", "lower-case key"),
        ([{"key": "cuda", "colour": "red"}], "kinds[0].colour", "unknown key"),
        (
            [{"key": "cuda", "devices": [{"id": "a", "amount": "-1"}]}],
            "kinds[0].devices[0].amount",
            "negative",
        ),
        (
            [{"key": "cuda", "devices": [{"id": "a", "amount": "1.5"}]}],
            "kinds[0].devices[0].amount",
            "whole",
        ),
        (
            [
                {
                    "key": "cuda",
                    "allocation": "fractional",
                    "quantum": "0.25",
                    "devices": [{"id": "a", "amount": "0.3"}],
                }
            ],
            "kinds[0].devices[0].amount",
            "not a multiple of quantum",
        ),
        (
            [{"key": "cuda", "allocation": "fractional", "quantum": "0"}],
            "kinds[0].quantum",
            "greater than zero",
        ),
        (
            [{"key": "cuda", "devices": [{"id": "a", "numa-node": -1}]}],
            "kinds[0].devices[0].numa-node",
            "NUMA node",
        ),
        (
            [{"key": "cuda", "devices": [{"id": "a", "processing-units": "many"}]}],
            "kinds[0].devices[0].processing-units",
            "non-negative integer",
        ),
        (
            [{"key": "mem", "devices": [{"id": "a"}]}],
            "kinds[0].devices",
            "exactly one device, 'root'",
        ),
        (
            [{"key": "cpu", "devices": [{"id": "0", "mig-profile": "1g.10gb"}]}],
            "kinds[0].devices[0].mig-profile",
            "cannot have MIG",
        ),
        (
            [{"key": "cuda", "devices": [{"id": "m", "mig-profile": "1g.10gb", "amount": "2"}]}],
            "kinds[0].devices[0].amount",
            "handed out whole",
        ),
        ([{"key": "cuda"}, {"key": "cuda"}], "kinds[1].key", "declared twice"),
        ([{"key": "cuda", "devices": {"id": "a"}}], "kinds[0].devices", "array of tables"),
        (["cuda"], "kinds[0]", "expected a table"),
    ],
)
def test_malformed_entries_name_the_key(kinds, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_kinds({"kinds": kinds})
    assert info.value.key == key
    assert info.value.file is None  # the loader names the host config file


def test_a_quantum_far_below_the_amount_is_checked_exactly():
    # 1E+20 / 1E-20 has 41 digits: a Decimal % under the default context raises instead
    kinds = [
        {
            "key": "npx",
            "allocation": "fractional",
            "quantum": "1E-20",
            "devices": [
                {"id": "a", "amount": "1E+20"},
                {"id": "b", "amount": "1.00000000000000000001"},
            ],
        }
    ]
    (kind,) = load_kinds({"kinds": kinds})
    assert [d.amount for d in kind.devices] == [Decimal("1E+20"), Decimal("1.00000000000000000001")]
    kinds[0]["devices"] = [{"id": "a", "amount": "1.000000000000000000001"}]
    with pytest.raises(ConfigError, match="not a multiple of quantum") as info:
        load_kinds({"kinds": kinds})
    assert info.value.key == "kinds[0].devices[0].amount"


def test_errors_in_a_file_name_the_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        kinds_of('[[kinds]]\nkey = "cuda"\n[[kinds.devices]]\nmodel = "x"\n', tmp_path)
    assert info.value.file == str(tmp_path / "devices.toml")
    assert str(tmp_path / "devices.toml") in str(info.value)


def test_malformed_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"malformed TOML.*line 1"):
        kinds_of("[[kinds]\n", tmp_path)
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_kinds({"config-file": str(tmp_path / "missing.toml")})
    assert info.value.key == "config-file"


def test_unknown_top_level_keys(tmp_path):
    with pytest.raises(ConfigError, match="unknown key"):
        kinds_of("devices = []\n", tmp_path)
    with pytest.raises(ConfigError, match="unknown key"):
        load_kinds({"config-fil": "x"})
    with pytest.raises(ConfigError, match="not both"):
        load_kinds({"config-file": "x", "kinds": []})


def test_every_problem_of_a_device_file_is_reported_with_its_line(tmp_path):
    path = tmp_path / "devices.toml"
    path.write_text(
        '[[kinds]]\nkey = "cuda"\n'
        '[[kinds.devices]]\nid = "a"\nnuma-node = -1\n'
        '[[kinds.devices]]\nid = "a"\n'
        '[[kinds.devices]]\nid = "b"\namount = "1.5"\n'
        '[[kinds]]\nkey = "Bad"\n'
        "colour = 1\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigErrors) as info:
        load_kinds({"config-file": str(path)})
    found = {(e.key, e.line) for e in info.value.errors}
    assert found == {
        ("kinds[0].devices[0].numa-node", 5),
        ("kinds[0].devices[1].id", 7),  # a duplicate of the device whose NUMA node is wrong
        ("kinds[0].devices[2].amount", 10),
        ("kinds[1].key", 12),
        ("kinds[1].colour", 13),
    }
    assert all(e.file == str(path) for e in info.value.errors)


@pytest.mark.parametrize("name", ["/dev/zero", "fifo"])
def test_a_device_file_that_is_not_a_regular_file(tmp_path, name):
    import os

    path = name if name.startswith("/") else str(tmp_path / name)
    if not name.startswith("/"):
        os.mkfifo(path)
    with pytest.raises(ConfigError, match="not a regular file") as info:
        load_kinds({"config-file": path})
    assert info.value.key == "config-file"


def test_a_device_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "devices.toml"
    path.write_bytes(b'[[kinds]]\nkey = "\xc3\x28"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_kinds({"config-file": str(path)})


def test_a_config_file_that_is_not_a_path():
    with pytest.raises(ConfigError, match="expected a file path, got 3") as info:
        load_kinds({"config-file": 3})
    assert info.value.key == "config-file"
