"""Parity: an exported model computes what the torch policy computes.

:func:`check_parity` runs the torch reference (:func:`torch_reference`:
:meth:`trainer.policy.PolicyNet.forward`, the deploy contract) and the onnxruntime
session on the same inputs and compares, per input:

- the masked entries (``-1e9``) of ``job_logits`` and ``place_logits`` are the same;
- on the unmasked entries and ``value``, ``max |onnx - torch| <= atol * max(1, scale)``
  (``atol`` = ``1e-5``), ``scale`` being the largest unmasked ``|torch|`` of that output:
  exactly ``1e-5`` for outputs within ``[-1, 1]``, and float32's own resolution for large
  logits (a net trained by imitation puts job logits near 40, where one float32 step is
  ``3.8e-6`` and two equivalent summation orders differ by a few steps);
- the argmax of ``job_logits`` (hold included) and of ``place_logits`` (when ``K > 0``)
  is the same, or the two entries are tied within ``atol`` in the torch output (then
  either is a correct argmax).

The inputs (:func:`parity_cases`) are at least 1,000 observations recorded from the
simulator (:func:`record_observations`: :class:`trainer.env.SchedEnv` with placement
on, driven by a seeded random agent over synthetic GPU and HPC workloads, every job
phase and placement phase observation kept with its candidates), plus the edge cases of
:func:`exporter.synthetic.edge_cases` (0, 1 and 10,000 pending jobs, every job masked,
every candidate masked, no candidate, one node, no GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from slurm_plugin.scorer import MASKED
from trainer.policy import Net

from .contract import OUTPUTS
from .synthetic import Case, edge_cases
from .verify import run_case

__all__ = [
    "ATOL",
    "ParityError",
    "ParityReport",
    "check_parity",
    "parity_cases",
    "record_observations",
    "torch_reference",
]

#: Name prefix of the cases recorded from the simulator.
SIM_PREFIX = "sim "

#: Largest allowed difference between onnxruntime and torch on an unmasked output.
ATOL = 1e-5


class ParityError(ValueError):
    """The exported model does not compute what the torch policy computes.

    Attributes:
        report: The :class:`ParityReport`.
    """

    def __init__(self, report: ParityReport) -> None:
        self.report = report
        super().__init__(report.message())


@dataclass
class ParityReport:
    """What :func:`check_parity` compared.

    Attributes:
        cases: Inputs compared.
        recorded: Of which recorded from the simulator.
        max_diff: Largest difference per output (unmasked entries).
        argmax_checked: Argmaxes compared (jobs, and placements where ``K > 0``).
        failures: ``(case, reason)`` of each input that did not agree.
        atol: The tolerance.
    """

    cases: int = 0
    recorded: int = 0
    max_diff: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OUTPUTS, 0.0))
    argmax_checked: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    atol: float = ATOL

    @property
    def ok(self) -> bool:
        """Every input agreed."""
        return not self.failures and self.cases > 0

    def message(self, show: int = 5) -> str:
        """A readable verdict (the first ``show`` failures)."""
        diffs = ", ".join(f"{k} {v:.2e}" for k, v in self.max_diff.items())
        head = (f"parity {'OK' if self.ok else 'FAILED'} on {self.cases} inputs"
                f" ({self.recorded} recorded from the simulator): max |onnx - torch| {diffs}"
                f" (tolerance {self.atol:g})")
        if self.ok:
            return head
        lines = [head, f"{len(self.failures)} input(s) disagree, e.g.:"]
        lines += [f"  {name}: {why}" for name, why in self.failures[:show]]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (for the model card)."""
        return {"inputs": self.cases, "recorded": self.recorded, "atol": self.atol,
                "max_abs_diff": dict(self.max_diff), "argmax_checked": self.argmax_checked,
                "failures": len(self.failures)}


# ---------------------------------------------------------------------------- inputs
def record_observations(n: int = 1000, seed: int = 0, max_jobs: int = 64) -> list[Case]:
    """At least ``n`` observations recorded from the simulator (module docstring).

    Deterministic for a seed. Job-phase observations come without candidates
    (``K = 0``); placement-phase ones with the candidates of the job being placed.
    """
    from trainer.env import EnvConfig, from_workload
    from trainer.sim.workload import WorkloadConfig

    rng = np.random.default_rng(seed)
    out: list[Case] = []
    episode = 0
    while len(out) < n:
        kind: Literal["gpu", "hpc"] = "gpu" if episode % 2 == 0 else "hpc"
        wc = WorkloadConfig(kind=kind, num_jobs=300, seed=seed * 1000 + episode,
                            mean_interarrival_s=60.0 if kind == "gpu" else 300.0)
        env = from_workload(wc, EnvConfig(place=True, max_jobs=max_jobs, episode_jobs=None))
        obs, info = env.reset(seed=seed + episode)
        done = False
        while not done and len(out) < n:
            o = info["observation"]
            if o is None:
                break
            name = f"{SIM_PREFIX}{kind} #{episode}.{len(out)}"
            c = info["candidates"]
            if c is not None:
                k = len(c)
                out.append(Case(name, o, c.sets, np.ones(k, dtype=bool),
                                int(np.argmax(obs["selected"]))))
            else:
                out.append(Case(name, o))
            legal = np.flatnonzero(info["action_mask"])
            obs, _, term, trunc, info = env.step(int(rng.choice(legal)))
            done = term or trunc
        episode += 1
    return out


def parity_cases(n: int = 1000, seed: int = 0) -> list[Case]:
    """``n`` recorded observations, then the edge cases."""
    return record_observations(n, seed) + edge_cases(seed)


# ---------------------------------------------------------------------------- compare
def torch_reference(net: Net, case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(job_logits, place_logits, value)`` of the torch net on one case (contract inputs)."""
    f = case.feed()
    args = [torch.from_numpy(f[name]) for name in (
        "jobs", "job_mask", "nodes", "node_leaf", "globals", "cand_sets", "cand_mask",
        "place_job")]
    with torch.no_grad():
        jl, pl, v = net(*args)
    return jl.numpy(), pl.numpy(), v.numpy()


def _argmax_agrees(ref: np.ndarray, got: np.ndarray, atol: float) -> bool:
    a, b = int(np.argmax(ref)), int(np.argmax(got))
    scale = max(1.0, abs(float(ref[a])))
    return a == b or abs(float(ref[a]) - float(ref[b])) <= atol * scale


def _compare(ref: Sequence[np.ndarray], got: Sequence[np.ndarray], rep: ParityReport
             ) -> str | None:
    why: list[str] = []
    for name, r, g in zip(OUTPUTS, ref, got, strict=True):
        if r.shape != g.shape:
            return f"{name} shape {g.shape}, torch {r.shape}"
        rm, gm = r <= MASKED / 2, g <= MASKED / 2
        if not np.array_equal(rm, gm):
            why.append(f"{name}: masked entries differ")
            continue
        d = float(np.abs(r[~rm] - g[~gm]).max()) if (~rm).any() else 0.0
        if not np.isfinite(d):
            why.append(f"{name}: non-finite output")
            continue
        rep.max_diff[name] = max(rep.max_diff[name], d)
        scale = max(1.0, float(np.abs(r[~rm]).max())) if (~rm).any() else 1.0
        if d > rep.atol * scale:
            why.append(f"{name}: max diff {d:.2e} (tolerance {rep.atol * scale:.2e})")
    for name, r, g in zip(OUTPUTS[:2], ref[:2], got[:2], strict=True):
        if r.size:
            rep.argmax_checked += 1
            if not _argmax_agrees(r, g, rep.atol):
                why.append(f"{name}: argmax {int(np.argmax(g))}, torch {int(np.argmax(r))}")
    return "; ".join(why) or None


@contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread (small per-observation ops are much slower on several)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def check_parity(net: Net, session: Any, cases: Sequence[Case],
                 atol: float = ATOL) -> ParityReport:
    """Compare the torch net and an onnxruntime session on ``cases`` (module docstring).

    The torch side is :func:`torch_reference` as this module's attribute (looked up at
    each call, so a test can replace it).
    """
    names = frozenset(i.name for i in session.get_inputs())
    rep = ParityReport(atol=atol)
    net.eval()
    with _one_thread():
        for case in cases:
            _check_one(net, session, names, case, rep)
    return rep


def _check_one(net: Net, session: Any, names: frozenset[str], case: Case,
               rep: ParityReport) -> None:
    rep.cases += 1
    rep.recorded += case.name.startswith(SIM_PREFIX)
    ref = torch_reference(net, case)
    try:
        got = run_case(session, case, names)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
        rep.failures.append((case.name, f"onnxruntime failed: {str(exc)[:200]}"))
        return
    why = _compare(ref, got, rep)
    if why:
        rep.failures.append((case.name, why))
