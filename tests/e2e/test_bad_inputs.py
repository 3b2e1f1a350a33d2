"""The bad-input table as a test: every case of ``bad_inputs_*.py`` gets a clear error (or,
for what may be right on another node, a warning naming it), never silence or a traceback.

``python tests/e2e/bad_inputs.py`` prints the same table with its figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bad_inputs import all_cases, run_case

CASES = all_cases()

pytestmark = pytest.mark.slow  # about 500 commands: a minute or two on two cores


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_input_gets_a_clear_answer(case, tmp_path):
    outcome = run_case(case, tmp_path)
    assert outcome.verdict in ("clear", "warned"), (
        outcome.why,
        outcome.status,
        outcome.stderr[-2000:],
        outcome.stdout[-500:],
    )


def test_the_table_covers_every_command():
    from accelkit.cli.app import COMMANDS

    used = {c.args[0] for c in CASES if c.args}
    assert set(COMMANDS) <= used
    slurm = {c.args[1] for c in CASES if c.args[:1] == ("slurm",) and len(c.args) > 1}
    assert {
        "gres-conf",
        "node-line",
        "prolog",
        "prolog-script",
        "task-prolog",
        "task-prolog-script",
        "epilog",
    } <= slurm
    assert len(CASES) >= 250
