"""The launcher's plan: encoded by the parent, decoded by the launcher, exactly; bad plans refused.

The launcher is also run for real: it must import nothing beyond ``os`` (every workload's start
waits for it) and execute what the plan says with the plan's bytes.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.runtime import launcher
from accelkit.runtime.launcher import PlanError, decode_plan, encode_plan

from .launcher_pipes import finish_launcher, start_launcher

#: text that can be an argument, an environment value or a path: anything but NUL
#: (lone surrogates cannot be given by the system: the real launcher test carries escaped bytes)
_TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20)
_KEY = st.text(
    st.characters(blacklist_characters="\0=", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=10,
)


@given(
    argv=st.lists(_TEXT, min_size=1, max_size=5).filter(lambda argv: argv[0]),
    env=st.dictionaries(_KEY, _TEXT, max_size=5),
    cpus=st.none() | st.lists(st.integers(0, 4096), max_size=8),
    procs=st.lists(_TEXT, max_size=5),
    terminal=st.just("")
    | st.builds(
        lambda fds, path: f"{fds}:/{path}", st.sampled_from(["0", "01", "012", "02"]), _TEXT
    ),
    contain=st.booleans(),
)
def test_a_plan_decodes_to_exactly_what_was_encoded(argv, env, cpus, procs, terminal, contain):
    plan = decode_plan(encode_plan(argv, env, cpus, procs, terminal=terminal, contain=contain))
    assert (plan.terminal, plan.contain) == (os.fsencode(terminal), contain)
    program, command, environment, cgroup_procs, affinity = plan
    assert program == os.fsencode(argv[0])
    assert command == [os.fsencode(a) for a in argv]
    assert environment == {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    assert cgroup_procs == [os.fsencode(p) for p in procs]
    assert affinity == (None if cpus is None or not cpus else cpus)


def test_an_empty_affinity_list_and_none_both_mean_no_affinity():
    assert decode_plan(encode_plan(["true"], {}, []))[4] is None
    assert decode_plan(encode_plan(["true"], {}, None))[4] is None


def test_the_program_found_by_the_parent_is_carried_beside_the_command():
    plan = decode_plan(encode_plan(["true"], {}, program="/usr/bin/true"))
    assert plan[:2] == (b"/usr/bin/true", [b"true"])


@pytest.mark.parametrize(
    ("argv", "env", "procs"),
    [
        (["a\0b"], {}, []),
        (["true"], {"K": "v\0"}, []),
        (["true"], {}, ["/sys/fs/cgroup\0x"]),
    ],
)
def test_a_nul_anywhere_is_refused_when_encoding(argv, env, procs):
    with pytest.raises(ValueError, match="NUL"):
        encode_plan(argv, env, None, procs)


def test_text_that_has_no_bytes_is_refused_when_encoding():
    with pytest.raises(ValueError, match="surrogates"):
        encode_plan(["echo", "\ud800"], {})


def test_an_empty_command_is_refused_when_encoding():
    with pytest.raises(ValueError, match="empty"):
        encode_plan([], {})


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"true\x001\0true", "truncated"),
        (b"true\0x\0true\x000\x000\0\0\0\0", "expected a count"),
        (b"true\x003\0true\0", "truncated"),
        (b"true\x001\0true\x001\0NOVALUE\x000\0\0\0\0", "bad environment entry"),
        (b"true\x001\0true\x001\0=v\x000\0\0\0\0", "bad environment entry"),
        (b"true\x001\0true\x000\x000\0", "malformed"),
        (b"true\x001\0true\x000\x000\0\0\0", "malformed"),
        (b"true\x001\0true\x000\x000\0\0\0\0extra\0", "malformed"),
        (b"true\x000\x000\x000\0\0\0\0", "malformed"),
        (b"\x001\0true\x000\x000\0\0\0\0", "malformed"),
        (b"true\x001\0true\x000\x000\x000,x\0\0\0", "bad CPU affinity"),
        (b"true\x001\0true\x000\x000\0\0/dev/pts/1\0\0", "bad terminal"),
        (b"true\x001\0true\x000\x000\0\x003:/dev/pts/1\0\0", "bad terminal"),
        (b"true\x001\0true\x000\x000\0\x0012:\0\0", "bad terminal"),
        (b"true\x001\0true\x000\x000\0\0\0yes\0", "bad containment flag"),
    ],
)
def test_a_malformed_plan_is_refused_when_decoding(data, why):
    with pytest.raises(PlanError, match=why):
        decode_plan(data)


def _launch(plan: bytes) -> tuple[int, str, str]:
    """Run the launcher for real with ``plan``: its status, stdout and status-pipe message."""
    process, plan_w, status_r = start_launcher()
    os.write(plan_w, plan)
    return finish_launcher(process, plan_w, status_r)


def test_the_launcher_execs_the_plan_with_its_environment_bytes_and_affinity():
    value = "caf\xe9 \udcff"  # not UTF-8 once encoded: carried as the same bytes
    plan = encode_plan(
        [sys.executable, "-c", "import os; print(os.environb[b'X'], os.sched_getaffinity(0))"],
        {"X": value},
        [0],
    )
    status, out, message = _launch(plan)
    assert (status, message) == (0, "")
    assert out.strip() == f"{os.fsencode(value)!r} {{0}}"


def test_the_launcher_reports_a_command_that_is_not_found_with_127():
    status, _, message = _launch(encode_plan(["/nonexistent/cmd"], {}))
    assert status == launcher.EXIT_NOT_FOUND == 127
    assert message == "127 cannot run '/nonexistent/cmd': [Errno 2] No such file or directory"


def test_a_bare_name_found_nowhere_on_path_is_not_found(tmp_path: Path):
    status, _, message = _launch(encode_plan(["no-such-command"], {"PATH": str(tmp_path)}))
    assert status == 127
    assert message.startswith("127 cannot run 'no-such-command': [Errno 2]")


def test_the_launcher_reports_a_file_it_may_not_run_with_126(tmp_path: Path):
    data = tmp_path / "data.txt"
    data.write_text("not a program\n")
    status, _, message = _launch(encode_plan([str(data)], {}))
    assert status == launcher.EXIT_NOT_RUNNABLE == 126
    assert message == f"126 cannot run '{data}': [Errno 13] Permission denied"


def test_a_directory_cannot_be_run_either(tmp_path: Path):
    status, _, message = _launch(encode_plan([str(tmp_path)], {}))
    assert status == 126
    assert message.startswith(f"126 cannot run '{tmp_path}'")


def test_the_launcher_reports_a_plan_it_cannot_read_with_125():
    status, _, message = _launch(b"garbage")
    assert status == launcher.EXIT_FAILED == 125
    assert message == "125 plan: truncated plan"


def test_the_launcher_reports_a_cgroup_it_cannot_join_with_125(tmp_path: Path):
    missing = tmp_path / "missing" / "cgroup.procs"
    status, _, message = _launch(encode_plan(["true"], {}, None, [str(missing)]))
    assert status == launcher.EXIT_FAILED
    assert message.startswith("125 setup: ")
    assert "No such file or directory" in message


def test_the_launcher_reports_a_terminal_it_cannot_open_with_125(tmp_path: Path):
    plan = encode_plan(["true"], {}, terminal=f"0:{tmp_path / 'no-such-tty'}")
    status, _, message = _launch(plan)
    assert status == 125
    assert message.startswith("125 terminal: ")


def test_terminal_and_containment_decode_as_encoded():
    plan = decode_plan(encode_plan(["true"], {}, terminal="012:/dev/pts/7", contain=True))
    assert (plan.terminal, plan.contain) == (b"012:/dev/pts/7", True)
    plain = decode_plan(encode_plan(["true"], {}))
    assert (plain.terminal, plain.contain) == (b"", False)


def test_cgroup_mounts_are_read_from_mountinfo_with_the_flags_a_remount_keeps():
    text = (
        "31 23 0:28 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw\n"
        "32 31 0:29 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:9 - cgroup "
        "cgroup rw,pids\n"
        "41 31 0:38 / /sys/fs/with\\040space rw,relatime - cgroup2 cgroup2 rw\n"
        "50 23 0:40 / /proc rw - proc proc rw\n"
    )
    assert launcher.cgroup_mounts(text) == [
        ("/sys/fs/cgroup/pids", 2 | 4 | 8 | (1 << 21)),
        ("/sys/fs/with space", 1 << 21),
    ]


def test_an_empty_plan_makes_the_launcher_exit_without_running_anything():
    assert _launch(b"") == (launcher.EXIT_ABORTED, "", "")


#: what a bare ``python -S`` has not imported yet and the launcher needs: ``os`` and its parts
_OS = {"__future__", "os", "os.path", "posixpath", "genericpath", "stat", "_stat"}
_OS |= {"_collections_abc", "_signal"}


def test_the_launcher_imports_nothing_beyond_os():
    script = (
        "import sys; before = set(sys.modules); "
        f"sys.argv = ['launcher']; exec(compile(open({launcher.__file__!r}).read(), 'l', 'exec'), "
        "{'__name__': 'launcher'}); print(sorted(set(sys.modules) - before))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, check=True
    )
    imported = set(ast.literal_eval(done.stdout.strip()))
    assert imported <= _OS, "json, re, typing … would delay every workload's start"


def test_the_command_gets_the_default_action_of_the_signals_python_ignores():
    """The interpreter ignores SIGPIPE and SIGXFSZ; ignored signals stay ignored across an
    exec, so the command would have ignored them (``yes | head -1`` never ending)."""
    plan = encode_plan(["sh", "-c", "grep ^SigIgn: /proc/self/status"], {"PATH": os.defpath})
    status, out, message = _launch(plan)
    assert (status, message) == (0, "")
    ignored = int(out.split()[1], 16)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & 1 << (signum - 1), signum


def test_a_program_given_as_a_path_is_executed_without_a_search(tmp_path: Path):
    status, out, message = _launch(
        encode_plan(["shown-as-argv0", "-c", "echo $0"], {"PATH": ""}, program="/bin/sh")
    )
    assert (status, message) == (0, "")
    assert out.strip() == "shown-as-argv0"


def test_a_bare_program_is_searched_for_on_the_workloads_path(tmp_path: Path):
    script = tmp_path / "hello"
    script.write_text("#!/bin/sh\necho found\n")
    script.chmod(0o755)
    status, out, _ = _launch(encode_plan(["hello"], {"PATH": str(tmp_path)}))
    assert (status, out.strip()) == (0, "found")


def test_the_launcher_runs_from_its_bytecode_only_while_that_is_fresh(tmp_path: Path):
    """Its cached bytecode spares the launcher compiling itself; bytecode of an older source
    (or none, or another interpreter's) never runs: the source does."""
    import py_compile

    from accelkit.runtime.process_tree import launcher_code

    source = tmp_path / "launcher.py"
    source.write_text("print('one')\n")
    assert launcher_code(str(source)) == str(source)  # nothing cached
    cached = py_compile.compile(
        str(source), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
    )
    assert launcher_code(str(source)) == cached
    done = subprocess.run(
        [sys.executable, "-I", "-S", cached], capture_output=True, text=True, check=True
    )
    assert done.stdout == "one\n"
    source.write_text("print('two, longer')\n")  # another size (and maybe the same second)
    assert launcher_code(str(source)) == str(source)
    py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    assert launcher_code(str(source)) == str(source)  # hash-based: not judged here
