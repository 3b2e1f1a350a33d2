"""The kubelet's gRPC APIs: device plugin ``v1beta1`` and PodResources ``v1`` (DESIGN §16).

The ``.proto`` files are written from the published API (k8s.io/kubelet): package names,
services, messages and field numbers are the wire contract and match it exactly. The
``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` modules are generated from them and committed;
regenerate them from ``core/src`` with::

    python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \\
        accelkit/runtime/kubelet_api/deviceplugin_v1beta1.proto \\
        accelkit/runtime/kubelet_api/podresources_v1.proto

(a test checks that this gives the committed files). They are excluded from ruff and mypy.
"""
