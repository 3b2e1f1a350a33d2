"""The ``accelkit`` command.

Importing the command's modules (click, attrs, pluggy, accelkit's own) makes thousands of
objects that live as long as the process; the cyclic garbage collector would pass over them some
thirty times while they are made, a few milliseconds of every command, to free nothing. It is
paused while they are imported, and what they made is frozen (never traversed again) when it
resumes, as :func:`accelkit.cli.app.run` does again for the command's own modules.
"""

from __future__ import annotations

import gc

_collecting = gc.isenabled()
gc.disable()
try:
    from accelkit.cli.app import cli, main
finally:
    if _collecting:
        gc.freeze()
        gc.enable()

__all__ = ["cli", "main"]
