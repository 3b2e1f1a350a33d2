"""Bridges from accelkit plugins to the cluster schedulers users already run (DESIGN §16)."""
