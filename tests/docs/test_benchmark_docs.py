"""The benchmark docs stand on their own: every file they name and every workload the harness
measures "of WORKLOADS.md" is in this repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "tests" / "benchmarks"
DOCS = [BENCH / "README.md", BENCH / "WORKLOADS.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
SCRIPT = re.compile(r"`(?:python )?((?:tests/benchmarks/)?[\w.-]+\.py)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_points_into_the_repository(doc: Path):
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_script_named_exists(doc: Path):
    for name in SCRIPT.findall(doc.read_text(encoding="utf-8")):
        path = ROOT / name if "/" in name else BENCH / name
        assert path.is_file(), f"{doc.name} names {name}, which is not in tests/benchmarks"


def test_every_workload_measured_of_workloads_md_is_defined_there():
    defined = set(re.findall(r"^\| ([A-Z]\d+) \|", (BENCH / "WORKLOADS.md").read_text(), re.M))
    named: set[str] = set()
    for script in BENCH.glob("*.py"):
        text = script.read_text(encoding="utf-8")
        head = text.split('"""')[1] if '"""' in text else ""  # the module docstring
        if "WORKLOADS.md" in head:  # "R1 and R2 of WORKLOADS.md ..."
            named |= set(re.findall(r"\b([A-Z]\d)\b", head.split("WORKLOADS.md")[0]))
    assert {"W1", "L1", "R1"} <= named
    assert named <= defined, f"not in WORKLOADS.md: {sorted(named - defined)}"
