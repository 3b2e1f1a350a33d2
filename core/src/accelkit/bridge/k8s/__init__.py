"""accelkit plugins as kubelet device plugins (device plugin API v1beta1, DESIGN §16).

:func:`~accelkit.bridge.k8s.bridge.run_bridge` serves every extended resource of one agent
(:mod:`~accelkit.bridge.k8s.resources`) with a
:class:`~accelkit.bridge.k8s.device_plugin.DevicePluginService` on its own unix socket,
registers it on ``kubelet.sock``, and frees bookings the kubelet no longer lists.
"""

from __future__ import annotations

from accelkit.bridge.k8s.resources import K8sResource, k8s_resources

__all__ = ["K8sResource", "k8s_resources"]
