"""The bad-input table: the real ``accelkit`` command over inputs an operator gets wrong.

Each case runs the installed CLI in a process of its own, in a fresh directory holding a node of
mock devices (two agents, four cores, 8 GiB of memory, two GPUs; its ledger in that directory)
and whatever files the case writes. The outcome is classified:

- ``clear``: exit status other than 0, exactly one ``error:`` line on stderr, no traceback, no
  ``internal error``, the error names what is wrong (the case's ``names``: a flag, key, file,
  agent or variable), and no file of the case's directory changed (the ledger's aside);
- ``warned``: exit 0, with a ``warning:`` line naming what is wrong (a name a config may hold
  for another node: a plugin not installed here, an agent left without cores);
- ``silent``: exit 0 (or still running when the case's time is up) on a bad input, unsaid;
- ``unclear``: an error that does not name what is wrong, several ``error:`` lines, none, an
  ``internal error``, or an error after changing files;
- ``traceback``: a Python traceback on stdout or stderr.

Run ``python tests/e2e/bad_inputs.py`` for the figures (``--list``, ``--only TEXT``, ``--json``,
``--workers N``); ``tests/e2e/test_bad_inputs.py`` asserts every case is ``clear``. The cases
themselves are in ``bad_inputs_commands.py``, ``bad_inputs_config.py`` and
``bad_inputs_outputs.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]

#: the node every case starts from: two agents splitting mock devices among them
HOST = """\
[resource]
allocation-mode = "auto-split"
reserved-cpu = 0
reserved-mem = "0"
state-dir = "state"

[plugins]
allowed = ["mock"]
strict = true

[plugins.config.mock]
config-file = "devices.toml"

[[agents]]
[agents.agent]
id = "agent-1"

[[agents]]
[agents.agent]
id = "agent-2"
"""

DEVICES = """\
[[kinds]]
key = "cpu"
[[kinds.devices]]
id = "0"
numa-node = 0
[[kinds.devices]]
id = "1"
numa-node = 0
[[kinds.devices]]
id = "2"
numa-node = 0
[[kinds.devices]]
id = "3"
numa-node = 0

[[kinds]]
key = "mem"
[[kinds.devices]]
id = "root"
memory = "8G"

[[kinds]]
key = "cuda"
allocation = "discrete"
[[kinds.devices]]
id = "cuda0"
numa-node = 0
memory = "40G"
[[kinds.devices]]
id = "cuda1"
numa-node = 0
memory = "40G"
"""

#: seconds a case may take; a command still running then accepted its input (a server)
CASE_SECONDS = 60

VERDICTS = ("clear", "warned", "silent", "unclear", "traceback")


@dataclass(frozen=True)
class Case:
    """One bad input: the command's arguments and environment, the files it finds, and the
    words its error must contain (``a|b``: either).

    In ``args``, ``env`` and file contents, ``{dir}`` is the case's directory and ``{cfg}`` its
    host config. An ``env`` value of ``None`` unsets the variable.
    """

    name: str
    args: tuple[str, ...]
    names: tuple[str, ...] = ()
    env: Mapping[str, str | None] = field(default_factory=dict)
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    #: named in the issue that asked for this table (one of its silent or unclear inputs)
    issue: bool = False
    #: where the case is about reading a value right, not refusing it: what stdout must hold
    #: for the value to count as read right (exit 0 then is ``clear``)
    stdout_has: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What one case did and its verdict."""

    case: Case
    status: int | None
    stdout: str
    stderr: str
    verdict: str
    why: str


class Table:
    """Cases as a part module writes them: ``case``, ``config`` and ``devices`` add one each."""

    def __init__(self) -> None:
        self.cases: list[Case] = []

    def case(self, name: str, *args: str, names: tuple[str, ...] = (), **more: Any) -> None:
        """A case running ``accelkit ARGS``; ``more`` as :class:`Case` takes it."""
        self.cases.append(Case(name, tuple(args), names, **more))

    def config(
        self,
        name: str,
        text: str | bytes,
        *names: str,
        command: str = "check",
        warns: bool = False,
        **more: Any,
    ) -> None:
        """A host config file ``bad.toml`` read by ``command``; its error names the file too (a
        warning, ``warns``: what may be right on another node, need not)."""
        self.case(
            f"config/{name}",
            *command.split(),
            "--config",
            "{dir}/bad.toml",
            names=names if warns else ("bad.toml", *names),
            files={"bad.toml": text},
            **more,
        )

    def devices(self, name: str, text: str, *names: str) -> None:
        """A mock device file ``devices.toml``, read when the plugins load (``check``)."""
        self.case(
            f"devices/{name}",
            "check",
            "--config",
            "{cfg}",
            names=("devices.toml", *names),
            files={"devices.toml": text},
        )


def edited(old: str, new: str) -> str:
    """The node's host config with one line (or block) replaced."""
    assert old in HOST, old
    return HOST.replace(old, new, 1)


def under(header: str, line: str) -> str:
    """The node's host config with ``line`` added under the first ``header``."""
    return edited(header + "\n", header + "\n" + line + "\n")


def all_cases() -> list[Case]:
    """Every case of the part modules, each name once."""
    import bad_inputs_commands
    import bad_inputs_config
    import bad_inputs_outputs

    cases = [
        *bad_inputs_commands.CASES,
        *bad_inputs_config.CASES,
        *bad_inputs_outputs.CASES,
    ]
    if twice := sorted({c.name for c in cases if sum(d.name == c.name for d in cases) > 1}):
        msg = f"cases named twice: {twice}"
        raise ValueError(msg)
    return cases


def _fill(text: str, values: Mapping[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def prepare(case: Case, where: Path) -> tuple[list[str], dict[str, str]]:
    """Write the case's node and files into ``where``; its command line and environment."""
    where.mkdir(parents=True)
    values = {"dir": str(where), "cfg": str(where / "host.toml")}
    (where / "host.toml").write_text(HOST)
    (where / "devices.toml").write_text(DEVICES)
    for name, content in case.files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(_fill(content, values), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "SLURM_"))}
    # no system-wide config and no default ledger of this machine: only the case's own files
    env["ACCELKIT_SYSTEM_CONFIG"] = str(where / "no-system-config" / "host.toml")
    env["ACCELKIT_STATE_DIR"] = str(where / "state")
    env["NO_COLOR"] = "1"
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = _fill(value, values)
    return [*ACCELKIT, *(_fill(a, values) for a in case.args)], env


def classify(case: Case, status: int | None, stdout: str, stderr: str) -> tuple[str, str]:
    """The verdict on one run and the reason for it (``names`` filled in as the arguments)."""
    if "Traceback (most recent call last)" in stdout + stderr:
        return "traceback", "a Python traceback"
    if case.stdout_has is not None:
        if status == 0 and case.stdout_has in stdout:
            return "clear", "read right"
        return "silent", f"stdout lacks {case.stdout_has!r}"
    if status is None or status == 0:
        # ``plan`` prints its warnings with the plan, on stdout
        lines = (stderr + "\n" + stdout).splitlines()
        warnings = [line for line in lines if line.startswith("warning:")]
        said = "\n".join(warnings)
        if warnings and all(any(a in said for a in n.split("|")) for n in case.names):
            return "warned", "accepted with a warning naming it"
        if status is None:
            return "silent", f"still running after {CASE_SECONDS} s"
        return "silent", "exit 0"
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if not errors:
        return "unclear", "no 'error:' line"
    if any("internal error" in line for line in errors):
        return "unclear", "internal error"
    if len(errors) > 1:
        return "unclear", f"{len(errors)} 'error:' lines"
    if missing := [n for n in case.names if not any(a in stderr for a in n.split("|"))]:
        return "unclear", f"does not name {', '.join(map(repr, missing))}"
    return "clear", "named"


def snapshot(where: Path) -> dict[str, tuple[int, int]]:
    """Each file and directory under ``where`` but the ledger's: its size and change time."""
    found: dict[str, tuple[int, int]] = {}
    for path in where.rglob("*"):
        relative = path.relative_to(where)
        if relative.parts[0] == "state":  # a ledger read (and made) on the way to the error
            continue
        info = path.lstat()
        found[str(relative)] = (info.st_size, info.st_mtime_ns)
    return found


def run_case(case: Case, root: Path) -> Outcome:
    """Run one case in a directory of its own under ``root``."""
    where = root / case.name
    argv, env = prepare(case, where)
    before = snapshot(where)
    with subprocess.Popen(
        argv,
        cwd=where,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        status: int | None
        try:
            out, err = process.communicate(timeout=CASE_SECONDS)
            status = process.returncode
        except subprocess.TimeoutExpired:  # a server that took the input: what it said so far
            process.kill()
            out, err = process.communicate()
            status = None
    stdout = out.decode(errors="replace")
    stderr = err.decode(errors="replace")
    values = {"dir": str(where), "cfg": str(where / "host.toml")}
    named = Case(**{**case.__dict__, "names": tuple(_fill(n, values) for n in case.names)})
    verdict, why = classify(named, status, stdout, stderr)
    after = snapshot(where)
    if verdict == "clear" and status != 0 and after != before:
        changed = sorted(set(after) ^ set(before) | {k for k in after if after[k] != before.get(k)})
        verdict, why = "unclear", f"refused, but changed {', '.join(changed)[:200]}"
    return Outcome(case, status, stdout, stderr, verdict, why)


def run_cases(cases: Sequence[Case], *, workers: int = 2) -> list[Outcome]:
    """Every case, ``workers`` at a time, each in a fresh directory removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="accelkit-bad-inputs-"))
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda c: run_case(c, root), cases))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def figures(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Cases and the count of each verdict."""
    outcomes = list(outcomes)
    counts = Counter(o.verdict for o in outcomes)
    return {"cases": len(outcomes), **{v: counts[v] for v in VERDICTS}}


def first_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(nothing on stderr)"])[0][:160]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", action="append", default=[], help="cases whose name has TEXT")
    parser.add_argument("--list", action="store_true", help="print the case names and stop")
    parser.add_argument("--json", action="store_true", help="print every outcome as JSON")
    parser.add_argument("--workers", type=int, default=2, help="cases run at a time")
    parser.add_argument("--all", action="store_true", help="list every case, clear ones too")
    options = parser.parse_args(argv)
    cases = [c for c in all_cases() if not options.only or any(t in c.name for t in options.only)]
    if options.list:
        print("\n".join(c.name for c in cases))
        return 0
    outcomes = run_cases(cases, workers=options.workers)
    if options.json:
        rows = [
            {
                "case": o.case.name,
                "args": list(o.case.args),
                "env": dict(o.case.env),
                "status": o.status,
                "verdict": o.verdict,
                "why": o.why,
                "error": first_error(o.stderr),
            }
            for o in outcomes
        ]
        print(json.dumps({"figures": figures(outcomes), "outcomes": rows}, indent=1))
    else:
        for o in outcomes:
            if options.all or o.verdict != "clear":
                print(f"{o.verdict:9} {o.case.name}: {o.why} | {first_error(o.stderr)}")
        named = [o for o in outcomes if o.case.issue]
        print()
        print("| | cases | clear | warned | silent | unclear | traceback |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, group in (("all", outcomes), ("named in the issue", named)):
            f = figures(group)
            print(f"| {label} | " + " | ".join(str(f[k]) for k in ("cases", *VERDICTS)) + " |")
    return 0 if all(o.verdict in ("clear", "warned") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
