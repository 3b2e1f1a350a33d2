"""Each opening records the config a ledger was opened with; one that finds it recorded
already only reads (no write lock, nothing committed)."""

from __future__ import annotations

from pathlib import Path

from accelkit.workload import Ledger
from accelkit.workload.config_seen import ConfigSeen, note_config


def test_the_same_config_again_is_read_and_not_written(tmp_path: Path):
    ledger = Ledger(tmp_path)
    try:
        first = ConfigSeen("a" * 64, "/etc/accelkit/host.toml")
        assert note_config(ledger, first) is None
        changes = ledger.db.total_changes
        assert note_config(ledger, first) == first
        assert ledger.db.total_changes == changes  # nothing written

        moved = ConfigSeen(first.digest, "/srv/host.toml")  # the same config, another file
        assert note_config(ledger, moved) == first
        assert ledger.db.total_changes > changes
        other = ConfigSeen("b" * 64, "/srv/host.toml")
        assert note_config(ledger, other) == moved
        again = Ledger(tmp_path)  # another process reads it as recorded
        try:
            assert note_config(again, other) == other
            assert again.db.total_changes == 0
        finally:
            again.close()
    finally:
        ledger.close()
