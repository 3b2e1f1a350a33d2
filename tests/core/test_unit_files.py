"""The systemd units in docs/metrics.md and docs/serve.md: every option known to systemd, as
written, and each runs its command as the state-dir owner."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_unit(doc: str) -> str:
    found = re.search(r"```ini\n(\[Unit\].*?)```", (DOCS / doc).read_text(), re.DOTALL)
    assert found is not None, f"docs/{doc} shows no systemd unit"
    return found.group(1)


def test_the_metrics_unit_runs_serve_metrics_as_the_state_dir_owner() -> None:
    unit = documented_unit("metrics.md")
    assert "ExecStart=/usr/local/bin/accelkit serve-metrics --port 9464" in unit
    assert "DynamicUser" not in unit  # a transient user would read another, empty state-dir
    assert "LimitNOFILE=" in unit


def test_the_serve_unit_runs_serve_as_the_state_dir_owner_and_stops_it_with_sigterm() -> None:
    unit = documented_unit("serve.md")
    assert "ExecStart=/usr/local/bin/accelkit serve --config" in unit
    assert "--listen 127.0.0.1:" in unit
    assert "DynamicUser" not in unit  # a transient user would read another, empty state-dir
    assert "KillSignal=SIGTERM" in unit  # what the service ends cleanly on


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize(
    ("doc", "service"),
    [("metrics.md", "accelkit-metrics.service"), ("serve.md", "accelkit.service")],
)
def test_systemd_knows_every_option_of_the_documented_unit(
    tmp_path: Path, doc: str, service: str
) -> None:
    executable = Path(sys.executable).with_name("accelkit")  # the installed command
    unit = documented_unit(doc).replace("/usr/local/bin/accelkit", str(executable))
    path = tmp_path / service
    path.write_text(unit)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for complaint in ("Unknown", "ignoring", "Invalid", "Failed to parse"):
        assert complaint not in result.stderr, result.stderr
