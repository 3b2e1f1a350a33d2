"""Fuzzing host configs: generated and mutated files through the loader and ``accelkit check``.

Every outcome must be a loaded config or a :class:`ConfigError` with a message; through the
command, exit status 0 or 2 with ``error: …`` and never an internal error or a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.cli.app import main
from accelkit.cli.check_cmd import check_config
from accelkit.config import HostConfig, load_host_config, parse_host_config
from accelkit.errors import ConfigError, ConfigErrors

pytestmark = pytest.mark.slow  # fuzz: hypothesis generates and mutates many config files

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
SEEDS = [
    (EXAMPLES / "manual.toml").read_text(encoding="utf-8"),
    (EXAMPLES / "auto-split.toml").read_text(encoding="utf-8"),
    """
[resource]
allocation-mode = "manual"
reserved-cpu = 1
reserved-mem = "1G"
memory-align-size = "16M"
affinity-policy = "interleaved"
state-dir = "state"

[plugins]
allowed = ["mock"]
blocked = ["cuda"]
strict = false

[[plugins.config.mock.kinds]]
key = "cpu"
devices = [{ id = "0" }, { id = "1" }, { id = "2" }, { id = "3" }]
[[plugins.config.mock.kinds]]
key = "mem"
devices = [{ id = "root", memory = "8G" }]
[[plugins.config.mock.kinds]]
key = "cuda"
devices = [{ id = "cuda0", numa-node = 0 }, { id = "cuda1", numa-node = 1 }]

[[agents]]
agent = { id = "a" }
resource = { cpu = ["1", "2"], mem = "2G", devices = { cuda = ["cuda0"] } }

[[agents]]
agent = { id = "b" }
resource = { cpu = ["3"], mem = "4G", devices = { cuda = ["cuda1"] } }
""",
]


# -- a tiny TOML writer: everything as inline values is valid TOML ------------------------------


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def toml_document(data: dict[str, object]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items())


# -- generated configs --------------------------------------------------------------------------

junk_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
junk = st.recursive(
    junk_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=5,
)
sizes = st.one_of(
    st.sampled_from(["0", "1G", "16M", "512m", "1.5k", "-1G", "1.3", "2TiB", "9p", "G", " 4 g "]),
    st.integers(-(2**65), 2**65),
    junk,
)
core_ids = st.lists(st.sampled_from(["0", "1", "2", "3", "7", "99", "", "x"]), max_size=5)
device_ids = st.lists(st.sampled_from(["cuda0", "cuda1", "cuda9", "root", ""]), max_size=4)


def maybe(strategy: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(strategy, junk)


@st.composite
def resource_tables(draw: st.DrawFn) -> dict[str, object]:
    options = {
        "allocation-mode": maybe(st.sampled_from(["shared", "auto-split", "manual", "split"])),
        "reserved-cpu": maybe(st.one_of(st.integers(-2, 10), core_ids)),
        "reserved-mem": sizes,
        "memory-align-size": sizes,
        "affinity-policy": maybe(st.sampled_from(["prefer-single-node", "interleaved"])),
        "state-dir": maybe(st.sampled_from(["state", "/tmp/x", "~/s", ""])),
        "colour": junk,
    }
    keys = draw(st.lists(st.sampled_from(sorted(options)), unique=True, max_size=len(options)))
    return {k: draw(options[k]) for k in keys}


@st.composite
def agent_entries(draw: st.DrawFn) -> object:
    if draw(st.integers(0, 9)) == 0:
        return draw(junk)
    entry: dict[str, object] = {
        "agent": draw(
            maybe(st.fixed_dictionaries({"id": maybe(st.sampled_from(["a", "b", "c", ""]))}))
        )
    }
    if draw(st.booleans()):
        entry["resource"] = draw(
            maybe(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "cpu": maybe(st.one_of(core_ids, st.integers(0, 8))),
                        "mem": sizes,
                        "devices": maybe(
                            st.dictionaries(
                                st.sampled_from(["cuda", "cpu", "mem", "rocm", "cuda.mem"]),
                                maybe(device_ids),
                                max_size=3,
                            )
                        ),
                        "gpu": junk,
                    },
                )
            )
        )
    return entry


@st.composite
def host_configs(draw: st.DrawFn) -> dict[str, object]:
    data: dict[str, object] = {}
    if draw(st.booleans()):
        data["resource"] = draw(maybe(resource_tables()))
    if draw(st.booleans()):
        data["plugins"] = draw(
            maybe(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "allowed": maybe(st.lists(st.sampled_from(["mock", "cpu"]), max_size=2)),
                        "blocked": maybe(st.lists(st.sampled_from(["cuda"]), max_size=1)),
                        "strict": maybe(st.booleans()),
                        "config": maybe(
                            st.dictionaries(st.sampled_from(["mock", "cpu"]), junk, max_size=2)
                        ),
                    },
                )
            )
        )
    if draw(st.booleans()):
        data["agents"] = draw(maybe(st.lists(agent_entries(), max_size=4)))
    if draw(st.integers(0, 5)) == 0:
        data[draw(st.text(max_size=6))] = draw(junk)
    return data


def assert_config_error(exc: ConfigError, file: str) -> None:
    errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
    assert errors
    assert str(exc)
    for error in errors:
        assert error.message
        assert error.file == file


@settings(max_examples=450, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host_configs())
def test_generated_configs_load_or_raise_a_config_error(data):
    try:
        config = parse_host_config(data)
    except ConfigError as exc:
        assert_config_error(exc, "<config>")
    else:
        assert isinstance(config, HostConfig)
        assert config.agents


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(host_configs())
def test_generated_files_through_the_loader(tmp_path, data):
    path = tmp_path / "host.toml"
    path.write_text(toml_document(data), encoding="utf-8")
    try:
        load_host_config(path)
    except ConfigError as exc:
        assert_config_error(exc, str(path))


# -- mutated files ------------------------------------------------------------------------------

FRAGMENTS = ['"', "[", "]", "=", "\n", "[[agents]]", "-", "0", "{", "}", ",", "x", "\\", "#", "é"]


@st.composite
def mutated_texts(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.splitlines(keepends=True)
        op = draw(
            st.sampled_from(["delete", "insert", "duplicate", "swap", "drop-line", "edit-value"])
        )
        pos = draw(st.integers(0, max(0, len(text) - 1)))
        if op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 8)) :]
        elif op == "insert":
            text = text[:pos] + draw(st.sampled_from(FRAGMENTS)) + text[pos:]
        elif lines and op == "duplicate":
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "".join(lines)
        elif len(lines) > 1 and op == "swap":
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "".join(lines)
        elif lines and op == "drop-line":
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "".join(lines)
        elif lines:
            i = draw(st.integers(0, len(lines) - 1))
            if " = " in lines[i]:
                key = lines[i].split(" = ", 1)[0]
                lines[i] = f"{key} = {toml_value(draw(junk))}\n"
                text = "".join(lines)
    return text


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutated_texts())
def test_mutated_files_through_the_loader(tmp_path, text):
    (tmp_path / "mock-gpu-node.toml").write_text(
        (EXAMPLES / "mock-gpu-node.toml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    path = tmp_path / "host.toml"
    path.write_text(text, encoding="utf-8")
    try:
        load_host_config(path)
    except ConfigError as exc:
        assert_config_error(exc, str(path))


# -- through `accelkit check` -------------------------------------------------------------------


OUTCOMES: dict[int, int] = {}


def run_check(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["check", "--config", str(path)])
    return status, out.getvalue(), err.getvalue()


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.one_of(mutated_texts(), host_configs().map(toml_document)))
def test_accelkit_check_reports_or_accepts_every_config(tmp_path, monkeypatch, text):
    monkeypatch.setenv("ACCELKIT_DISABLE_PLUGINS", "cpu,mem,cuda")  # mock devices only
    (tmp_path / "mock-gpu-node.toml").write_text(
        (EXAMPLES / "mock-gpu-node.toml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    path = tmp_path / "host.toml"
    path.write_text(text, encoding="utf-8")
    status, out, err = run_check(path)
    assert status in (0, 2), (status, out, err)
    OUTCOMES[status] = OUTCOMES.get(status, 0) + 1
    if status == 0:
        assert out.startswith(f"{path}: ok: mode ")
        assert out.count("\n") == 1
    else:
        # warnings (a blocked name matching no plugin) may come first; then the errors
        lines = err.splitlines()
        first_error = next(i for i, line in enumerate(lines) if line.startswith("error: "))
        assert all(line.startswith("warning: ") for line in lines[:first_error]), err
        assert "internal error" not in err
        assert "Traceback" not in err


def test_the_check_fuzz_saw_both_outcomes():
    if OUTCOMES:  # only when the fuzz test ran in this session
        assert OUTCOMES.get(0, 0) > 0, OUTCOMES
        assert OUTCOMES.get(2, 0) > 0, OUTCOMES


def test_check_of_a_valid_seed_is_one_line():
    config = load_host_config(EXAMPLES / "manual.toml")
    summary, warnings = asyncio.run(check_config(config))
    assert summary.endswith("ok: mode manual, 2 agent(s), 3 plugin(s), 14 device(s)")
    assert len(warnings) == 2
