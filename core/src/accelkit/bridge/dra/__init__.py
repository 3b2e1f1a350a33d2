"""accelkit plugins as a Kubernetes DRA driver (``resource.k8s.io/v1``, DESIGN §18 §16).

The driver publishes an agent's devices as ResourceSlices through the API server, registers with
the kubelet's plugin watcher (``v1.DRAPlugin``), prepares and unprepares the claims the scheduler
allocated from them (booked in the node's ledger like every other workload), and streams device
health to the kubelet.
"""
