"""Bridges from accelkit plugins to the cluster schedulers users already run (DESIGN §16).

A bridge is one ``accelkit NAME`` command, registered through the ``accelkit_bridges`` hook
(:class:`Bridge`). accelkit's own are ``accelkit.bridge.k8s`` (a kubelet device plugin),
``accelkit.bridge.dra`` (a DRA driver) and ``accelkit.bridge.slurm`` (gres.conf and job
prolog/epilog).
"""

from accelkit.bridge.base import Bridge

__all__ = ["Bridge"]
