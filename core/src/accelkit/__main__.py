"""``python -m accelkit``: the ``accelkit`` command (``python -X importtime -m accelkit ...``)."""

from __future__ import annotations

from accelkit.cli.app import run

if __name__ == "__main__":
    run()
