"""Host configs of the end-to-end tests: the example mock devices beside one fixture plugin."""

from __future__ import annotations

from pathlib import Path

DEVICES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mock-devices.toml"


def beside_mock(directory: Path, plugin: str, *, settings: str = "", tables: str = "") -> Path:
    """Write ``directory/node.toml``: the mock plugin over the example devices and ``plugin``,
    the ledger under ``directory/state``; ``settings`` are more lines of ``[plugins]``,
    ``tables`` more TOML after the mock's section. Returns the config's path."""
    path = directory / "node.toml"
    path.write_text(
        f"""
[resource]
state-dir = "{directory / "state"}"

[plugins]
allowed = ["mock", "{plugin}"]
{settings}
[plugins.config.mock]
config-file = "{DEVICES}"
{tables}"""
    )
    return path
