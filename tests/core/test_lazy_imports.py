"""Start-up stays cheap: what a command does not use is not imported (R1 of WORKLOADS.md).

Each check runs a fresh interpreter, imports what a command imports and lists the modules that
must not be among them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import accelkit.runtime.render as render

#: never needed by a process run or a read-only command: the container machinery
_CONTAINER = (
    "aiodocker",
    "aiohttp",
    "accelkit.runtime.docker_body",
    "accelkit.runtime.docker_ops",
    "accelkit.runtime.render.cdi",
    "accelkit.runtime.render.docker",
    "accelkit.runtime.render.resource_txt",
)


def _imported(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "code",
    [
        "import accelkit.node",  # every command that opens a node: run, status, release
        "import accelkit.cli.run_cmd, accelkit.runtime.process",
    ],
)
def test_a_node_and_the_process_runtime_import_nothing_of_the_containers(code):
    imported = _imported(code)
    assert not imported & set(_CONTAINER)


def test_the_docker_runtime_is_still_made_by_default_without_its_machinery():
    code = "from accelkit.runtime.registry import default_runtimes; default_runtimes()"
    assert not _imported(code) & set(_CONTAINER)


def test_every_renderer_name_is_there_on_first_use():
    for name in render.__all__:
        assert getattr(render, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = render.nope


def test_a_built_in_bridge_command_is_found_without_importing_any_distribution():
    code = (
        "import click; from accelkit.cli.app import cli\n"
        "assert cli.get_command(click.Context(cli), 'slurm') is not None"
    )
    imported = _imported(code)
    assert "accelkit.cli.slurm_cmd" in imported
    assert not imported & {"accelkit.discovery", "importlib.metadata", "accelkit_mock"}
