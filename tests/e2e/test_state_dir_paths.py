"""Which paths to a state directory are trusted (DESIGN §18, §17), as a property.

Random chains of directories and symbolic links, each root's or another user's, with random
modes: the state directory is opened only when nobody but root (and we, root here) could swap
a part of the way, and then the descriptor is the directory the path leads to.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.errors import ConfigError
from accelkit.workload.state_dir import open_state_dir

OTHER_UID = 54321

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")

MODES = [0o700, 0o755, 0o775, 0o777, 0o1777, 0o1755]
#: (is a link, owner is another user, mode of the directory it is or leads to)
parts = st.lists(
    st.tuples(st.booleans(), st.booleans(), st.sampled_from(MODES)), min_size=1, max_size=4
)


def build(root: Path, chain: list[tuple[bool, bool, int]]) -> None:
    """Each part inside the one before (a link's target made beside, in ``root``)."""
    here = root
    for index, (is_link, theirs, mode) in enumerate(chain):
        uid = OTHER_UID if theirs and not is_link else 0
        made = root / f"target{index}" if is_link else here / f"part{index}"
        made.mkdir()
        made.chmod(mode)  # after mkdir: its mode is not masked
        os.chown(made, uid, uid)
        if is_link:
            (here / f"part{index}").symlink_to(made)
            if theirs:
                os.lchown(here / f"part{index}", OTHER_UID, OTHER_UID)
        here = made


def path_of(root: Path, chain: list[tuple[bool, bool, int]]) -> Path:
    """The path that leads through the chain: each part named in the directory before."""
    path = root
    for index in range(len(chain)):
        path /= f"part{index}"
    return path


def swappable(chain: list[tuple[bool, bool, int]]) -> bool:
    """Whether another user could change where the path leads, or owns the state directory."""
    for index, (is_link, theirs, mode) in enumerate(chain):
        if is_link and theirs:
            return True  # its owner can point it elsewhere
        uid = OTHER_UID if theirs and not is_link else 0
        if index == len(chain) - 1:
            return uid != 0 or bool(mode & (stat.S_IWGRP | stat.S_IWOTH))
        if uid == 0 and mode & stat.S_ISVTX:
            continue  # root's sticky directory: nobody renames what is not theirs
        if mode & stat.S_IWOTH or (uid != 0 and mode & (stat.S_IWUSR | stat.S_IWGRP)):
            return True
    return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts)
def test_a_state_dir_is_opened_only_where_nobody_else_can_swap_it(chain):
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="aksd-"))
    try:
        build(root, chain)
        path, unsafe = path_of(root, chain), swappable(chain)
        try:
            fd = open_state_dir(path, create=False)
        except ConfigError:
            assert unsafe, f"refused a path nobody else can swap: {chain}"
            return
        try:
            opened, resolved = os.fstat(fd), os.stat(path)
            assert (opened.st_dev, opened.st_ino) == (resolved.st_dev, resolved.st_ino)
        finally:
            os.close(fd)
        assert not unsafe, f"opened a path another user could swap: {chain}"
    finally:
        shutil.rmtree(root)
