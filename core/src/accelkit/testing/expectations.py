"""How the conformance checks report a broken rule: one plain sentence, no traceback noise."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NoReturn

import pytest


def expect(condition: bool, message: str) -> None:
    """Fail the running check with ``message`` unless ``condition`` holds.

    The message is written for the plugin's author: it says which rule is broken and by what,
    so the pytest traceback into the kit is left out.
    """
    if not condition:
        pytest.fail(message, pytrace=False)


def expect_none(problems: Iterable[str], intro: str) -> None:
    """Fail with every problem found, one per line, after ``intro``; pass when there are none."""
    found = list(problems)
    if found:
        lines = "\n".join(f"  - {p}" for p in found)
        pytest.fail(f"{intro}:\n{lines}", pytrace=False)


def broken_rule(plugin: object, rule: str, problem: str, fix: str) -> str:
    """The sentence of a failed rule: which plugin, which rule, what went wrong, how to fix it."""
    key = getattr(plugin, "key", "?")
    return (
        f"plugin {key!r} ({type(plugin).__name__}) breaks the rule {rule!r}: {problem}\nFix: {fix}"
    )


def fail_rule(plugin: object, rule: str, problem: str, fix: str) -> NoReturn:
    """Fail the running check with :func:`broken_rule`'s sentence."""
    pytest.fail(broken_rule(plugin, rule, problem, fix), pytrace=False)
