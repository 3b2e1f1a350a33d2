"""The README's "Development" commands set up everything the suite needs and collect it all."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def development_commands() -> list[list[str]]:
    section = README[README.index("## Development") :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the Development section has no sh block"
    script = block.group(1).replace("\\\n", " ")
    return [shlex.split(part) for line in script.splitlines() for part in line.split("&&")]


def pip_install_args() -> list[str]:
    (install,) = [c for c in development_commands() if "install" in c and "pip" in c[0]]
    return install[install.index("install") + 1 :]


def test_every_distribution_and_the_example_are_installed_editable():
    args = pip_install_args()
    editable = {args[i + 1] for i, a in enumerate(args) if a == "-e"}
    members = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    expected = {"core", *(p.relative_to(ROOT).as_posix() for p in ROOT.glob("plugins/*"))}
    assert members["members"] == ["core", "plugins/*"]
    assert expected | {"docs/examples/acme-npu"} == editable
    for path in editable:
        assert (ROOT / path / "pyproject.toml").is_file(), path


def test_the_test_dependencies_of_the_nox_session_are_installed():
    noxfile = (ROOT / "noxfile.py").read_text()
    deps_block = re.search(r"TEST_DEPS = \[(.*?)\]", noxfile, re.DOTALL)
    assert deps_block is not None
    deps = {re.split(r"[<>=\[]", d)[0] for d in re.findall(r'"([^"]+)"', deps_block.group(1))}
    listed = {re.split(r"[<>=\[]", a)[0] for a in pip_install_args() if not a.startswith("-")}
    assert deps - {"pip"} <= listed, f"README misses {sorted(deps - {'pip'} - listed)}"


def test_the_test_command_collects_every_test_folder():
    (command,) = [c for c in development_commands() if c[0].endswith("pytest")]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *command[1:], "--collect-only", "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "error" not in result.stdout.splitlines()[-1]
    for folder in ("tests/core/", "tests/e2e/", "docs/examples/acme-npu/tests/"):
        assert folder in result.stdout, f"{folder} is not collected"


@pytest.mark.parametrize("lane", ['-m "not slow"'])
def test_the_fast_lane_leaves_out_the_slow_tests(lane: str):
    assert lane in README
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *shlex.split(lane), "--collect-only", "-q",
         "-p", "no:cacheprovider", "tests/e2e/test_run_crash.py", "tests/core/test_sizes.py"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_run_crash.py" not in result.stdout
    assert "test_sizes.py" in result.stdout


def test_a_hanging_test_fails_after_the_timeout(tmp_path: Path):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < int(config["timeout"]) <= 300
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hang():\n    time.sleep(60)\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(tmp_path), "-o", "timeout=1", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Timeout" in result.stdout


def commit_message_rule() -> re.Pattern[str]:
    """The pattern of the pre-commit ``commit-msg`` hook, compiled as pygrep's ``--multiline``
    compiles it; a match refuses the message."""
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    hook = config[config.index("id: commit-message") :]
    assert "stages: [commit-msg]" in hook
    assert "args: [--multiline]" in hook
    (entry,) = re.findall(r"^\s*entry: '(.*)'$", hook, re.MULTILINE)[:1]
    return re.compile(entry, re.MULTILINE | re.DOTALL)


BODY = "\n\nThe ledger could not tell which version wrote a record.\n"


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("x" * 72 + BODY, False),
        ("x" * 73 + BODY, True),
        ("Ledger records carry a schema version\n", True),
        ("Ledger records carry a schema version", True),
        ("Ledger records carry a schema version\n\n# Please enter the message\n#\n", True),
        ("Ledger records carry a schema version" + BODY + "# Please enter the message\n", False),
    ],
)
def test_the_commit_message_hook_holds_the_subject_and_body_rule(message, refused):
    assert (commit_message_rule().search(message) is not None) is refused
