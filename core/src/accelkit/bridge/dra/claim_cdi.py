"""One CDI spec per prepared claim, in the container runtime's CDI directory.

The spec's kind is ``<driver>/claim`` and its one device is named after the claim's uid; its
edits are the merged config of the plugins' ``pre_create`` for the claim's devices, plus
``ACCELKIT_CLAIM=<namespace>/<name>`` (so a claim whose hooks set nothing still has a device the
CDI library accepts). The kubelet passes ``<driver>/claim=<uid>`` to the runtime for every
container that uses the claim. The file is written atomically and removed on unprepare.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import attrs

from accelkit.runtime.render.cdi import render_cdi_spec
from accelkit.types import WorkloadConfig

__all__ = ["DEFAULT_CDI_DIR", "ClaimSpecs"]

DEFAULT_CDI_DIR = Path("/var/run/cdi")
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class ClaimSpecs:
    """The claim specs of one driver in ``directory``."""

    def __init__(self, directory: Path, driver: str) -> None:
        self.directory = directory
        self.kind = f"{driver}/claim"
        self._prefix = _FILE_UNSAFE.sub("_", f"{driver}-claim_")

    def path(self, uid: str) -> Path:
        """The spec file of claim ``uid``."""
        return self.directory / f"{self._prefix}{_FILE_UNSAFE.sub('_', uid)}.json"

    def device_id(self, uid: str) -> str:
        """The fully qualified CDI device the kubelet hands the runtime."""
        return f"{self.kind}={uid}"

    def write(self, uid: str, label: str, config: WorkloadConfig) -> Path:
        """Write the claim's spec (temp file, rename); ``OSError`` when it cannot."""
        env = {**config.env_vars, "ACCELKIT_CLAIM": label}
        spec = render_cdi_spec(self.kind, [(uid, attrs.evolve(config, env_vars=env))])
        data = (json.dumps(spec, sort_keys=True) + "\n").encode()
        path = self.path(uid)
        temp = f"{self.directory}/.{path.name}.tmp"
        try:
            _write(temp, data)
        except FileNotFoundError:  # the directory is made on the first write (again if gone)
            self.directory.mkdir(parents=True, exist_ok=True)
            _write(temp, data)
        os.replace(temp, path)  # atomic; no fsync: the CDI directory is a tmpfs (/var/run)
        return path

    def exists(self, uid: str) -> bool:
        return self.path(uid).is_file()

    def remove(self, uid: str) -> None:
        """Remove the claim's spec; nothing there is fine."""
        with contextlib.suppress(FileNotFoundError):
            self.path(uid).unlink()

    def uids(self) -> list[str]:
        """The claims that have a spec here (by file name)."""
        if not self.directory.is_dir():
            return []
        return sorted(
            p.name.removeprefix(self._prefix).removesuffix(".json")
            for p in self.directory.iterdir()
            if p.name.startswith(self._prefix) and p.name.endswith(".json")
        )


def _write(path: str, data: bytes) -> None:
    """``data`` as the whole of the file ``path`` (made or emptied first), one system call
    each: a prepare waits for it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
