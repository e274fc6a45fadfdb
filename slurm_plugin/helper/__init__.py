"""The helper next to slurmctld: it runs the compiled policy every cycle.

Read pending and running jobs, nodes and the switch tree through the
:class:`~slurm_plugin.slurm.SlurmClient`; build the observation with
:mod:`slurm_plugin.features`; score with the ONNX model (:mod:`slurm_plugin.scorer`);
turn the ranking into ``SiteFactor`` values inside a configured band and steer the jobs
at the head of the queue to node sets (``ReqNodeList``); apply only what changed; audit
every change. Modes: ``shadow`` (the default: compute, log and audit what it would do,
change nothing) and ``enforce``. Any error leaves Slurm's own scheduling in charge.

Modules: :mod:`.config` (the TOML file and its keys), :mod:`.decide` (pure decisions:
ranking to site factors, starvation, hysteresis, steering choices), :mod:`.actuate`
(audit and changes), :mod:`.state` (the state file), :mod:`.cycle` (one cycle and the
loop), :mod:`.hint` (the job_submit socket), :mod:`.metrics` (Prometheus text),
:mod:`.logs` (structured log lines), :mod:`.cli` (``rlsched helper``).
"""
