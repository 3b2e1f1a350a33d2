"""docs/cli.md reads, once rendered, as the command's own help: nothing is eaten as HTML.

The page is rendered with Python-Markdown and the extensions of mkdocs.yml that shape tables;
every option's help text must then appear in the page's visible text as the command prints it
(``<vendor>-<class>.json``, ``accelkit.io/<agent>`` and ``[x>0]`` included).
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import click
import markdown
import pytest

from accelkit.cli.app import cli

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
ROOT = click.Context(cli, info_name="accelkit", **cli.context_settings)


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(source: str) -> str:
    page = markdown.markdown(source, extensions=["tables", "fenced_code"])
    parser = _Text()
    parser.feed(page)
    return " ".join(" ".join(parser.parts).split())


RENDERED = visible_text(CLI_MD.read_text())


def option_helps() -> list[tuple[str, str]]:
    found = []
    for name in cli.list_commands(ROOT):
        command = cli.get_command(ROOT, name)
        assert command is not None
        ctx = click.Context(command, info_name=name, parent=ROOT)
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                found.append((f"{name} {record[0]}", " ".join(record[1].split())))
    return found


@pytest.mark.parametrize(("option", "help_text"), option_helps())
def test_every_option_help_is_shown_as_the_command_prints_it(option, help_text):
    shown = help_text.replace("`", "")  # code spans render as code, their text unchanged
    assert shown in RENDERED, f"{option}: docs/cli.md does not show {help_text!r}"


def test_placeholders_in_angle_brackets_survive_rendering():
    assert "Write <vendor>-<class>.json into this directory" in RENDERED
    assert "(default: accelkit.io/<agent>)" in RENDERED


def test_the_check_itself_catches_an_eaten_placeholder():
    eaten = visible_text("| option | meaning |\n|---|---|\n| `--kind` | accelkit.io/<agent> |\n")
    assert "<agent>" not in eaten
    assert re.search(r"accelkit\.io/\s*$", eaten)
