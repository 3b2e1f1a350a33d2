"""The version of the accelkit-mem distribution, read by the build backend (single source)."""

__version__ = "0.2.0"
