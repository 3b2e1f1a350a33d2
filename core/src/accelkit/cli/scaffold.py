"""Rendering a new plugin distribution from the templates shipped with accelkit.

The templates are package data (``accelkit/cli/templates/new_plugin``), filled in with
:class:`string.Template`. The distribution is written into a temporary directory beside the
target and renamed into place, so a failure leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from string import Template

import attrs

from accelkit.__about__ import __version__
from accelkit.apiversion import PLUGIN_API_VERSION
from accelkit.errors import ConfigError

__all__ = ["PluginScaffold", "write_scaffold"]

_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
#: the keys of the shipped plugins: their distributions (accelkit-cuda, ...) and packages
#: (accelkit_cuda, ...) exist already, and a second one would shadow the first
_RESERVED = frozenset({"cpu", "mem", "cuda", "mock"})

#: template file -> path in the generated distribution (``{package}`` filled in)
LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "__init__.py.tmpl": "src/{package}/__init__.py",
    "plugin.py.tmpl": "src/{package}/plugin.py",
    "conftest.py.tmpl": "tests/conftest.py",
    "test_conformance.py.tmpl": "tests/test_conformance.py",
    "test_fake_hardware.py.tmpl": "tests/test_fake_hardware.py",
}


def compatible_range(version: str) -> str:
    """``accelkit>=0.2,<0.3`` for accelkit 0.2.x: the releases that keep the plugin API."""
    major, minor = (int(part) for part in version.split(".")[:2])
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"accelkit>={major}.{minor},<{upper}"


@attrs.frozen
class PluginScaffold:
    """The names of a new plugin distribution, all derived from its device key."""

    key: str

    @classmethod
    def named(cls, name: str) -> PluginScaffold:
        """Check ``name`` (the plugin's key, e.g. ``npu`` or ``acme-npu``)."""
        if not _NAME.fullmatch(name) or len(name) > 40:
            msg = (
                f"plugin name {name!r} must be lower-case letters and digits, words joined by "
                "'-', starting with a letter (for example 'npu' or 'acme-npu')"
            )
            raise ConfigError(msg)
        if name in _RESERVED:
            msg = f"plugin name {name!r} is taken by a shipped plugin; choose your device's name"
            raise ConfigError(msg)
        return cls(name)

    @property
    def package(self) -> str:
        return "accelkit_" + self.key.replace("-", "_")

    @property
    def distribution(self) -> str:
        return f"accelkit-{self.key}"

    def substitutions(self) -> Mapping[str, str]:
        return {
            "key": self.key,
            "package": self.package,
            "dist": self.distribution,
            "Class": "".join(word.capitalize() for word in self.key.split("-")),
            "ENV": self.key.upper().replace("-", "_"),
            "api_version": PLUGIN_API_VERSION,
            "requires": compatible_range(__version__),
        }

    def render(self) -> dict[str, str]:
        """Every file of the distribution: relative path -> text."""
        templates = files("accelkit.cli") / "templates" / "new_plugin"
        values = self.substitutions()
        rendered = {
            target.format(package=self.package): Template(
                (templates / source).read_text(encoding="utf-8")
            ).substitute(values)
            for source, target in LAYOUT.items()
        }
        rendered[f"src/{self.package}/py.typed"] = ""
        return rendered


def _write_synced(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as stream:
        stream.write(text)
        stream.flush()
        os.fsync(stream.fileno())


def write_scaffold(scaffold: PluginScaffold, output: Path) -> Path:
    """Write the distribution to ``output/<distribution>``; nothing is left behind on failure."""
    if not output.is_dir():
        msg = f"output directory {str(output)!r} does not exist"
        raise ConfigError(msg)
    target = output / scaffold.distribution
    if target.exists():
        msg = f"{str(target)!r} already exists; remove it or choose another --output"
        raise ConfigError(msg)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{scaffold.distribution}.", dir=output))
    except OSError as exc:
        msg = f"cannot write into the output directory {str(output)!r}: {exc.strerror or exc}"
        raise ConfigError(msg) from None
    try:
        for relative, text in scaffold.render().items():
            _write_synced(staging / relative, text)
        staging.chmod(0o755)  # mkdtemp makes it 0700; a source tree is readable by all
        os.rename(staging, target)  # fails when the target appeared meanwhile
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
