"""The console entry point ends the process as an ordinary exit does, only without the last
collection passes: its status, every byte written, atexit handlers and threads are kept."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import atexit, sys, threading
from accelkit.cli.app import run
atexit.register(lambda: print("atexit ran", file=sys.stderr, flush=True))
def late():
    threading.main_thread().join()  # returns once the command is done and the exit begins
    print("thread joined", file=sys.stderr, flush=True)
threading.Thread(target=late).start()  # not a daemon: the exit waits for it
sys.argv = ["accelkit", *sys.argv[1:]]
run()
"""


def _accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, check=False
    )


def test_output_status_atexit_and_threads_are_kept():
    done = _accelkit("plugins", "--json")
    assert done.returncode == 0
    names = {entry["name"] for entry in json.loads(done.stdout)}
    assert "mock" in names
    assert "atexit ran" in done.stderr
    assert "thread joined" in done.stderr


def test_an_error_still_exits_2_with_its_message():
    done = _accelkit("check", "--config", "/nonexistent/host.toml")
    assert done.returncode == 2
    assert done.stderr.startswith("error: ")
    assert "atexit ran" in done.stderr


def test_python_dash_m_accelkit_is_the_command():
    done = subprocess.run(
        [sys.executable, "-m", "accelkit", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "mock" in {entry["name"] for entry in json.loads(done.stdout)}


#: a command ``probe`` whose module's import notes whether the collector runs; the command
#: prints that, whether it runs while the command does, and whether the start-up was frozen
PROBE = """
import gc, importlib, sys, types
import click
from accelkit.cli.app import cli, run
probe = types.ModuleType("probe_command")
@click.command()
def command():
    print(probe.imported_with_collector, gc.isenabled(), gc.get_freeze_count() > 0)
probe.command = command
sys.modules["probe_command"] = probe
real_import = importlib.import_module
def spy(name, package=None):
    if name == "probe_command":
        probe.imported_with_collector = gc.isenabled()
    return real_import(name, package)
importlib.import_module = spy
cli.lazy_commands["probe"] = "probe_command:command"
sys.argv = ["accelkit", "probe"]
if OFF:
    gc.disable()
run()
"""


def _probe(*, off: bool) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.replace("OFF", str(off))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_collector_is_paused_only_while_the_command_is_imported():
    assert _probe(off=False) == ["False", "True", "True"]


def test_a_collector_turned_off_before_the_start_stays_off():
    assert _probe(off=True)[:2] == ["False", "False"]
