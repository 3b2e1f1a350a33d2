"""Every command block of the README and docs/ works as written, as far as this machine allows.

Each ```sh, ```bash, ```shell and ```console block is classified below, so a new block fails
:func:`test_every_command_block_is_classified` until it is:

- ``RUN``: run with bash in a copy of the source tree (``$ `` lines only for console blocks), each
  page's blocks in order in one sandbox; every line must succeed. Machine paths are moved into
  the sandbox (``/opt/accelkit``, ``/usr/local/bin``, ``/etc/accelkit/host.toml`` as a copy of
  the demo node, ``/etc/slurm``, ``~``); pip reads no index: a fresh venv sees the third-party
  packages of the running interpreter and installs this tree's distributions from their paths.
  Lines a block may leave out are named with the reason (``SKIP_LINES``).
- ``SYNOPSIS``: a usage line with placeholders; its command and every option must exist.
- ``ELSEWHERE``: what cannot run here, with the reason and, where there is one, the test that
  runs it.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
from pathlib import Path

import click
import pytest

from accelkit.cli.app import cli
from accelkit.testing.cli_runner import cli_env

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(sh|bash|shell|console)[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)

#: what a fresh venv must not see of the running one: this tree's distributions, pip, .pth files
OWN = re.compile(r"(accelkit|acme_npu|_editable_impl|pip\b|pip-).*|.*\.pth$")

RUN = "run"
SYNOPSIS = "synopsis"

#: (page, the block's first line up to 60 characters) -> RUN, SYNOPSIS or why it cannot run here
BLOCKS: dict[tuple[str, str], str] = {
    (
        "README.md",
        "python3 -m pip install nox && python3 -m nox -s demo",
    ): "installs nox from the package index and builds the session's venv from it; "
    "test_the_demo_sessions_commands_run runs the session's accelkit commands",
    (
        "README.md",
        "python3 -m pip install nox uv && python3 -m nox -s tests lin",
    ): "installs nox and uv from the package index and runs the whole suite: what CI does",
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -e core -e pl"): RUN,
    (
        "index.md",
        "python3 -m pip install nox && python3 -m nox -s demo",
    ): "the README's demo command (see there)",
    ("containment.md", "accelkit -v run --config F --agent agent-1 --slots cpu=2,mem"): SYNOPSIS,
    ("docker.md", "accelkit run --runtime docker --image IMAGE [OPTIONS] -- CMD"): SYNOPSIS,
    (
        "docker.md",
        "podman system service --time=0 unix:///run/podman/podman.soc",
    ): "starts podman's API service for good and runs IMAGE, a placeholder; "
    "tests/runtime/test_docker_podman.py runs docker workloads through podman's API service",
    ("health.md", 'accelkit cordon --config /etc/accelkit/host.toml --reason "f'): RUN,
    ("kubernetes.md", "accelkit k8s-device-plugin --config /etc/accelkit/host.toml "): SYNOPSIS,
    ("kubernetes.md", "accelkit dra-driver --config /etc/accelkit/host.toml [--agen"): SYNOPSIS,
    ("metrics.md", "accelkit metrics --config /etc/accelkit/host.toml           "): RUN,
    (
        "metrics.md",
        "curl -s http://127.0.0.1:9464/metrics | promtool check metri",
    ): "needs `accelkit serve` listening; tests/e2e/test_prometheus_dashboard.py runs promtool "
    "on the served /metrics",
    (
        "metrics.md",
        "accelkit serve-metrics --port 9464 --config /etc/accelkit/ho",
    ): "a server that runs until stopped; tests/core/test_serve_metrics.py starts and scrapes it",
    ("operator-guide.md", "python3 -m venv /opt/accelkit"): RUN,
    ("operator-guide.md", "python3 -m pip wheel --no-deps --wheel-dir dist ./core ./plu"): RUN,
    ("operator-guide.md", "/opt/accelkit/bin/pip install ./plugins/mock"): RUN,
    ("operator-guide.md", "$ accelkit plan --config docs/examples/demo.toml --mode shar"): RUN,
    ("operator-guide.md", "$ accelkit plan --config docs/examples/auto-split.toml"): RUN,
    ("operator-guide.md", "$ accelkit plan --config docs/examples/numa-aware-split.toml"): RUN,
    (
        "serve.md",
        "accelkit serve --config /etc/accelkit/host.toml --listen 127",
    ): "the node service runs until stopped; tests/e2e/test_serve_cli.py starts and stops it",
    ("serve.md", "accelkit repartition --config /etc/accelkit/host.toml"): RUN,
    (
        "slurm.md",
        "#!/bin/sh",
    ): "an epilog slurmd runs with the job's SLURM_* variables; tests/bridge/slurm runs it "
    "under a real slurmctld and slurmd",
    ("slurm.md", "accelkit slurm prolog-script --config /etc/accelkit/host.tom"): RUN,
    ("slurm.md", "accelkit slurm task-prolog-script --config /etc/accelkit/hos"): RUN,
    (
        "slurm.md",
        ".venv/bin/python tests/benchmarks/slurm_bridge.py --runs 20 ",
    ): "a benchmark of many Slurm jobs against a real slurmctld, minutes long",
    ("writing-a-plugin.md", "python3 -m venv ~/acme-venv"): RUN,
}

#: lines a RUN block leaves out here, and why
SKIP_LINES = {
    ".venv/bin/pytest": "runs the whole suite, which this test is part of",
    "accelkit metrics --config /etc/accelkit/host.toml --watch 2": (
        "refreshes until interrupted; the table is the block's first line"
    ),
}


def blocks() -> list[tuple[str, str, str]]:
    """(page name, the first line up to 60 characters, body) of every command block."""
    found = []
    for page in PAGES:
        for _lang, body in BLOCK.findall(page.read_text(encoding="utf-8")):
            found.append((page.name, body.splitlines()[0][:60], body))
    return found


def runnable(body: str) -> str:
    """The script of a RUN block: console blocks keep their ``$ `` lines."""
    lines = body.splitlines()
    if lines[0].startswith("$ "):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    script = "\n".join(lines).replace("\\\n", " ")
    return "\n".join(
        line for line in script.splitlines() if not any(line.startswith(s) for s in SKIP_LINES)
    )


def test_every_command_block_is_classified():
    found = {(page, first) for page, first, _body in blocks()}
    unclassified = sorted(found - set(BLOCKS))
    assert not unclassified, f"classify these blocks in BLOCKS: {unclassified}"
    stale = sorted(set(BLOCKS) - found)
    assert not stale, f"BLOCKS names blocks that are gone: {stale}"


def test_each_skipped_line_is_in_a_run_block():
    run_text = "\n".join(b for p, f, b in blocks() if BLOCKS.get((p, f)) == RUN)
    for line in SKIP_LINES:
        assert line in run_text, f"SKIP_LINES names {line!r}, which no RUN block holds"


def test_every_block_that_cannot_run_says_why():
    for key, kind in BLOCKS.items():
        assert kind in (RUN, SYNOPSIS) or len(kind) > 20, key
        for path in re.findall(r"\btests/[\w/.]+\w", kind):  # the test that runs it instead
            assert (ROOT / path).exists(), f"{key}: {path} does not exist"


ROOT_CONTEXT = click.Context(cli, info_name="accelkit", **cli.context_settings)


def command_of(words: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command the words name and the words after it."""
    command: click.Command = cli
    ctx = ROOT_CONTEXT
    rest = words[1:]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"no command {rest[0]!r} in {' '.join(words)}"
        ctx = click.Context(sub, info_name=rest[0], parent=ctx)
        command, rest = sub, rest[1:]
    return command, rest


@pytest.mark.parametrize(
    ("page", "first"), [(p, f) for p, f, _b in blocks() if BLOCKS.get((p, f)) == SYNOPSIS]
)
def test_a_synopsis_names_a_command_and_options_that_exist(page, first):
    body = next(b for p, f, b in blocks() if (p, f) == (page, first))
    words = shlex.split(body.replace("\\\n", " ").replace("[", " ").replace("]", " "))
    words = [w for w in words if w != "-v"]  # the group's own option
    command, rest = command_of(words)
    options = {o for param in command.params for o in getattr(param, "opts", [])}
    for word in rest:
        if word == "--":
            break
        if word.startswith("-") and word != "...":
            assert word.split("=")[0] in options, f"{page}: {first!r}: no option {word}"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the source tree, as a checkout has it."""
    base = tmp_path_factory.mktemp("docs-run")
    tree = base / "tree"
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", ".nox", "*.egg-info", ".*_cache", ".hypothesis",
        ".import_linter_cache", "build", "dist", "site", ".coverage",
    )  # fmt: skip
    shutil.copytree(ROOT, tree, ignore=ignore, symlinks=True)
    return tree


def environment(base: Path) -> dict[str, str]:
    """PATH, HOME and pip settings of a machine whose paths lie under ``base``."""
    shims = base / "shims"
    shims.mkdir(exist_ok=True)
    # a fresh venv sees this interpreter's third-party packages (no index to fetch them from),
    # never this tree's distributions: those come from the paths the block names
    deps = base / "third-party"
    deps.mkdir(exist_ok=True)
    for site_dir in (Path(p) for p in site.getsitepackages() if "site-packages" in p):
        for entry in site_dir.iterdir():
            if not OWN.match(entry.name) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    first = "next(i for i, p in enumerate(sys.path) if p.endswith('site-packages'))"
    (shims / "python3").write_text(
        "#!/bin/sh\n"
        f'"{sys.executable}" "$@" || exit $?\n'
        'if [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        '  for d in "$3"/lib/python*/site-packages; do\n'
        f'    echo "import sys; sys.path.insert({first}, \'{deps}\')" > "$d/0-third-party.pth"\n'
        "  done\nfi\n"
    )
    (shims / "python3").chmod(0o755)
    for bare in ("pip", "pip3", "python"):  # a page names the environment it installs into
        (shims / bare).write_text(
            f"#!/bin/sh\necho 'bare {bare}: which environment?' >&2\nexit 1\n"
        )
        (shims / bare).chmod(0o755)
    local_bin = base / "usr-local-bin"
    local_bin.mkdir(exist_ok=True)
    (base / "home").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "PIP_"))}
    env.update(
        PATH=os.pathsep.join([str(local_bin), str(shims), str(Path(sys.executable).parent),
                              env.get("PATH", "")]),  # accelkit: the installed one, else ours
        HOME=str(base / "home"),
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        ACCELKIT_STATE_DIR=str(base / "state"),
        COLUMNS="100",
    )  # fmt: skip
    return env


def machine_paths(script: str, base: Path) -> str:
    """``script`` with the machine paths it names moved under ``base``."""
    etc = base / "etc"
    (etc / "accelkit").mkdir(parents=True, exist_ok=True)
    (etc / "slurm").mkdir(exist_ok=True)
    for name in ("demo.toml", "mock-devices.toml"):
        shutil.copy(ROOT / "docs" / "examples" / name, etc / "accelkit" / name)
    shutil.copy(etc / "accelkit" / "demo.toml", etc / "accelkit" / "host.toml")
    for path, moved in (
        ("/etc/accelkit/", f"{etc}/accelkit/"),
        ("/etc/slurm/", f"{etc}/slurm/"),
        ("/opt/accelkit", f"{base}/opt-accelkit"),
        ("/usr/local/bin/", f"{base}/usr-local-bin/"),
    ):
        script = script.replace(path, moved)
    return script


def run_pages() -> list[str]:
    return sorted({p for p, f, _b in blocks() if BLOCKS.get((p, f)) == RUN})


@pytest.mark.slow
@pytest.mark.parametrize("page", run_pages())
def test_the_command_blocks_of_each_page_run_as_written(page, sandbox, tmp_path):
    env = environment(tmp_path)
    for first, body in [(f, b) for p, f, b in blocks() if p == page and BLOCKS[(p, f)] == RUN]:
        script = machine_paths(runnable(body), tmp_path)
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=sandbox, env=env,
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert result.returncode == 0, (
            f"{page}: the block starting {first!r} fails as written:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-3000:]}"
        )


def test_the_install_path_is_the_one_the_units_and_scripts_call():
    guide = (ROOT / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    assert "ln -sf /opt/accelkit/bin/accelkit /usr/local/bin/accelkit" in guide
    callers = [p for p in PAGES if "/usr/local/bin/accelkit" in p.read_text(encoding="utf-8")]
    assert {"serve.md", "slurm.md"} <= {p.name for p in callers}
    for page in [*PAGES, *sorted((ROOT / "docs" / "examples" / "k8s").glob("*.yaml"))]:
        text = page.read_text(encoding="utf-8")
        for other in re.findall(r"/(?:usr/bin|opt/\w+/bin)/accelkit\b", text):
            assert other == "/opt/accelkit/bin/accelkit", f"{page.name} calls {other}"
        assert "pip install accelkit" not in text, f"{page.name} installs from an index"


def demo_commands() -> list[list[str]]:
    """The ``session.run("accelkit", ...)`` calls of noxfile.py's demo session, in order."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    (demo,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "demo"]
    names: dict[str, str] = {}
    commands = []
    for statement in demo.body:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
            names.update(
                {t.id: statement.value.value for t in statement.targets if isinstance(t, ast.Name)}
            )
        call = getattr(statement, "value", None)
        if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "run":
            words = [a.value if isinstance(a, ast.Constant) else names[a.id] for a in call.args]
            if words[0] == "accelkit":
                commands.append(words)
    return commands


@pytest.mark.slow
def test_the_demo_sessions_commands_run(tmp_path):
    commands = demo_commands()
    assert [c[1] for c in commands][:4] == ["plugins", "check", "devices", "plan"]
    env = cli_env()
    env["ACCELKIT_STATE_DIR"] = str(tmp_path / "state")
    shown = ""
    for words in commands:
        result = subprocess.run(
            [sys.executable, "-c", "from accelkit.cli.app import run; run()", *words[1:]],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"nox -s demo: {shlex.join(words)}: {result.stderr}"
        shown += result.stdout
    assert "workload sees cuda=cuda" in shown
