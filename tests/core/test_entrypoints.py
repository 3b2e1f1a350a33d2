"""The entry points of a group, read from the path's metadata directories, are the ones
``importlib.metadata`` gives, in its order; where it could find distributions some other way
(a zip on the path, a finder of its own), it answers itself."""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit import entrypoints
from accelkit.discovery import PluginLoader
from accelkit.entrypoints import entry_points
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection


def as_importlib(group: str) -> list[tuple[str, str, str]]:
    return [(e.name, e.value, e.group) for e in importlib.metadata.entry_points(group=group)]


def as_found(group: str) -> list[tuple[str, str, str]]:
    return [(e.name, e.value, group) for e in entry_points(group)]


def write_dist(root: Path, folder: str, entry_points_txt: str | None) -> Path:
    """A metadata directory ``folder`` under ``root`` (its METADATA names it)."""
    path = root / folder
    path.mkdir(parents=True)
    name, _, version = folder.rpartition(".")[0].partition("-")
    (path / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points_txt is not None:
        (path / "entry_points.txt").write_text(entry_points_txt)
    return path


def test_the_installed_plugins_are_found_as_importlib_finds_them():
    assert as_found("accelkit") == as_importlib("accelkit")
    assert {"cpu", "mem", "cuda", "mock"} <= {name for name, _, _ in as_found("accelkit")}
    assert as_found("console_scripts") == as_importlib("console_scripts")


def test_sections_comments_extras_and_the_first_distribution_of_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    first, second = tmp_path / "first", tmp_path / "second"
    write_dist(
        first,
        "Dial_Plugin-1.0.dist-info",
        "# a comment\n[console_scripts]\ndial = dial.cli:main\n\n"
        "[accelkit]\n  dial = dial.plugin:hooks.inner [extra]  \n"
        "; semi = kept as importlib keeps it\n",
    )
    write_dist(second, "dial.plugin-2.0.dist-info", "[accelkit]\nshadowed = dial\n")
    write_dist(second, "other-1.0.egg-info", "[accelkit]\nother = other_mod\n")
    (second / "plain-1.0.egg-info").write_text("Name: plain\n")  # an egg-info file
    write_dist(second, "quiet-1.0.dist-info", None)
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "absent"), str(second)])

    assert as_found("accelkit") == as_importlib("accelkit")
    assert [e.name for e in entry_points("accelkit")] == ["dial", "; semi", "other"]
    [dial, *_] = entry_points("accelkit")
    assert dial.value == "dial.plugin:hooks.inner [extra]"
    assert dial.dist is not None
    assert (dial.dist.metadata["Name"], dial.dist.version) == ("Dial_Plugin", "1.0")


def test_loading_imports_the_module_and_follows_the_attributes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "probe_ep_module.py").write_text("class Outer:\n    class Inner:\n        x = 1\n")
    write_dist(
        tmp_path,
        "probe-1.0.dist-info",
        "[accelkit]\nmodule = probe_ep_module\nnested = probe_ep_module:Outer.Inner\nbad = -\n",
    )
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "probe_ep_module", raising=False)
    module, nested, bad = entry_points("accelkit")
    assert module.load() is sys.modules["probe_ep_module"]
    assert nested.load() is sys.modules["probe_ep_module"].Outer.Inner
    with pytest.raises(ValueError, match="'-' names no module"):
        bad.load()


def test_a_zip_on_the_path_is_read_by_importlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    archive = tmp_path / "dists.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
        zipped.writestr("zipped-1.0.dist-info/entry_points.txt", "[accelkit]\nzipped = z\n")
    write_dist(tmp_path / "dir", "plain-1.0.dist-info", "[accelkit]\nplain = p\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "dir"), str(archive)])
    assert as_found("accelkit") == as_importlib("accelkit")
    assert [name for name, _, _ in as_found("accelkit")] == ["plain", "zipped"]


def test_a_finder_of_its_own_is_asked_through_importlib(monkeypatch: pytest.MonkeyPatch):
    class Finder:
        @staticmethod
        def find_distributions(context: object = None) -> list[importlib.metadata.Distribution]:
            return []

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert entrypoints._scan_entry_points("accelkit") is None
    assert as_found("accelkit") == as_importlib("accelkit")


def test_the_loader_finds_the_plugins_and_names_their_distributions():
    loader = PluginLoader(PluginSelection(allowed=["mock"]))
    loader.load_entry_points()
    assert loader.records["mock"].status is PluginStatus.LOADED
    assert loader.records["mock"].distribution == "accelkit-mock"
    assert loader.records["cpu"].status is PluginStatus.BLOCKED


NAMES = st.sampled_from(["alpha", "Alpha", "al_pha", "al.pha", "al-pha", "beta", "Beta_2"])
DISTS = st.lists(
    st.tuples(
        st.integers(0, 2),  # which path entry
        NAMES,
        st.sampled_from(["1.0", "2.0"]),
        st.sampled_from([".dist-info", ".egg-info"]),
        st.lists(st.sampled_from(["one", "two", "three"]), max_size=3),
    ),
    max_size=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(dists=DISTS)
def test_any_set_of_distributions_gives_importlib_answer(
    dists: list[tuple[int, str, str, str, list[str]]],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
):
    root = tmp_path_factory.mktemp("paths")
    roots = [root / str(i) for i in range(3)]
    for index, (where, name, version, suffix, names) in enumerate(dists):
        folder = f"{name}-{version}{suffix}"
        if (roots[where] / folder).exists():
            continue
        text = "[accelkit]\n" + "".join(f"{n} = mod_{index}\n" for n in names)
        write_dist(roots[where], folder, text)
    with monkeypatch.context() as patch:
        patch.setattr(sys, "path", [str(r) for r in roots])
        assert as_found("accelkit") == as_importlib("accelkit")
