"""Sessions for testing, checking, documenting, benchmarking and demonstrating accelkit."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
# the tests run on every supported Python this machine has; one it lacks is skipped, not an
# error (CI's Debian has 3.11 only, and uv must not try to download the others)
nox.options.error_on_missing_interpreters = False
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")

#: the Python versions accelkit supports (requires-python >= 3.11)
PYTHONS = ["3.11", "3.12", "3.13"]

PACKAGES = ["core", "plugins/cpu", "plugins/mem", "plugins/cuda", "plugins/mock"]
#: the tutorial's example plugin, installed and tested like a vendor's
EXAMPLE = "docs/examples/acme-npu"
# pip and hatchling: the end-to-end tests really install fixture plugin distributions
TEST_DEPS = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "hypothesis>=6.100",
    "jsonschema>=4",
    "hatchling>=1.24",
    # tests/docs/test_doc_commands.py installs editable without an index: hatchling needs it then
    "editables",
    "pip",
    # the benchmark harness's own tests load a stand-in reference that imports these
    "networkx",
    "more-itertools",
    # tests/core/test_layers.py runs the layer contracts
    "import-linter>=2.1",
    # tests/docs/test_cli_rendering.py renders docs/cli.md as the docs site does
    "markdown>=3.5",
    # tests/bridge/k8s/test_generated_stubs.py regenerates the kubelet API stubs
    "grpcio-tools==1.85.1",
]
SOURCES = [
    "core/src",
    "plugins/cpu/src",
    "plugins/mem/src",
    "plugins/cuda/src",
    "plugins/mock/src",
    "docs/examples/acme-npu/src",
]


def install_workspace(session: nox.Session) -> None:
    args: list[str] = []
    for package in PACKAGES:
        args += ["-e", package]
    # uv installs the dependencies without their bytecode unless asked (pip compiles them)
    session.install(*args, env={"UV_COMPILE_BYTECODE": "1"})
    # editable installs leave compiling to the first import: where PYTHONDONTWRITEBYTECODE is
    # set, every start would compile accelkit's modules again (about a third of a run's start)
    session.run("python", "-m", "compileall", "-q", *SOURCES[:-1])


def _pyenv_versions() -> None:
    """Where pyenv holds the supported Pythons without making them global (its shims then
    refuse ``python3.12``), name them in ``PYENV_VERSION`` so that nox finds them too."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if not root.is_dir():
        return
    # pyenv's shim of the Python that runs nox has already set its own version here
    found = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    for minor in PYTHONS:
        if any(v == minor or v.startswith(f"{minor}.") for v in found):
            continue
        versions = sorted(
            (p.name for p in root.glob(f"{minor}.*") if p.name[len(minor) + 1 :].isdigit()),
            key=lambda name: int(name.rsplit(".", 1)[1]),
        )
        if versions:
            found.append(versions[-1])
    if found:
        os.environ["PYENV_VERSION"] = ":".join(found)


_pyenv_versions()


#: the tests that run in pytest's own process (the slow ones left out): what the coverage gate
#: measures and the newer Pythons run; the end-to-end tests run commands in processes of their own
IN_PROCESS_TESTS = ["tests/core", "tests/cpu", "tests/mem", "tests/mock", "tests/cuda"]


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite of every distribution, the example plugin's and the end-to-end tests.

    Arguments go to pytest: `nox -s tests -- -m "not slow"` is the fast lane. Without
    arguments the first Python runs the whole suite, and the newer ones the fast in-process
    tests (those the coverage gate measures), which keeps CI's matrix within its time: the
    real components (dockerd, Slurm, Kubernetes) are driven by the same code on every Python.
    """
    install_workspace(session)
    session.install("-e", EXAMPLE, *TEST_DEPS)
    lane = [] if session.python == PYTHONS[0] else ["-m", "not slow", *IN_PROCESS_TESTS]
    # testpaths in pyproject.toml name the folders
    session.run("pytest", *(session.posargs or lane))


@nox.session(python="3.11")
def coverage(session: nox.Session) -> None:
    """Measure the branch coverage of the fast in-process tests; fail below its floor."""
    install_workspace(session)
    session.install("-e", EXAMPLE, *TEST_DEPS, "coverage>=7.6")
    # [tool.coverage] in pyproject.toml: the packages measured and fail_under, today's level
    session.run("coverage", "run", "-m", "pytest", "-m", "not slow", *IN_PROCESS_TESTS)
    session.run("coverage", "report")


@nox.session(python=PYTHONS, default=False)
def wheels(session: nox.Session) -> None:
    """Run the tests against built wheels (as users install them) on every supported Python."""
    session.install("pip", "hatchling>=1.24")
    wheel_dir = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    session.run(
        "python", "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
        "--wheel-dir", str(wheel_dir), *(f"./{path}" for path in (*PACKAGES, EXAMPLE)),
    )  # fmt: skip
    session.install(*(str(w) for w in sorted(wheel_dir.glob("*.whl"))), *TEST_DEPS)
    session.run("pytest", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff, and the layers with import-linter."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # the contracts live in the root pyproject.toml; import-linter reads the installed packages
    install_workspace(session)
    session.install("-e", EXAMPLE, "import-linter>=2.1")
    session.run("lint-imports", "--no-logo")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """Type-check every distribution's sources with mypy --strict."""
    install_workspace(session)
    session.install("-e", EXAMPLE)
    # accelkit.testing uses pytest; the Kubernetes bridge uses grpc
    session.install("mypy>=1.10", "types-psutil", "types-grpcio", "pytest>=8")
    session.run("mypy", "--strict", *SOURCES)


@nox.session(python="3.11", default=False)
def docs(session: nox.Session) -> None:
    """Build the documentation site with mkdocs --strict."""
    install_workspace(session)
    session.install("mkdocs-material>=9", "mkdocstrings[python]>=0.26")  # api.md from docstrings
    quiet = {"NO_MKDOCS_2_WARNING": "1"}
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", env=quiet)


@nox.session(python="3.11", default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmarks and print their figures (medians).

    `nox -s bench -- --reference DIR` also measures Backend.AI's alloc maps from DIR in the
    same run (they need networkx and more-itertools).
    """
    install_workspace(session)
    session.install("networkx", "more-itertools")
    session.run("python", "tests/benchmarks/run.py", *session.posargs)


@nox.session(python="3.11", default=False)
def demo(session: nox.Session) -> None:
    """Run accelkit on the embedded demo node (docs/examples/demo.toml)."""
    install_workspace(session)
    config = "docs/examples/demo.toml"
    # the demo's ledger stays in .nox/ (the state directory is named by an absolute path)
    env = {"ACCELKIT_STATE_DIR": str(Path(session.create_tmp()).resolve())}
    session.run("accelkit", "plugins", env=env)
    session.run("accelkit", "check", "--config", config, env=env)
    session.run("accelkit", "devices", "--config", config, env=env)
    session.run("accelkit", "plan", "--config", config, env=env)
    session.run(
        "accelkit",
        "run",
        "--config",
        config,
        "--agent",
        "agent-2",
        "--slots",
        "cpu=2,mem=1G,cuda.device=1",
        "--",
        "sh",
        "-c",
        'echo "workload sees cuda=$MOCK_CUDA_DEVICES cpu=$MOCK_CPU_DEVICES"',
        env=env,
    )
    session.run("accelkit", "cdi", "--config", config, "--agent", "agent-1", env=env)
    session.run("accelkit", "metrics", "--config", config, env=env)


@nox.session(default=False)  # the interpreter nox runs on: a GPU machine may lack 3.11
def gpu(session: nox.Session) -> None:
    """Run the cuda checks against real NVML and a real GPU (needs an NVIDIA GPU and driver)."""
    install_workspace(session)
    session.install(*TEST_DEPS)
    # a machine without a usable GPU fails these checks instead of skipping them all
    env = {"ACCELKIT_REQUIRE_GPU": "1"}
    session.run("pytest", "-m", "gpu", "tests/cuda", *session.posargs, env=env)
