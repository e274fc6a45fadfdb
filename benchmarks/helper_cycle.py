"""Helper cycle benchmark (not a test): 10,000 pending jobs and 1,000 nodes.

    python benchmarks/helper_cycle.py                        # 10,000 jobs, 1,000 nodes
    python benchmarks/helper_cycle.py --jobs 2000 --nodes 200

Synthetic ``squeue --json`` / ``sinfo --json`` documents in Slurm 22.05's format (built
from the golden samples), plus ``sprio``, ``squeue -O`` and ``scontrol show topology``
text, are handed to the real CLI client (its command runner replaced, parsers real).
A policy network of a realistic size (per-job and per-node MLPs, pooled per leaf
switch, a placement head over candidate sets) is exported with torch in one child
process; the helper runs in another, fresh child without torch, so its peak RSS
(``ru_maxrss``) is the helper's own.

Reported: parse (read), featurize, ONNX scoring, decide, whole cycle; ONNX scoring
alone (median of repeats); the job_submit hint's answer time; how many site-factor
changes each cycle issues (first cycle: capped by ``max_changes``; an unchanged queue:
none; 1% of jobs replaced: a few); peak RSS. Issue 7's targets: parse + featurize +
score + decide under 1 s, scoring under 10 ms, peak RSS under 300 MB.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GOLDEN = ROOT / "tests" / "golden" / "22.05"
NOW = 1_800_000_000


# ---------------------------------------------------------------------------- the model
def export_model(directory: Path) -> Path:
    """Export a realistic permutation-invariant policy (torch, in its own process)."""
    import torch

    from slurm_plugin import features as F
    from tests import onnx_fixture as X

    h = 64

    def mlp(i: int, o: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.ReLU(),
                                   torch.nn.Linear(h, o))

    class Bench(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.job = mlp(len(F.JOB_FEATURES), h)
            self.node = mlp(len(F.NODE_FEATURES), h)
            self.glob = mlp(len(F.GLOBAL_FEATURES), h)
            self.head = mlp(3 * h, 1)
            self.place = mlp(2 * h, 1)
            self.hold = mlp(2 * h, 1)

        def forward(self, jobs, job_mask, nodes, node_leaf, n_leaves, globals_, cand_sets,
                    cand_mask, place_job):
            ne = self.node(nodes)                                          # [N, h]
            leaves = torch.arange(n_leaves)
            onehot = (node_leaf.unsqueeze(1) == leaves.unsqueeze(0)).to(torch.float32)
            per_leaf = onehot.t() @ ne / onehot.sum(0).clamp(min=1.0).unsqueeze(1)
            cluster = per_leaf.mean(0)                                     # [h]
            ctx = torch.cat([cluster, self.glob(globals_)])                # [2h]
            je = self.job(jobs)                                            # [J, h]
            jl = self.head(torch.cat([je, ctx.expand(je.shape[0], -1)], 1)).squeeze(1)
            jl = torch.where(job_mask, jl, torch.full_like(jl, -1e9))
            job_logits = torch.cat([jl, self.hold(ctx.unsqueeze(0)).reshape(1)])
            cs = cand_sets.to(torch.float32)
            ce = cs @ ne / cs.sum(1).clamp(min=1.0).unsqueeze(1)           # [K, h]
            pj = je[place_job].unsqueeze(0).expand(ce.shape[0], -1)
            pl = self.place(torch.cat([ce, pj], 1)).squeeze(1)
            pl = torch.where(cand_mask, pl, torch.full_like(pl, -1e9))
            return job_logits, pl, job_logits.mean()

    torch.manual_seed(0)
    path = directory / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        X.export(path, Bench().eval())
    X.write_card(path)
    return path


# ---------------------------------------------------------------------------- documents
def documents(n_jobs: int, n_nodes: int, n_running: int, per_leaf: int, seed: int = 0
              ) -> dict[str, str]:
    """Synthetic Slurm output: squeue/sinfo JSON, sprio, squeue -O, topology."""
    from slurm_plugin.slurm.hostlist import compress

    rng = random.Random(seed)
    sq = json.loads((GOLDEN / "squeue.json").read_text())
    si = json.loads((GOLDEN / "sinfo.json").read_text())
    pend_t = next(j for j in sq["jobs"] if j["job_id"] == 17)
    run_t = next(j for j in sq["jobs"] if j["job_id"] == 6)
    node_t = si["nodes"][0]
    width = len(str(n_nodes))
    names = [f"n{i:0{width}d}" for i in range(1, n_nodes + 1)]
    busy: dict[str, int] = {}
    jobs = []
    for k in range(n_running):
        nn = rng.choice([1, 1, 1, 2, 4])
        start = rng.randrange(0, n_nodes - nn)
        on = names[start:start + nn]
        j = copy.deepcopy(run_t)
        g = rng.choice([1, 2, 4, 8])
        j.update(job_id=k + 1, nodes=compress(on), node_count=nn, cpus=nn * 8,
                 tres_req_str=f"cpu={nn * 8},mem={nn * 32}G,node={nn},gres/gpu={nn * g}",
                 tres_alloc_str=f"cpu={nn * 8},mem={nn * 32}G,node={nn},gres/gpu={nn * g}",
                 start_time=NOW - rng.randrange(0, 7200), time_limit=rng.choice([60, 240, 1440]),
                 user_name=f"user{rng.randrange(300)}")
        j["job_resources"] = {"nodes": compress(on)}
        for n in on:
            busy[n] = min(8, busy.get(n, 0) + g)
        jobs.append(j)
    sprio = []
    switches = []
    for k in range(n_jobs):
        jid = n_running + k + 1
        nn = rng.choice([1, 1, 1, 1, 2, 2, 4, 8, 16])
        g = rng.choice([0, 1, 2, 4, 8])
        c = nn * rng.choice([1, 4, 16])
        j = copy.deepcopy(pend_t)
        t = NOW - int(rng.expovariate(1 / 7200))
        j.update(job_id=jid, node_count=nn, cpus=c, submit_time=t, eligible_time=t,
                 tres_req_str=f"cpu={c},mem={nn * 16}G,node={nn},billing={c}"
                              + (f",gres/gpu={nn * g}" if g else ""),
                 tres_per_node=f"gres:gpu:{g}" if g else "",
                 time_limit=rng.choice([10, 30, 60, 120, 240, 720, 1440, 2880]),
                 user_name=f"user{rng.randrange(300)}", priority=1000 + rng.randrange(500),
                 name=f"bench-{jid}", required_nodes="", excluded_nodes="", features="",
                 start_time=0)
        jobs.append(j)
        sprio.append(f"{jid} 0")
        switches.append(f"{jid}|0|0:00")
    sq["jobs"] = jobs
    nodes = []
    for n in names:
        x = copy.deepcopy(node_t)
        used = busy.get(n, 0)
        x.update(name=n, hostname=n, alloc_cpus=8 * (used > 0), gres_used=f"gpu:{used}",
                 alloc_memory=32768 * (used > 0), state="mixed" if used else "idle",
                 features="", active_features="")
        nodes.append(x)
    si["nodes"] = nodes
    topo = []
    leaf_names = []
    for i in range(0, n_nodes, per_leaf):
        name = f"leaf{i // per_leaf + 1}"
        leaf_names.append(name)
        members = compress(names[i:i + per_leaf])
        topo.append(f"SwitchName={name} Level=0 LinkSpeed=1 Nodes={members}")
    topo.append(f"SwitchName=spine Level=1 LinkSpeed=1 Nodes={compress(names)} "
                f"Switches={','.join(leaf_names)}")
    return {"squeue": json.dumps(sq), "sinfo": json.dumps(si), "sprio": "\n".join(sprio) + "\n",
            "switches": "\n".join(switches) + "\n", "topology": "\n".join(topo) + "\n"}


# ---------------------------------------------------------------------------- measuring
def measure(directory: Path, n_jobs: int, n_nodes: int, n_running: int, per_leaf: int,
            repeat: int) -> dict[str, object]:
    """Run the helper on the documents (a fresh process: no torch loaded)."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from slurm_plugin.helper.actuate import MemoryAudit
    from slurm_plugin.helper.config import HelperConfig
    from slurm_plugin.helper.cycle import Helper
    from slurm_plugin.helper.hint import HintRequest, advise
    from slurm_plugin.helper.logs import EventLog
    from slurm_plugin.slurm.cli_backend import CliSlurmClient

    docs = documents(n_jobs, n_nodes, n_running, per_leaf)
    rss_docs = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    class BenchClient(CliSlurmClient):
        def run(self, args):
            a = list(args)
            if a[:2] == ["squeue", "--all"] and "--json" in a:
                return docs["squeue"]
            if a[0] == "squeue":
                return docs["switches"]
            if a[0] == "sprio":
                return docs["sprio"]
            if a[0] == "sinfo":
                return docs["sinfo"]
            if a[:3] == ["scontrol", "show", "topology"]:
                return docs["topology"]
            if a[:3] == ["scontrol", "show", "config"]:
                return (GOLDEN / "scontrol-show-config.txt").read_text()
            raise AssertionError(f"unexpected command {a}")

    client = BenchClient()
    cfg = HelperConfig(model=str(directory / "model.onnx"), state_file=str(directory / "st.json"),
                       mode="shadow", steering="reqnodes", steer_jobs=4, max_changes=500,
                       history_days=0).validate()
    out_log = open(directory / "log.jsonl", "w")  # noqa: SIM115 - closed below
    helper = Helper(cfg, client=client, audit=MemoryAudit(), log=EventLog(out_log),
                    clock=lambda: NOW)
    reports = []
    for _ in range(repeat):
        helper.state.shadow.site.clear()
        reports.append(helper.run_once())
    assert all(r.ok for r in reports), [r.error for r in reports]
    first = reports[0]
    phases = {k: statistics.median(r.timings.get(k, 0.0) for r in reports)
              for k in ("read", "featurize", "score", "decide", "total")}

    # scoring alone, on the cycle's observation
    scorer = helper.scorer
    assert scorer is not None
    ctx = helper.hint_context
    assert ctx is not None
    obs = helper.last_observation
    assert obs is not None
    import numpy as np

    mask = np.ones(obs.n_jobs, dtype=bool)
    score_t = []
    for _ in range(max(5, repeat * 4)):
        t = time.perf_counter()
        scorer.score(obs, job_mask=mask)
        score_t.append(time.perf_counter() - t)
    hint_t = []
    for _ in range(10):
        t = time.perf_counter()
        advise(ctx, HintRequest(nodes=2, cpus=16, gpus=8, limit_s=3600))
        hint_t.append(time.perf_counter() - t)

    # changes per cycle: the would-be values are kept from now on
    helper.state.shadow.site.clear()
    counts = []
    for _ in range(30):
        rep = helper.run_once()
        counts.append((len([c for c in rep.changes if c.field == "site_factor"]), rep.deferred))
        if rep.deferred == 0:
            break
    steady = helper.run_once()
    # replace 1% of the pending jobs (finished/started ones out, new ones in)
    sq = json.loads(docs["squeue"])
    pend = [j for j in sq["jobs"] if j["job_state"] == "PENDING"]
    rng = random.Random(1)
    gone = {j["job_id"] for j in rng.sample(pend, max(1, len(pend) // 100))}
    top = max(j["job_id"] for j in sq["jobs"])
    new = []
    for k, jid in enumerate(sorted(gone)):
        j = next(x for x in pend if x["job_id"] == jid)
        j = copy.deepcopy(j)
        j.update(job_id=top + k + 1, submit_time=NOW, eligible_time=NOW)
        new.append(j)
    sq["jobs"] = [j for j in sq["jobs"] if j["job_id"] not in gone] + new
    docs["squeue"] = json.dumps(sq)
    docs["sprio"] = "".join(f"{j['job_id']} 0\n" for j in sq["jobs"]
                            if j["job_state"] == "PENDING")
    churn = helper.run_once()
    out_log.close()
    return {
        "jobs": n_jobs, "nodes": n_nodes, "running": n_running,
        "scored": first.scored, "phases_s": phases,
        "decide_path_s": phases["read"] + phases["featurize"] + phases["score"] + phases["decide"],
        "onnx_score_ms_median": 1000 * statistics.median(score_t),
        "onnx_score_ms_min": 1000 * min(score_t),
        "hint_ms_median": 1000 * statistics.median(hint_t),
        "changes_first_cycles": counts, "changes_unchanged_queue": len([c for c in steady.changes
                                        if c.field == "site_factor"]),
        "changes_after_1pct_churn": len([c for c in churn.changes if c.field == "site_factor"]),
        "steered_per_cycle": len([c for c in first.changes if c.field == "req_nodes"]),
        "rss_start_mb": rss0 / 1024, "rss_after_documents_mb": rss_docs / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch_loaded": "torch" in sys.modules,
    }


def main() -> None:
    """Export the model, measure in a fresh process, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--running", type=int, default=800)
    ap.add_argument("--per-leaf", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--export", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--measure", metavar="DIR", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.export:
        export_model(Path(a.export))
        return
    if a.measure:
        res = measure(Path(a.measure), a.jobs, a.nodes, a.running, a.per_leaf, a.repeat)
        print(json.dumps(res))
        return
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, __file__, "--export", d], check=True)
        out = subprocess.run([sys.executable, __file__, "--measure", d, "--jobs", str(a.jobs),
                              "--nodes", str(a.nodes), "--running", str(a.running),
                              "--per-leaf", str(a.per_leaf), "--repeat", str(a.repeat)],
                             check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    p = r["phases_s"]
    print(f"helper cycle: {r['jobs']} pending + {r['running']} running jobs, {r['nodes']} nodes"
          f" ({r['scored']} scored), median of {a.repeat} cycles")
    for k in ("read", "featurize", "score", "decide", "total"):
        share = p[k] / p["total"] if p["total"] else 0.0
        print(f"  {k:<10} {p[k] * 1000:9.1f} ms   {share:6.1%} of the cycle")
    print(f"  parse+featurize+score+decide {r['decide_path_s'] * 1000:.1f} ms (target < 1000 ms)")
    print(f"  ONNX scoring alone: median {r['onnx_score_ms_median']:.2f} ms, min"
          f" {r['onnx_score_ms_min']:.2f} ms (target < 10 ms)")
    print(f"  job_submit hint answer: median {r['hint_ms_median']:.2f} ms (Lua timeout 50 ms)")
    print(f"  site-factor changes per cycle until all set (changes, deferred):"
          f" {r['changes_first_cycles']}")
    print(f"  site-factor changes with the queue unchanged: {r['changes_unchanged_queue']};"
          f" after replacing 1% of the jobs: {r['changes_after_1pct_churn']}")
    print(f"  jobs steered per cycle: {r['steered_per_cycle']}")
    print(f"  peak RSS {r['peak_rss_mb']:.0f} MB (at start {r['rss_start_mb']:.0f} MB, with the"
          f" documents {r['rss_after_documents_mb']:.0f} MB; target < 300 MB);"
          f" torch loaded: {r['torch_loaded']}")


if __name__ == "__main__":
    main()
