"""Decision reconstruction from a history, and imitation of a scheduler's decisions."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from db.records import JobRecord, TresCounts  # noqa: E402
from slurm_plugin.cluster import ClusterSpec  # noqa: E402
from slurm_plugin.features import JOB_FEATURES, NODE_FEATURES  # noqa: E402
from trainer.imitate import (  # noqa: E402
    BEYOND_CAP,
    INFEASIBLE,
    OVERCOMMITTED,
    OWN_PRIOR_DEFAULT,
    PLACE_LABELS,
    Decision,
    DecisionDataset,
    ImitationConfig,
    Reconstruction,
    evaluate,
    fit_est_prior,
    reconstruct,
    records_from_sim,
    replay_history,
    split_decisions,
    train_imitation,
)
from trainer.policy import PolicyConfig, PolicyNet  # noqa: E402
from trainer.sim.engine import EngineOptions, simulate  # noqa: E402
from trainer.sim.policies import make_policy  # noqa: E402
from trainer.sim.slurm import SchedulerOptions  # noqa: E402
from trainer.sim.state import Cluster, build_jobs  # noqa: E402
from trainer.sim.workload import (  # noqa: E402
    WorkloadConfig,
    default_cluster,
    generate,
    replay_records,
)

T0 = 1_700_000_000
IDLE = NODE_FEATURES.index("idle")
FITS = JOB_FEATURES.index("fits_now")


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def rec(jid: int, submit: int, start: int, end: int, nodes: tuple[str, ...], *,
        n: int | None = None, user: str = "u1", priority: int | None = None) -> JobRecord:
    tres = TresCounts(n if n is not None else len(nodes), None, None, None)
    return JobRecord(
        job_id=jid, name="", user=user, account="", partition="", qos="", state="COMPLETED",
        submit_time=T0 + submit, eligible_time=T0 + submit, start_time=T0 + start,
        end_time=T0 + end, time_limit=end - start + 10, req=tres, alloc=tres,
        node_list=",".join(nodes), nodes=nodes, priority=priority, exit_code=0)


def three_nodes() -> ClusterSpec:
    # leaf1 = node01, node02; leaf2 = node03
    return ClusterSpec.synthetic("c", 3, nodes_per_leaf=2, gpus_per_node=0, cpus_per_node=64,
                                 mem_mb_per_node=0)


def history(priority: bool = False) -> list[JobRecord]:
    p = (lambda v: v) if priority else (lambda v: None)
    return [
        rec(1, 0, 0, 100, ("node02", "node03"), priority=p(50)),
        rec(2, 10, 100, 150, ("node01", "node02", "node03"), priority=p(40)),
        rec(3, 20, 20, 60, ("node01",), priority=p(30)),   # starts while 2 waits
        rec(4, 30, 150, 200, ("node03",), priority=p(10)),
        rec(5, 30, 150, 180, ("node01", "node02"), priority=p(20)),
    ]


# ---------------------------------------------------------------------------- reconstruction
def test_reconstruction_of_a_hand_made_history():
    r = reconstruct(history(), three_nodes())
    got = [(d.time - T0, d.obs.job_ids.tolist(), d.chosen, d.job_id) for d in r.decisions]
    assert got == [
        (0, [1], 0, 1),
        (20, [2, 3], 1, 3),        # 2 (3 nodes) cannot start: 3 takes the free node
        (100, [2, 4, 5], 0, 2),    # 1 ended at 100: completions before starts
        (150, [4, 5], 0, 4),       # 2 ended at 150; starts at one time in job id order
        (150, [5], 0, 5),          # 4 left the pending set and took its node
    ]
    masks = [d.obs.job_mask.tolist() for d in r.decisions]
    assert masks == [[True], [False, True], [True, True, True], [True, True], [True]]
    for d in r.decisions:
        assert d.obs.jobs[:, FITS].tolist() == d.obs.job_mask.astype(float).tolist()
    # running jobs sit on their recorded nodes: job 1 on node02 and node03
    idle = [d.obs.nodes[:, IDLE].tolist() for d in r.decisions]
    assert idle == [[1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]]
    assert r.stats["starts"] == 5 and r.stats["decisions"] == 5
    assert not r.has_priority and all(d.priority is None for d in r.decisions)
    # at 20 s job 2 waits for node02/node03 (job 1's limit ends at 110 s); job 3's limit
    # (50 s) ends before that, so EASY backfill would start it too
    assert [d.backfill.tolist() for d in r.decisions] == masks  # type: ignore[union-attr]


def test_the_easy_backfill_reference_explains_a_backfilled_start():
    """Job 6 (submitted at 15 s, 110 s limit) fits at 20 s but would run past the 110 s
    at which the waiting job 2 can start; job 3 (50 s limit) would not: EASY backfill
    starts job 3, as the history did, where FIFO picks job 6."""
    recs = history() + [rec(6, 15, 200, 300, ("node01",))]
    r = reconstruct(recs, three_nodes())
    d = r.decisions[1]
    assert (d.job_id, d.obs.job_ids.tolist()) == (3, [2, 6, 3])
    assert d.obs.job_mask.tolist() == [False, True, True]
    assert d.backfill.tolist() == [False, False, True]  # type: ignore[union-attr]
    m = evaluate(PolicyNet(PolicyConfig(hidden=8)), r.decisions)
    # starts: 1 (0 s), 3 (20 s), 2 (100 s), 4 and 5 (150 s, job 6 older), 6 (200 s)
    assert m["fifo"]["top1"] == pytest.approx(3 / 6)
    assert m["fifo_backfill"]["top1"] == pytest.approx(4 / 6)


def test_oldest_visible_plus_the_started_job():
    r = reconstruct(history(), three_nodes(), max_visible=1)
    assert [d.obs.job_ids.tolist() for d in r.decisions] == [[1], [2, 3], [2], [4], [5]]
    assert [d.chosen for d in r.decisions] == [0, 1, 0, 0, 0]
    assert r.stats[BEYOND_CAP] == 1


def test_stride_keeps_every_kth_start():
    r = reconstruct(history(), three_nodes(), max_decisions=3)
    # starts in time order: 1, 3, 2, 4, 5; every 2nd (ceil(5 / 3)) is kept
    assert [d.job_id for d in r.decisions] == [1, 2, 5]
    assert r.stats["skipped by stride"] == 2
    # the state is still replayed at every start: job 5 sees node03 taken by job 4
    assert r.decisions[-1].obs.nodes[:, IDLE].tolist() == [1, 1, 0]


def test_without_recorded_nodes_running_jobs_are_placed_by_tree_best_fit():
    recs = [rec(1, 0, 0, 100, (), n=1), rec(2, 5, 5, 50, (), n=2)]
    r = reconstruct(recs, three_nodes())
    # job 1 (1 node) best fit: the leaf with the fewest usable nodes (leaf2 = node03),
    # leaving leaf1 whole for job 2
    assert r.decisions[1].obs.nodes[:, IDLE].tolist() == [1, 1, 0]
    assert r.decisions[1].obs.job_mask.tolist() == [True]


def test_a_start_that_cannot_fit_is_counted_not_learnt():
    recs = history() + [rec(6, 15, 20, 30, ("node01", "node02", "node03"))]
    r = reconstruct(recs, three_nodes())
    assert 6 not in [d.job_id for d in r.decisions]
    assert r.stats[INFEASIBLE] == 1 and r.stats[OVERCOMMITTED] >= 1


def test_placement_label_is_the_candidate_on_the_recorded_leaves():
    spec = ClusterSpec.synthetic("c", 4, nodes_per_leaf=2, gpus_per_node=0, cpus_per_node=8,
                                 mem_mb_per_node=0)
    r = reconstruct([rec(1, 0, 0, 10, ("node03", "node04"))], spec)
    (d,) = r.decisions
    assert d.cand_sets is not None and d.cand_match is not None
    assert [np.flatnonzero(s).tolist() for s in d.cand_sets] == [[0, 1], [2, 3]]
    assert d.cand_match.tolist() == [False, True]
    assert r.stats[PLACE_LABELS] == 1
    # a one-node start gets no label with the default place_min_nodes=2
    r1 = reconstruct([rec(1, 0, 0, 10, ("node03",))], spec)
    assert r1.decisions[0].cand_sets is None


def test_references_and_priority():
    r = reconstruct(history(priority=True), three_nodes())
    assert r.has_priority
    assert r.decisions[3].priority.tolist() == [10.0, 20.0]
    torch.manual_seed(0)
    m = evaluate(PolicyNet(PolicyConfig(hidden=8)), r.decisions, has_priority=True)
    assert m["fifo"]["top1"] == 1.0
    # priority ranks job 5 over job 4 at t=150: one miss out of five
    assert m["priority"]["top1"] == pytest.approx(0.8)
    assert m["priority"]["top1_nontrivial"] == pytest.approx(0.5)
    # random among the feasible jobs: 1, 1, 1/3, 1/2, 1
    assert m["random"]["top1"] == pytest.approx((3 + 1 / 3 + 1 / 2) / 5)
    assert m["random"]["top5"] == 1.0


def test_split_by_submit_time():
    r = reconstruct(history(), three_nodes())
    parts = split_decisions(r.decisions, r.jobs.submit, 0.4, 0.2)
    # submits 0, 10, 20, 30, 30: train < 20, val < 30, test the rest
    assert parts == {"train": [0, 2], "val": [1], "test": [3, 4]}
    with pytest.raises(ValueError, match="split shares"):
        split_decisions(r.decisions, r.jobs.submit, 0.9, 0.2)


def test_collate_targets_and_labels():
    spec = ClusterSpec.synthetic("c", 4, nodes_per_leaf=2, gpus_per_node=0, cpus_per_node=8,
                                 mem_mb_per_node=0)
    r = reconstruct([rec(1, 0, 0, 10, ("node03", "node04")), rec(2, 0, 0, 10, ("node01",))],
                    spec)
    batch, target, match, has = DecisionDataset.collate(r.decisions)
    assert target.tolist() == [0, 0] and has.tolist() == [True, False]
    assert match.tolist() == [[False, True], [False, False]]
    assert batch.place_job.tolist() == [0, 0]


# ---------------------------------------------------------------------------- imitation
def fifo_history(num_jobs: int, seed: int = 0):
    cfg = WorkloadConfig(kind="gpu", num_jobs=num_jobs, seed=seed, mean_interarrival_s=100)
    spec = default_cluster(cfg)
    recs = replay_records(generate(cfg), spec)
    res = simulate(spec, recs, make_policy("fifo"), SchedulerOptions(backfill=True),
                   EngineOptions(keep_placements=True))
    return spec, recs, res


def test_records_from_sim_carry_the_simulated_schedule():
    spec, recs, res = fifo_history(40)
    out = records_from_sim(recs, res)
    assert len(out) == 40
    for r in out:
        i = int(np.flatnonzero(res.jobs.job_id == r.job_id)[0])
        assert r.start_time == res.start[i] and r.end_time == res.end[i]
        assert r.nodes == res.placements[i]
    with pytest.raises(ValueError, match="keep_placements"):
        records_from_sim(recs, simulate(spec, recs, make_policy("fifo")))


def test_replay_history_is_the_replay_written_back():
    """replay_history runs the simulator with placements kept (the step every caller had
    to remember) and writes that schedule back: the same as simulating by hand."""
    spec, recs, res = fifo_history(40)
    cluster = Cluster.from_spec(spec)
    hist, res2 = replay_history(recs, build_jobs(recs, cluster), cluster, make_policy("fifo"),
                                SchedulerOptions(backfill=True))
    assert res2.placements is not None and np.array_equal(res2.start, res.start)
    assert hist == records_from_sim(recs, res)
    assert len(hist) == 40 and all(r.nodes for r in hist)


def test_imitation_learns_a_fifo_schedule():
    spec, recs, res = fifo_history(500)
    hist = records_from_sim(recs, res)
    cfg = ImitationConfig(epochs=15, hidden=32, lr=3e-3, threads=1, place_min_nodes=1,
                          progress=False)
    net, rep = train_imitation(hist, spec, cfg)
    test = rep.metrics["test"]
    assert rep.splits["test"] >= 80
    # measured on the dev machine (101 test decisions): top-1 net 0.545, random 0.114,
    # fifo 0.762; top-5 net 0.921, random 0.350
    assert test["net"]["top1"] > test["random"]["top1"] + 0.2
    # the history is the simulator's FIFO with EASY backfill: the reference that applies
    # the backfill rule to FIFO explains far more of it than FIFO alone (0.96 vs 0.762)
    assert test["fifo_backfill"]["top1"] > max(0.9, test["fifo"]["top1"] + 0.1)
    assert test["net"]["top5"] > test["random"]["top5"] + 0.3
    assert rep.history[-1]["loss"] < rep.history[0]["loss"]
    assert rep.best_epoch >= 1
    assert rep.to_dict()["config"]["epochs"] == 15
    # the recorded history (FIFO) is no estimate order: the head is kept, uncompared
    assert not rep.prior_alone and rep.prior_top1 is None
    assert bool(net.job_head.out.weight.detach().abs().sum() > 0)


def _two_idle_nodes():
    """Two idle 8-CPU nodes on one leaf (no GPUs)."""
    from slurm_plugin.features import NodesRaw

    return NodesRaw.build(n_leaves=1, cap_c=np.full(2, 8), cap_g=np.zeros(2),
                          cap_m=np.zeros(2), free_c=np.full(2, 8), free_g=np.zeros(2),
                          free_m=np.zeros(2), idle=np.ones(2, dtype=bool),
                          up=np.ones(2, dtype=bool), remaining=np.zeros(2),
                          leaf=np.zeros(2, dtype=np.int64))


def _decisions(n: int, pick, seed: int = 0) -> list[Decision]:
    """``n`` decisions among 2-12 jobs that all fit, the chosen row by ``pick(x, rng)``
    (``x``: the rows' ``log_est_run``)."""
    from slurm_plugin.features import JobsRaw, featurize
    from trainer.policy import _EST

    rng = np.random.default_rng(seed)
    nr = _two_idle_nodes()
    out = []
    for k in range(n):
        j = int(rng.integers(2, 13))
        jr = JobsRaw.build(
            job_id=np.arange(j) + 1, eligible=np.zeros(j), limit=np.full(j, 86_400),
            nodes=np.ones(j), cpus=np.ones(j), gpus=np.zeros(j), mem=np.zeros(j),
            exclusive=np.zeros(j, dtype=bool), user=np.zeros(j),
            est_run=rng.random(j) * 20_000 + 60, usage_share=np.zeros(j),
            locality=np.zeros(j))
        obs = featurize(1_000, jr, nr)
        assert obs.job_mask.all()
        out.append(Decision(obs, int(pick(obs.jobs[:, _EST].astype(float), rng)), k, k, k))
    return out


def test_fit_est_prior_explains_an_estimate_ordering():
    shortest = _decisions(200, lambda x, rng: int(np.argmin(x)))
    longest = _decisions(200, lambda x, rng: int(np.argmax(x)))
    assert fit_est_prior(shortest, bound=20.0) == 20.0  # separable: the bound
    assert fit_est_prior(longest, bound=7.0) == -7.0

    def soft(x, rng, w=2.0):
        p = np.exp(-w * x)
        return int(rng.choice(len(x), p=p / p.sum()))

    # drawn from softmax(-2 x): the fit recovers the weight
    assert fit_est_prior(_decisions(3000, soft, seed=1)) == pytest.approx(2.0, abs=0.3)
    assert abs(fit_est_prior(_decisions(3000, lambda x, rng: int(rng.integers(len(x))),
                                        seed=2))) < 0.3  # no preference: about 0
    assert fit_est_prior([]) == 0.0


def test_imitation_starts_from_the_fitted_prior():
    spec, recs, res = fifo_history(150, seed=3)
    hist = records_from_sim(recs, res)
    cfg = ImitationConfig(epochs=1, hidden=16, threads=1, place_min_nodes=1, progress=False)
    net, rep = train_imitation(hist, spec, cfg)
    assert rep.est_prior is not None and -20.0 <= rep.est_prior <= 20.0
    assert rep.est_prior_final == pytest.approx(float(net.est_prior.detach()))
    assert rep.to_dict()["est_prior"] == rep.est_prior
    off = train_imitation(hist, spec, ImitationConfig(**{**cfg.to_dict(), "prior_fit": False,
                                                         "epochs": 0}))[1]
    assert off.est_prior is None and off.est_prior_final == 0.0


def test_a_teacher_ordering_by_the_estimate_is_kept_by_the_prior_alone():
    from types import SimpleNamespace

    # the teacher always starts the shortest estimate: the fitted prior alone copies it
    # exactly, and the trained head could only add noise to that order
    ds = _decisions(300, lambda x, rng: int(np.argmin(x)), seed=4)
    rec = Reconstruction(ds, SimpleNamespace(submit=np.arange(len(ds))), None)
    cfg = ImitationConfig(epochs=6, hidden=16, lr=3e-3, threads=1, progress=False,
                          prior_max=3.0, teacher="sef")  # (hold, which competes, learns to lose)
    net, rep = train_imitation(rec, None, cfg)
    assert rep.prior_alone and rep.prior_top1 == 1.0 and rep.head_top1 <= 1.0
    assert rep.metrics["val"]["net"]["top1"] == 1.0  # the metrics are the kept net's
    assert not bool(net.job_head.out.weight.detach().any())
    assert rep.to_dict()["prior_alone"] is True
    # without a fitted prior there is nothing to keep alone
    off = train_imitation(rec, None, ImitationConfig(**{**cfg.to_dict(), "prior_fit": False}))
    assert not off[1].prior_alone and off[1].prior_top1 is None
    # the same starts taught by a teacher whose order no prior expresses (sjf; the
    # recorded history): the head is kept, whatever the prior alone would agree
    for teacher in ("sjf", None):
        other, orep = train_imitation(rec, None, ImitationConfig(**{**cfg.to_dict(),
                                                                    "teacher": teacher}))
        assert not orep.prior_alone and orep.prior_top1 is None and orep.head_top1 is None
        assert bool(other.job_head.out.weight.detach().any())
        assert orep.config["teacher"] == teacher


def _area_decisions(n: int, seed: int = 0) -> list[Decision]:
    """``n`` decisions among 2-12 one-node jobs of 1-8 CPUs on a CPU cluster, each starting
    the smallest estimated area (estimate x CPUs: ``seaf``'s order)."""
    from slurm_plugin.features import JobsRaw, featurize

    rng = np.random.default_rng(seed)
    nr = _two_idle_nodes()
    out = []
    for k in range(n):
        j = int(rng.integers(2, 13))
        cpus, est = rng.integers(1, 9, j), rng.random(j) * 20_000 + 60
        jr = JobsRaw.build(
            job_id=np.arange(j) + 1, eligible=np.zeros(j), limit=np.full(j, 86_400),
            nodes=np.ones(j), cpus=cpus, gpus=np.zeros(j), mem=np.zeros(j),
            exclusive=np.zeros(j, dtype=bool), user=np.zeros(j), est_run=est,
            usage_share=np.zeros(j), locality=np.zeros(j))
        obs = featurize(1_000, jr, nr)
        assert obs.job_mask.all()
        out.append(Decision(obs, int(np.argmin(est * cpus)), k, k, k))
    return out


def test_a_seaf_teacher_is_kept_by_the_area_prior_alone():
    from types import SimpleNamespace

    ds = _area_decisions(300, seed=5)
    # est_prior alone does not express this order; area_prior separates it
    assert fit_est_prior(ds, bound=3.0, prior="area_prior") == 3.0
    assert fit_est_prior(ds, bound=20.0) < 20.0  # not separable by the estimate alone
    rec = Reconstruction(ds, SimpleNamespace(submit=np.arange(len(ds))), None)
    cfg = ImitationConfig(epochs=6, hidden=16, lr=3e-3, threads=1, progress=False,
                          prior_max=3.0, teacher="seaf")  # (hold learns to lose)
    net, rep = train_imitation(rec, None, cfg)
    assert rep.area_prior == 3.0 and rep.est_prior is None
    assert float(net.area_prior) == 3.0  # fixed: not trained
    assert rep.prior_alone and rep.prior_top1 == 1.0
    assert rep.metrics["test"]["net"]["top1"] == 1.0
    # the prior alone is area_prior's: the job head's output and est_prior are zeroed
    assert not bool(net.job_head.out.weight.detach().any()) and float(net.est_prior) == 0.0
    # a sef teacher fits est_prior and leaves area_prior at 0
    sef = train_imitation(rec, None, ImitationConfig(**{**cfg.to_dict(), "teacher": "sef",
                                                        "epochs": 0}))
    assert sef[1].area_prior is None and sef[1].est_prior is not None
    assert float(sef[0].area_prior) == 0.0


def test_an_lrf_teacher_is_kept_by_the_amount_prior_alone():
    from types import SimpleNamespace

    from slurm_plugin.features import JobsRaw, featurize

    # one-node jobs of distinct CPU counts on a CPU cluster; the teacher starts the
    # fewest CPUs (lrf's order), whatever the estimates say
    rng = np.random.default_rng(6)
    nr = _two_idle_nodes()
    ds = []
    for k in range(300):
        j = int(rng.integers(2, 9))
        cpus = rng.permutation(8)[:j] + 1
        est = rng.random(j) * 20_000 + 60
        jr = JobsRaw.build(
            job_id=np.arange(j) + 1, eligible=np.zeros(j), limit=np.full(j, 86_400),
            nodes=np.ones(j), cpus=cpus, gpus=np.zeros(j), mem=np.zeros(j),
            exclusive=np.zeros(j, dtype=bool), user=np.zeros(j), est_run=est,
            usage_share=np.zeros(j), locality=np.zeros(j))
        ds.append(Decision(featurize(1_000, jr, nr), int(np.argmin(cpus)), k, k, k))
    assert fit_est_prior(ds, bound=8.0, prior="amount_prior") == 8.0
    assert fit_est_prior(ds, bound=20.0) < 20.0  # the estimate does not express it
    with pytest.raises(ValueError, match="no prior 'other'"):
        fit_est_prior(ds, prior="other")
    rec = Reconstruction(ds, SimpleNamespace(submit=np.arange(len(ds))), None)
    cfg = ImitationConfig(epochs=6, hidden=16, lr=3e-3, threads=1, progress=False,
                          prior_max=8.0, teacher="lrf", teacher_prior=True)
    net, rep = train_imitation(rec, None, cfg)
    assert rep.amount_prior == 8.0 and rep.est_prior is None and rep.area_prior is None
    assert float(net.amount_prior) == 8.0 and float(net.area_prior) == 0.0  # fixed
    assert rep.prior_alone and rep.prior_top1 == 1.0
    assert rep.metrics["test"]["net"]["top1"] == 1.0
    assert not bool(net.job_head.out.weight.detach().any()) and float(net.est_prior) == 0.0
    # by default (and with False) lrf fits est_prior, as before amount_prior existed, and
    # never keeps it alone (it is not lrf's order)
    for choice in (None, False):
        old, orep = train_imitation(rec, None, ImitationConfig(**{**cfg.to_dict(),
                                                                  "teacher_prior": choice}))
        assert orep.amount_prior is None and orep.est_prior is not None
        assert not orep.prior_alone and orep.prior_top1 is None
        assert float(old.amount_prior) == 0.0 and bool(old.job_head.out.weight.detach().any())
    assert ImitationConfig().teacher_prior is None and "lrf" not in OWN_PRIOR_DEFAULT
    # a seaf teacher fits area_prior and leaves amount_prior at 0
    seaf = train_imitation(rec, None, ImitationConfig(**{**cfg.to_dict(), "teacher": "seaf",
                                                         "epochs": 0}))
    assert seaf[1].amount_prior is None and seaf[1].area_prior is not None
    assert float(seaf[0].amount_prior) == 0.0


def test_training_is_deterministic():
    spec, recs, res = fifo_history(150, seed=3)
    hist = records_from_sim(recs, res)
    cfg = ImitationConfig(epochs=2, hidden=16, threads=1, place_min_nodes=1, progress=False)
    nets = [train_imitation(hist, spec, cfg)[0] for _ in range(2)]
    other = train_imitation(hist, spec, ImitationConfig(**{**cfg.to_dict(), "seed": 1}))[0]
    a, b, c = (n.state_dict() for n in (*nets, other))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
