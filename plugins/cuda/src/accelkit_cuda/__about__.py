"""The version of the accelkit-cuda distribution, read by the build backend (single source)."""

__version__ = "0.2.0"
