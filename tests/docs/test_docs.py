"""The documentation keeps up with the code: commands, hookspecs, the tutorial's code, the nav."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import click
import pytest

from accelkit import hookspecs
from accelkit.cli.app import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md"))
TITLED_BLOCK = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docs_text() -> str:
    return "\n".join(p.read_text() for p in PAGES)


def test_the_command_reference_is_generated_from_the_command_itself():
    generated = load_generator().render()
    assert (DOCS / "cli.md").read_text() == generated, (
        "docs/cli.md is out of date: run `python docs/gen_cli.py`"
    )


def test_the_readme_lists_every_command_as_the_command_has_it():
    generator = load_generator()
    readme = (DOCS.parent / "README.md").read_text()
    assert generator.render_readme(readme) == readme, (
        "the README's command list is out of date: run `python docs/gen_cli.py`"
    )
    for name in COMMANDS:
        assert f"| `accelkit {name} " in readme


def test_the_generator_check_mode_reports_drift(tmp_path, monkeypatch, capsys):
    generator = load_generator()
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{generator.BEGIN}\nold\n{generator.END}\nrest\n")
    monkeypatch.setattr(generator, "CLI_MD", stale)
    monkeypatch.setattr(generator, "README", readme)
    assert generator.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0
    assert stale.read_text() == generator.render()
    assert readme.read_text() == f"# x\n{generator.command_list()}\nrest\n"


ROOT_CONTEXT = click.Context(cli, info_name="accelkit", **cli.context_settings)
COMMANDS = cli.list_commands(ROOT_CONTEXT)


def test_the_command_list_is_complete():
    assert {"plugins", "devices", "plan", "check", "metrics", "serve-metrics"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_documented(name):
    text = (DOCS / "cli.md").read_text()
    assert f"## `accelkit {name}`" in text, f"`accelkit {name}` is missing from docs/cli.md"
    command = cli.get_command(ROOT_CONTEXT, name)
    for param in command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("-"):
                assert opt in text, f"option {opt} of `accelkit {name}` is not documented"


HOOKSPECS = sorted(
    name
    for name, value in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("accelkit_")
)


def test_there_are_hookspecs_to_check():
    assert "accelkit_compute_plugins" in HOOKSPECS


@pytest.mark.parametrize("name", HOOKSPECS)
def test_every_hookspec_is_documented_with_its_signature(name):
    params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
    assert f"`{name}({params})`" in docs_text(), (
        f"hookspec {name} is not documented in docs/ as `{name}({params})`"
    )


def test_the_tutorial_code_is_the_example_package():
    blocks: dict[str, list[str]] = {}
    for title, code in TITLED_BLOCK.findall((DOCS / "writing-a-plugin.md").read_text()):
        blocks.setdefault(title, []).append(code)
    assert {
        "docs/examples/acme-npu/pyproject.toml",
        "docs/examples/acme-npu/src/acme_npu/__init__.py",
        "docs/examples/acme-npu/src/acme_npu/plugin.py",
        "docs/examples/acme-npu/tests/test_conformance.py",
    } <= set(blocks)
    for title, pieces in blocks.items():
        shown = [line for line in "".join(pieces).splitlines() if line.strip()]
        source = [line for line in (ROOT / title).read_text().splitlines() if line.strip()]
        assert shown == source, f"the tutorial's {title} differs from the file (blank lines aside)"


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in PAGES if f": {p.name}" not in nav]
    assert not missing, f"pages missing from mkdocs.yml nav: {missing}"


LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)


def _slug(heading: str) -> str:
    """The anchor mkdocs gives a heading (its default ``toc`` slugify)."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def broken_links(page: Path, site: Path = DOCS) -> list[str]:
    """The relative links of ``page`` that leave ``site``, miss their file or their heading."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        missing = not resolved.is_relative_to(site) or not resolved.exists()
        if missing or (anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_stays_in_the_site_and_finds_its_target(page: Path):
    """The site is built from docs/ alone: a link out of it, to a missing page or to a heading
    that is not there is broken on the site (mkdocs --strict refuses it)."""
    assert not broken_links(page), f"{page.name}: broken links {broken_links(page)}"


def test_the_link_check_finds_each_kind_of_broken_link(tmp_path: Path):
    site = tmp_path / "docs"
    site.mkdir()
    (tmp_path / "README.md").write_text("# Out\n")
    (site / "other.md").write_text("# Other page\n\n## `accelkit run`: what it does\n")
    page = site / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#accelkit-run-what-it-does) [ok](#here) [web](https://x.y)\n"
        "[out](../README.md) [gone](missing.md) [no heading](other.md#nowhere)\n\n# Here\n"
        "```\n[in a fence](nowhere.md)\n```\n"
    )
    assert broken_links(page, site) == ["../README.md", "missing.md", "other.md#nowhere"]
