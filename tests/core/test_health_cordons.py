"""Cordons in the state directory: synced file, locked changes, one stat to see nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.errors import ConfigError, InvalidResourceArgument
from accelkit.node.health_cordons import CORDONS_FILE, MAX_REASON, CordonFile
from accelkit.types import DeviceId, DeviceName


def test_cordon_and_uncordon_round_trip_and_are_idempotent(tmp_path: Path) -> None:
    cordons = CordonFile(tmp_path / "state")
    assert cordons.read() == {}
    assert cordons.cordon("cuda", "cuda1", "fan") is True
    assert cordons.cordon("cuda", "cuda1", "other") is False
    found = CordonFile(tmp_path / "state").read()
    assert list(found) == [(DeviceName("cuda"), DeviceId("cuda1"))]
    assert found[(DeviceName("cuda"), DeviceId("cuda1"))].reason == "fan"
    assert cordons.uncordon("cuda", "cuda1") is True
    assert cordons.uncordon("cuda", "cuda1") is False
    assert CordonFile(tmp_path / "state").read() == {}
    assert (tmp_path / "state" / CORDONS_FILE).stat().st_mode & 0o777 == 0o600


def test_read_if_changed_sees_another_writer_and_nothing_else(tmp_path: Path) -> None:
    reader = CordonFile(tmp_path)
    assert reader.read_if_changed() == {}
    assert reader.read_if_changed() is None
    CordonFile(tmp_path).cordon("cuda", "cuda0", "")
    assert reader.read_if_changed() is not None
    assert reader.read_if_changed() is None


WRITER = """
import sys
from accelkit.node.health_cordons import CordonFile
cordons = CordonFile(sys.argv[1])
for i in range(int(sys.argv[3])):
    cordons.cordon("cuda", f"{sys.argv[2]}{i}", "load")
"""


def test_concurrent_writers_lose_no_cordon(tmp_path: Path) -> None:
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), prefix, "15"])
        for prefix in ("a", "b", "c")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    assert len(CordonFile(tmp_path).read()) == 45


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "cannot parse it"),
        ('{"format": "other"}', "not a cordon file"),
        ('{"format": "accelkit-cordons/1", "cordons": [{"plugin": "cuda"}]}', "entry 0"),
        ('{"format": "accelkit-cordons/1", "cordons": 3}', "entry 0"),
        (
            '{"format": "accelkit-cordons/1", "cordons": [{"plugin": 1, "device": "x",'
            ' "reason": "", "since": "1"}]}',
            "must be strings",
        ),
    ],
)
def test_a_damaged_file_is_a_config_error_naming_it(
    tmp_path: Path, body: str, message: str
) -> None:
    (tmp_path / CORDONS_FILE).write_text(body)
    os.chmod(tmp_path / CORDONS_FILE, 0o600)
    with pytest.raises(ConfigError, match=message) as caught:
        CordonFile(tmp_path).read()
    assert CORDONS_FILE in str(caught.value)


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_cordon_file_is_refused(tmp_path: Path, dangling: bool) -> None:
    target = tmp_path / "elsewhere.json"
    if not dangling:  # a link to nothing is refused too: it is not "no cordons"
        target.write_text(json.dumps({"format": "accelkit-cordons/1", "cordons": []}))
    (tmp_path / CORDONS_FILE).symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link"):
        CordonFile(tmp_path).read()


def test_a_write_that_fails_says_so_and_keeps_the_old_file(tmp_path: Path) -> None:
    cordons = CordonFile(tmp_path)
    cordons.cordon("cuda", "cuda0", "first")
    (tmp_path / f".{CORDONS_FILE}.{os.getpid()}.tmp").mkdir()  # cannot be replaced by a file
    with pytest.raises(ConfigError, match="cannot write it"):
        cordons.cordon("cuda", "cuda1", "second")
    assert list(CordonFile(tmp_path).read()) == [(DeviceName("cuda"), DeviceId("cuda0"))]


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("a\nb", "one line of text with no control characters"),
        ("\x1b[31mred\x1b[0m", "no control characters"),  # a terminal would act on it
        ("bell\x07", "no control characters"),
        ("tab\there", "no control characters"),
        ("c1\x9b", "no control characters"),
        ("r" * (MAX_REASON + 1), "at most 1,000 characters, got 1,001"),
        (5, "a cordon reason is text, not int"),
    ],
)
def test_a_reason_that_is_not_one_line_of_text_is_refused_and_nothing_is_written(
    tmp_path: Path, reason: object, said: str
) -> None:
    cordons = CordonFile(tmp_path)
    with pytest.raises(InvalidResourceArgument, match=said):
        cordons.cordon("cuda", "cuda0", reason)  # type: ignore[arg-type]
    assert not (tmp_path / CORDONS_FILE).exists()


@pytest.mark.parametrize("reason", ["", "fan failed — replaced Tuesday (ticket #42)", "r" * 1000])
def test_a_reason_of_one_line_is_kept_as_given(tmp_path: Path, reason: str) -> None:
    cordons = CordonFile(tmp_path)
    assert cordons.cordon("cuda", "cuda0", reason)
    assert CordonFile(tmp_path).read()[(DeviceName("cuda"), DeviceId("cuda0"))].reason == reason
