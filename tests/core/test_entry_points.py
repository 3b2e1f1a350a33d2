"""The installed entry points are found as importlib.metadata finds them, without importing it
where sys.path holds plain directories; anything else is left to it."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import registry
from accelkit.discovery import PluginLoader
from accelkit.registry import entry_points
from accelkit.selection import PluginSelection


def _seen(found: object) -> list[tuple[str, str, str, str, str]]:
    return [
        (ep.name, ep.value, ep.group, ep.dist.name, ep.dist.version)  # type: ignore[attr-defined]
        for ep in found  # type: ignore[attr-defined]
    ]


def _same_as_importlib(group: str) -> None:
    ours = _seen(entry_points(group))
    assert ours == _seen(importlib.metadata.entry_points(group=group))


def _outcome(find: Callable[[str], object]) -> object:
    """What ``find("accelkit")`` gives, or the type of what it raises."""
    try:
        return _seen(find("accelkit"))
    except Exception as exc:  # importlib.metadata refuses a malformed file its own way
        return type(exc)


def _dist(
    root: Path,
    directory: str,
    *,
    name: str,
    version: str = "1.0",
    entry_points: str = "",
    metadata: str | None = None,
) -> Path:
    path = root / directory
    path.mkdir(parents=True)
    text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA description.\n"
    (path / "METADATA").write_text(text if metadata is None else metadata, encoding="utf-8")
    if entry_points:
        (path / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    return path


@pytest.mark.parametrize("group", ["accelkit", "console_scripts", "pytest11", "no.such.group"])
def test_the_installed_entry_points_are_importlibs(group):
    _same_as_importlib(group)


def test_the_first_distribution_of_a_name_on_the_path_is_the_one_read(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "acme_probe-2.0.dist-info", name="acme-probe", version="2.0",
          entry_points="[accelkit]\nprobe = acme_probe.new\n")  # fmt: skip
    _dist(second, "Acme.Probe-1.0.dist-info", name="Acme.Probe",
          entry_points="[accelkit]\nprobe = acme_probe.old\nother = acme_other\n")  # fmt: skip
    _dist(second, "zz_other-1.0.dist-info", name="zz-other",
          entry_points="# a comment\n[console_scripts]\nzz = zz:main\n\n[accelkit]\n"
          " spaced  =  zz_other : plugin [extra] \n")  # fmt: skip
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second)])
    assert _seen(entry_points("accelkit")) == [
        ("probe", "acme_probe.new", "accelkit", "acme-probe", "2.0"),
        ("spaced", "zz_other : plugin [extra]", "accelkit", "zz-other", "1.0"),
    ]
    _same_as_importlib("accelkit")
    _same_as_importlib("console_scripts")


@pytest.mark.parametrize(
    ("directory", "metadata", "entry_points_text"),
    [
        # a line that is no pair: importlib.metadata refuses it
        ("bad-1.0.dist-info", None, "[accelkit]\nno pair here\n"),
        # a Name folded onto the next line
        ("folded-1.0.dist-info", "Name: folded\n  on\nVersion: 1\n", "[accelkit]\nf = f\n"),
        # no Version header
        ("unversioned-1.0.dist-info", "Name: unversioned\n", "[accelkit]\nu = u\n"),
        # a directory named in capitals is named by its metadata
        ("LOUD-1.0.DIST-INFO", None, "[accelkit]\nloud = loud\n"),
        # not a header before the name
        ("odd-1.0.dist-info", "Metadata Version 2.1\nName: odd\nVersion: 1\n", "[accelkit]\no=o\n"),
    ],
)
def test_what_is_written_unusually_is_left_to_importlib(
    tmp_path, monkeypatch, directory, metadata, entry_points_text
):
    _dist(tmp_path, directory, name="x", metadata=metadata, entry_points=entry_points_text)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(registry._Unread):
        registry._scan("accelkit")
    assert _outcome(entry_points) == _outcome(
        lambda group: importlib.metadata.entry_points(group=group)
    )


def test_a_zip_archive_and_another_finder_are_left_to_importlib(tmp_path, monkeypatch):
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
        zipped.writestr("zipped-1.0.dist-info/entry_points.txt", "[accelkit]\nzipped = zipped\n")
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert _seen(entry_points("accelkit")) == [("zipped", "zipped", "accelkit", "zipped", "1.0")]

    class Finder:
        @staticmethod
        def find_distributions(context: object = None) -> list[object]:
            return []

    _dist(tmp_path / "plain", "plain-1.0.dist-info", name="plain",
          entry_points="[accelkit]\nplain = plain\n")  # fmt: skip
    monkeypatch.setattr(sys, "path", [str(tmp_path / "plain")])
    monkeypatch.setattr(sys, "meta_path", [Finder, *sys.meta_path])
    with pytest.raises(registry._Unread):
        registry._scan("accelkit")
    _same_as_importlib("accelkit")


def test_an_entry_point_loads_its_module_or_the_object_it_names(tmp_path, monkeypatch):
    (tmp_path / "probe_ep.py").write_text("class Outer:\n    class Inner:\n        pass\n")
    _dist(tmp_path, "probe_ep-1.0.dist-info", name="probe-ep",
          entry_points="[accelkit]\nmodule = probe_ep\nnested = probe_ep:Outer.Inner [x]\n"
          "bad = not a value\n")  # fmt: skip
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "probe_ep", raising=False)
    found = {ep.name: ep for ep in entry_points("accelkit")}
    module = found["module"].load()
    assert module.__name__ == "probe_ep"
    assert found["nested"].load() is module.Outer.Inner
    with pytest.raises(ValueError, match="'bad': 'not a value' names no module or object"):
        found["bad"].load()
    # the loader records a value that names nothing as a failed plugin, the others load
    loader = PluginLoader(PluginSelection())
    loader.load_entry_points()
    assert loader.records["bad"].status == "failed"
    assert "names no module or object" in (loader.records["bad"].error or "")
    assert loader.records["module"].distribution == "probe-ep"


names = st.text(alphabet="abcXYZ019-_.", min_size=1, max_size=12).filter(
    lambda n: n[0].isalnum() and n[-1].isalnum()
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), names, st.sampled_from(["1.0", "2"])), max_size=6))
def test_any_set_of_directories_reads_as_importlib_reads_it(tmp_path_factory, dists):
    root = tmp_path_factory.mktemp("path")
    made: set[Path] = set()
    for index, (where, name, version) in enumerate(dists):
        path = root / str(where) / f"{name.replace('-', '_')}-{version}.dist-info"
        if path in made:
            continue
        made.add(path)
        _dist(root / str(where), path.name, name=name, version=version,
              entry_points=f"[accelkit]\np{index} = m{index}\n")  # fmt: skip
    saved = sys.path[:]
    sys.path[:] = [str(root / str(i)) for i in range(3)]
    try:
        _same_as_importlib("accelkit")
    finally:
        sys.path[:] = saved


def test_the_run_command_does_not_import_importlib_metadata(tmp_path):
    script = (
        "import sys\nfrom accelkit.discovery import PluginLoader\n"
        "PluginLoader.from_entry_points()\n"
        "print('importlib.metadata' in sys.modules, 'email' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"]
