"""The Slurm bridge (DESIGN §16): accelkit devices as GRES, the plugins' hooks around each job.

:mod:`.gres` writes ``gres.conf`` and the node's ``Gres=``; :mod:`.job_hooks` is what the
``Prolog=``, ``TaskProlog=`` and ``Epilog=`` commands do; :mod:`.job_gres` reads the job's
GRES indices. The ``slurm-jobs`` runtime (:mod:`accelkit.runtime.slurm_jobs`) tells every
accelkit process whether a booked job still runs.
"""
