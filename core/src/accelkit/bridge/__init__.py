"""Bridges from accelkit plugins to the cluster schedulers users already run (DESIGN §16).

The bridges live in ``accelkit.bridge.k8s`` (a kubelet device plugin) and
``accelkit.bridge.slurm`` (gres.conf and job prolog/epilog); this package itself exports nothing.
"""

__all__: list[str] = []
