"""The allocation ledger: one JSON file per workload under ``<state-dir>/ledger/``.

Conventions:

* a record lives in ``<quote(agent)>+<quote(workload id)>.json`` (percent-quoting, so any id is a
  safe file name and ``+`` never appears inside a part); a leading ``.`` is quoted too (``%2E``),
  so a record's file name never starts with ``.``: those names belong to the lock and to
  temporary files;
* every change is written atomically: a temporary file ``.<record file>.tmp-<pid>`` in the same
  directory, ``fsync``, ``os.replace`` over the record, then ``fsync`` of the directory, so a
  crash leaves either the old record or the new one, never a mix; a temporary file found by
  :meth:`Ledger.scan` (which holds the lock, so no write is under way) is a crashed writer's and
  is deleted;
* changes happen under an exclusive ``fcntl.flock`` on ``ledger/.lock``. The lock is re-entrant
  within one :class:`Ledger` object; separate objects (and separate processes) exclude each
  other. Whoever allocates must hold it from reading the ledger to writing the new record, which
  is what keeps two accelkit processes on one node from booking the same device;
* a file that cannot be read as a record (truncated, not JSON, wrong format, misnamed) is moved
  to ``ledger/set-aside/`` and reported by :meth:`Ledger.scan`, never raised;
* JSON only, never pickle.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs

from accelkit.errors import ConfigError
from accelkit.types import AgentId
from accelkit.workload.record import LedgerFormatError, LedgerRecord

SUFFIX = ".json"
SET_ASIDE_DIR = "set-aside"
LOCK_FILE = ".lock"
#: the name :meth:`Ledger.write` gives its temporary files, and only those
_TEMP_NAME = re.compile(r"\.[^./][^/]*" + re.escape(SUFFIX) + r"\.tmp-[0-9]+")


def record_file_name(agent_id: str, workload_id: str) -> str:
    """The file name of a record: both parts percent-quoted, joined by ``+``.

    A leading ``.`` is quoted as ``%2E``: a record's file name never starts with ``.``.
    """
    agent = quote(agent_id, safe="")
    if agent.startswith("."):
        agent = "%2E" + agent[1:]
    return f"{agent}+{quote(workload_id, safe='')}{SUFFIX}"


def temp_file_name(record_name: str, pid: int) -> str:
    """The name of the temporary file a writer with process id ``pid`` fills first."""
    return f".{record_name}.tmp-{pid}"


def is_temp_file_name(name: str) -> bool:
    """Whether ``name`` is one :func:`temp_file_name` gives (a record's name never is)."""
    return _TEMP_NAME.fullmatch(name) is not None


@attrs.frozen
class SetAside:
    """A ledger file that could not be read and was moved out of the way."""

    path: Path
    moved_to: Path | None
    reason: str


@attrs.frozen
class LedgerScan:
    """The readable records, by ``(agent, workload id)``, and the files set aside."""

    records: dict[tuple[AgentId, str], LedgerRecord]
    set_aside: tuple[SetAside, ...] = ()


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Ledger:
    """The records of one state directory."""

    def __init__(self, state_dir: Path | str, *, source: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.directory = self.state_dir / "ledger"
        #: the config file naming the state directory, for error messages
        self.source = source
        self._guard = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"Ledger({str(self.directory)!r})"

    def close(self) -> None:
        """Nothing to close: every change opens and closes its files."""

    # -- locking -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[Ledger]:
        """Hold the ledger's exclusive lock (blocking until it is free).

        Raises :class:`~accelkit.errors.ConfigError` (key ``resource.state-dir``) when the
        ledger directory or its lock cannot be created or opened.
        """
        with self._guard:
            if self._depth == 0:
                self._lock_fd = self._acquire()
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
                if self._depth == 0 and self._lock_fd is not None:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    os.close(self._lock_fd)
                    self._lock_fd = None

    def _acquire(self) -> int:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            where = exc.filename if exc.filename is not None else self.directory
            msg = f"cannot use the state directory {str(self.state_dir)!r}: {reason} ({where})"
            raise ConfigError(msg, file=self.source, key="resource.state-dir") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                msg = f"cannot lock the ledger of state directory {str(self.state_dir)!r}: {exc}"
                raise ConfigError(msg, file=self.source, key="resource.state-dir") from exc
            raise
        return fd

    # -- reading -------------------------------------------------------------------------------

    def path_of(self, agent_id: str, workload_id: str) -> Path:
        """Where the record of a workload lives."""
        return self.directory / record_file_name(agent_id, workload_id)

    def scan(self) -> LedgerScan:
        """Every readable record; unreadable files are set aside and listed, never raised."""
        with self.locked():
            records: dict[tuple[AgentId, str], LedgerRecord] = {}
            problems: list[SetAside] = []
            for found in sorted(self.directory.iterdir()):
                if is_temp_file_name(found.name):
                    found.unlink(missing_ok=True)  # a write interrupted by a crash
                    continue
                path = found
                if path.name.startswith(".") and path.name.endswith(SUFFIX):
                    path = self._rename_legacy(path)
                if path.name.startswith(".") or not path.is_file():
                    continue  # the lock, set-aside/, and what is not ours
                try:
                    record = self._read(path)
                except LedgerFormatError as exc:
                    problems.append(self._set_aside(path, str(exc)))
                    continue
                records[record.key] = record
            return LedgerScan(records, tuple(problems))

    def read_all(self) -> dict[tuple[AgentId, str], LedgerRecord]:
        """Every readable record, without the lock and without changing anything."""
        records: dict[tuple[AgentId, str], LedgerRecord] = {}
        if not self.directory.is_dir():
            return records
        for path in sorted(self.directory.glob("*" + SUFFIX)):
            if path.name.startswith("."):
                continue
            try:
                record = self._read(path)
            except (FileNotFoundError, LedgerFormatError):
                continue
            records[record.key] = record
        return records

    def _rename_legacy(self, path: Path) -> Path:
        """Give a record named the old way (agent id starting with ``.``) its current name."""
        try:
            record = LedgerRecord.from_json(json.loads(path.read_bytes().decode("utf-8")))
        except (OSError, UnicodeDecodeError, ValueError):
            return path  # not a record of ours: leave it alone
        agent, workload_id = record.key
        if path.name != f"{quote(agent, safe='')}+{quote(workload_id, safe='')}{SUFFIX}":
            return path
        target = self.path_of(*record.key)
        if target.exists():
            return path
        try:
            os.replace(path, target)
            _fsync_directory(self.directory)
        except OSError:
            return path
        return target

    def read(self, agent_id: str, workload_id: str) -> LedgerRecord | None:
        """The record of one workload, or ``None`` (also when its file is unreadable)."""
        path = self.path_of(agent_id, workload_id)
        try:
            return self._read(path)
        except FileNotFoundError:
            return None
        except LedgerFormatError:
            return None

    def _read(self, path: Path) -> LedgerRecord:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            # not the record's fault (permissions, I/O, no file descriptors): moving it aside
            # would hide a live allocation, so refuse to go on instead
            msg = f"cannot read the ledger record {str(path)!r}: {exc.strerror or exc}"
            raise ConfigError(msg, file=self.source, key="resource.state-dir") from exc
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            msg = f"unreadable ({type(exc).__name__}: {exc})"
            raise LedgerFormatError(msg) from None
        record = LedgerRecord.from_json(data)
        if path.name != record_file_name(*record.key):
            msg = f"holds the record of {record.key!r}, which belongs in another file"
            raise LedgerFormatError(msg)
        return record

    def _set_aside(self, path: Path, reason: str) -> SetAside:
        target_dir = self.directory / SET_ASIDE_DIR
        target = target_dir / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        try:
            target_dir.mkdir(exist_ok=True)
            os.replace(path, target)
            _fsync_directory(self.directory)
        except OSError:
            return SetAside(path, None, reason)
        return SetAside(path, target, reason)

    # -- writing -------------------------------------------------------------------------------

    def write(self, record: LedgerRecord) -> None:
        """Create or replace a workload's record, atomically."""
        with self.locked():
            path = self.path_of(*record.key)
            temp = self.directory / temp_file_name(path.name, os.getpid())
            data = json.dumps(record.to_json(), indent=1, sort_keys=True).encode("utf-8")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                with os.fdopen(fd, "wb", closefd=True) as stream:
                    stream.write(data)
                    stream.flush()
                    os.fsync(stream.fileno())
                os.replace(temp, path)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
            _fsync_directory(self.directory)

    def remove(self, agent_id: str, workload_id: str) -> bool:
        """Delete a workload's record; ``False`` when there was none."""
        with self.locked():
            try:
                self.path_of(agent_id, workload_id).unlink()
            except FileNotFoundError:
                return False
            _fsync_directory(self.directory)
            return True
