"""Fixtures of the Kubernetes bridge tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def k8s_root() -> Iterator[Path]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="ak8s-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)
