"""The kubelet's DRA plugin APIs: plugin registration ``v1``, ``dra/v1`` and the DRA health
service ``v1alpha1`` (Kubernetes 1.36), as the kubelet's sources have them (Apache-2.0, The
Kubernetes Authors; ``dra-health`` is saved as ``dra_health`` so Python can import it).

The ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` modules are generated and committed;
regenerate them from ``core/src`` with::

    python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \\
        accelkit/bridge/dra/api/dra_v1.proto \\
        accelkit/bridge/dra/api/dra_health_v1alpha1.proto \\
        accelkit/bridge/dra/api/pluginregistration_v1.proto

(a test checks that this gives the committed files). They are excluded from ruff and mypy.
"""
