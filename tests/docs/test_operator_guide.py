"""The operator guide works when followed: its commands are the ones that exist, its example
outputs are what those commands print today, and its descriptions of the example nodes hold.

Every ``console`` block that starts with ``$ accelkit ...`` (in any page or the README) is run
from the top of the source tree and must print exactly the block's output; the guide's
``accelkit check`` example is run on its own TOML; the install commands name distributions of
this tree.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import cli_env

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operator-guide.md"
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]
CONSOLE = re.compile(r"^```console\n\$ (accelkit [^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def accelkit(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    env["COLUMNS"] = "100"  # tables are narrower; a fixed width keeps rich's layout stable
    return subprocess.run(
        [*ACCELKIT, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def console_examples() -> list[tuple[str, str, str]]:
    return [
        (page.name, command, output)
        for page in PAGES
        for command, output in CONSOLE.findall(page.read_text(encoding="utf-8"))
    ]


def test_the_guide_shows_its_examples_with_their_commands():
    assert sum(page == GUIDE.name for page, _c, _o in console_examples()) >= 3


@pytest.mark.parametrize(("page", "command", "output"), console_examples())
def test_every_example_prints_what_the_page_shows(page, command, output):
    result = accelkit(shlex.split(command)[1:])
    assert result.returncode == 0, result.stderr
    assert result.stdout == output, (
        f"{page}: `{command}` prints something else now; paste its output into the page"
    )


def test_the_check_example_reports_what_the_guide_shows(tmp_path):
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(
        r"```toml\n([^`]*)```\n\n`accelkit check --config (\S+)` prints:\n\n```text\n(.*?)```",
        text,
        re.DOTALL,
    )
    assert match is not None, "the guide's check example is gone"
    config, shown_path, expected = match.groups()
    path = tmp_path / "host.toml"
    path.write_text(config)
    result = accelkit(["check", "--config", str(path)])
    assert result.returncode == 2
    assert result.stderr.replace(str(path), shown_path) == expected


def devices(config: str) -> dict[str, list[dict[str, object]]]:
    result = accelkit(["devices", "--config", config, "--json"])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("link", "config"),
    [
        ("examples/mock-devices.toml", "docs/examples/demo.toml"),
        ("examples/mock-gpu-node.toml", "docs/examples/auto-split.toml"),
    ],
)
def test_the_example_nodes_are_as_the_guide_describes_them(link, config):
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    pattern = (
        re.escape(f"]({link})")
        + r"[^0-9]*of (\d+) cores on (\d+) NUMA nodes, (\d+) GiB and (\d+) GPUs"
    )
    match = re.search(pattern, text)
    assert match is not None, f"the guide no longer describes {link}"
    cores, numa, gib, gpus = (int(g) for g in match.groups())
    found = devices(config)
    assert len(found["cpu"]) == cores
    assert len({d["numa_node"] for d in found["cpu"]}) == numa
    assert sum(int(d["memory_size"]) for d in found["mem"]) == gib * 2**30
    assert len(found["cuda"]) == gpus


def install_commands() -> list[list[str]]:
    section = GUIDE.read_text(encoding="utf-8").split("## Install", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line]


def test_the_install_commands_name_distributions_of_this_tree():
    commands = install_commands()
    assert commands, "the guide says no longer how to install"
    local = [arg for argv in commands for arg in argv if arg.startswith("./")]
    assert "./core" in local
    for path in local:
        project = tomllib.loads((ROOT / path / "pyproject.toml").read_text())["project"]
        assert project["name"].startswith("accelkit")
    for argv in commands:  # nothing is published: never an install by name from an index
        if "install" in argv:
            names = [a for a in argv[argv.index("install") + 1 :] if not a.startswith("-")]
            assert all(n.startswith(("./", "dist/")) for n in names), argv
