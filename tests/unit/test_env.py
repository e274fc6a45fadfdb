"""trainer.env.SchedEnv: the Gymnasium contract, determinism, masks, known schedules."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from db.records import JobRecord, TresCounts  # noqa: E402
from slurm_plugin.cluster import ClusterSpec  # noqa: E402
from slurm_plugin.features import Observation  # noqa: E402
from slurm_plugin.placement import Candidates  # noqa: E402
from trainer.env import (  # noqa: E402
    EnvConfig,
    EnvObservation,
    SchedEnv,
    from_table,
    from_workload,
    incumbent_times,
)
from trainer.evaluate import StarvationGuard  # noqa: E402
from trainer.sim import metrics  # noqa: E402
from trainer.sim import workload as w  # noqa: E402
from trainer.sim.engine import Simulator  # noqa: E402
from trainer.sim.policies import make_policy  # noqa: E402
from trainer.sim.profile import FreeProfile  # noqa: E402
from trainer.sim.slurm import SchedulerOptions  # noqa: E402
from trainer.sim.state import BIG, Cluster, build_jobs  # noqa: E402

T0 = 1_699_999_980
SMALL = w.WorkloadConfig(num_jobs=120, seed=5)


def job(jid: int, submit: int, run: int, nodes: int, user: str = "u") -> JobRecord:
    t = T0 + submit
    tres = TresCounts(nodes, None, None, None)
    return JobRecord(jid, "", user, "", "", "", "COMPLETED", t, t, t, t + run, run, tres,
                     tres, "", (), None, 0)


def tiny_env(recs: list[JobRecord], nodes: int = 4, **cfg) -> SchedEnv:
    sp = ClusterSpec.synthetic("c", nodes, nodes_per_leaf=2, gpus_per_node=0,
                               mem_mb_per_node=0)
    cl = Cluster.from_spec(sp)
    cfg = {"episode_jobs": None, "max_candidates": 4, **cfg}
    return from_table(build_jobs(recs, cl), cl, EnvConfig(**cfg))


def legal(info) -> np.ndarray:
    return np.flatnonzero(info["action_mask"])


def random_episode(env: SchedEnv, seed: int, rng_seed: int, options=None):
    rng = np.random.default_rng(rng_seed)
    obs, info = env.reset(seed=seed, options=options)
    trace = [(obs, 0.0, info)]
    actions = []
    done = False
    while not done:
        a = int(rng.choice(legal(info)))
        actions.append(a)
        obs, r, term, trunc, info = env.step(a)
        trace.append((obs, r, info))
        done = term or trunc
    return actions, trace, term


def earliest_fitting(info, max_jobs: int) -> int:
    """Start the earliest visible job that fits; hold when none does."""
    fits = np.flatnonzero(info["action_mask"][:max_jobs])
    return int(fits[0]) if fits.size else max_jobs


# ---------------------------------------------------------------------------- contract
@pytest.mark.parametrize("place", [False, True])
def test_check_env_passes(place):
    env = from_workload(SMALL, EnvConfig(place=place, episode_jobs=40, max_jobs=16,
                                         max_candidates=4))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not having a spec.*")
        check_env(env)


def test_spaces_and_info():
    cfg = EnvConfig(place=True, episode_jobs=30, max_jobs=8, max_candidates=5)
    env = from_workload(SMALL, cfg)
    obs, info = env.reset(seed=3)
    n_nodes = env.cluster.num_nodes
    assert env.action_space.n == 9
    assert obs["jobs"].shape == (8, 14) and obs["nodes"].shape == (n_nodes, 7)
    assert obs["candidates"].shape == (5, n_nodes)
    assert obs in env.observation_space
    assert isinstance(info["observation"], Observation)
    assert info["candidates"] is None and obs["phase"] == 0
    o = info["observation"]
    k = o.n_jobs
    assert 1 <= k <= 8
    assert obs["job_present"].tolist() == [1] * k + [0] * (8 - k)
    assert (obs["jobs"][:k] == o.jobs).all() and not obs["jobs"][k:].any()
    assert info["action_mask"].dtype == bool and info["action_mask"].size == 9
    assert (info["action_mask"][:k] == obs["job_mask"][:k].astype(bool)).all()
    assert (info["action_mask"] == env.action_masks()).all()
    assert list(o.job_ids) == env.stepper.jobs.job_id[info["rows"]].tolist()
    # placement phase: the candidates of the chosen job
    a = int(legal(info)[0])
    assert a < 8
    obs, r, term, trunc, info = env.step(a)
    assert obs["phase"] == 1 and r == 0.0 and not (term or trunc)
    c = info["candidates"]
    assert isinstance(c, Candidates) and 1 <= len(c) <= 5
    assert obs["selected"].tolist() == [int(i == a) for i in range(8)]
    assert (obs["candidates"][:len(c)] == c.sets).all()
    assert info["action_mask"].tolist() == [True] * len(c) + [False] * (9 - len(c))
    assert obs["candidate_mask"].tolist() == [1] * len(c) + [0] * (5 - len(c))


def test_config_is_checked():
    with pytest.raises(ValueError, match="max_candidates"):
        EnvConfig(max_jobs=4, max_candidates=6)
    with pytest.raises(ValueError, match="reward must be one of"):
        EnvConfig(reward="speed")
    with pytest.raises(ValueError, match="speed_model"):
        EnvConfig(speed_model="warp")
    with pytest.raises(ValueError, match="invalid_action"):
        EnvConfig(invalid_action="ignore")  # type: ignore[arg-type]
    assert EnvConfig().to_dict()["max_jobs"] == 64


# ---------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("place", [False, True])
def test_same_seed_and_actions_replay_identically(place):
    cfg = EnvConfig(place=place, episode_jobs=50, max_jobs=16, reward="bsld", fairness=0.5)
    env = from_workload(SMALL, cfg)
    actions, trace, _ = random_episode(env, seed=11, rng_seed=2)
    env2 = from_workload(SMALL, cfg)
    obs, info = env2.reset(seed=11)
    replay = [(obs, 0.0, info)]
    for a in actions:
        obs, r, _, _, info = env2.step(a)
        replay.append((obs, r, info))
    assert len(replay) == len(trace)
    for (o1, r1, i1), (o2, r2, i2) in zip(trace, replay, strict=True):
        assert o1.keys() == o2.keys()
        for key in o1:
            np.testing.assert_array_equal(o1[key], o2[key])
        assert r1 == r2
        assert i1["observation"] == i2["observation"]
        assert i1["candidates"] == i2["candidates"]
        assert (i1["action_mask"] == i2["action_mask"]).all()


def test_seeds_draw_different_windows():
    env = from_workload(SMALL, EnvConfig(episode_jobs=20))
    firsts = set()
    for seed in range(6):
        env.reset(seed=seed)
        firsts.add(int(env.stepper.jobs.job_id[0]))
    assert len(firsts) > 1
    env.reset(seed=0)
    a = int(env.stepper.jobs.job_id[0])
    env.reset(seed=0)
    assert int(env.stepper.jobs.job_id[0]) == a
    env.reset(options={"start": 7})
    assert int(env.stepper.jobs.job_id[0]) == int(env.jobs.job_id[7])
    assert env.stepper.jobs.eligible[0] == 0  # times shifted
    with pytest.raises(ValueError, match="options"):
        env.reset(options={"start": 101})


def test_history_starts_from_earlier_jobs():
    env = from_workload(SMALL, EnvConfig(episode_jobs=20, history_jobs=50))
    env.reset(options={"start": 0})
    assert env.stepper.history.to_dict() == {}
    env.reset(options={"start": 100})
    hist = env.stepper.history.to_dict()
    assert 0 < sum(len(v["ratios"]) for v in hist.values()) <= 50
    jobs = env.jobs
    ended = jobs.eligible[:100] + jobs.run[:100] <= jobs.eligible[100]
    assert set(hist) <= {jobs.users[u] for u in jobs.user[:100][ended]}


# ---------------------------------------------------------------------------- masks
def test_masked_actions_raise_or_are_rejected():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1)]
    env = tiny_env(recs, max_jobs=4, invalid_action="raise")
    obs, info = env.reset(seed=0)
    assert info["action_mask"].tolist() == [True, False, False, False, True]
    with pytest.raises(ValueError, match="masked action: job 1: only 1 jobs are pending"):
        env.step(1)
    with pytest.raises(ValueError, match="outside"):
        env.step(5)
    obs, _, _, _, info = env.step(0)
    assert info["now"] == 2  # job 2 does not fit: time ran on to job 3's arrival
    assert info["action_mask"].tolist() == [False, True, False, False, True]
    with pytest.raises(ValueError, match=r"job 0 \(job id 2\) does not fit now"):
        env.step(0)

    # one job, nothing running, nothing to come: holding would change nothing
    lone = tiny_env([job(1, 0, 100, 2)], max_jobs=4, invalid_action="raise")
    _, info = lone.reset(seed=0)
    assert info["action_mask"].tolist() == [True, False, False, False, False]
    with pytest.raises(ValueError, match="hold: no job is running"):
        lone.step(4)

    env = tiny_env(recs, max_jobs=4, invalid_penalty=2.5)  # reject by default
    obs, info = env.reset(seed=0)
    before = env.stepper.now
    obs2, r, term, trunc, info2 = env.step(3)
    assert r == -2.5 and not term and not trunc
    assert "only 1 jobs are pending" in info2["invalid_action"]
    for key in obs:
        np.testing.assert_array_equal(obs[key], obs2[key])
    assert env.stepper.now == before and env.stepper.n_pending == 1


def test_without_hold_the_agent_must_start_a_fitting_job():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1)]
    env = tiny_env(recs, max_jobs=4, hold=False, invalid_action="raise")
    _, info = env.reset(seed=0)
    assert info["action_mask"].tolist() == [True, False, False, False, False]
    with pytest.raises(ValueError, match="masked action"):
        env.step(4)
    _, _, _, _, info = env.step(0)
    assert info["now"] == 2  # job 2 does not fit: time still runs on by itself
    assert info["action_mask"].tolist() == [False, True, False, False, False]
    _, _, term, _, info = env.step(1)
    assert not term and info["now"] == 100  # nothing fits: hold is taken for the agent
    assert info["action_mask"].tolist() == [True, False, False, False, False]
    _, _, term, _, _ = env.step(0)
    assert term and env.result().start.tolist() == [0, 100, 2]


def test_placement_phase_rejects_a_missing_candidate():
    recs = [job(1, 0, 100, 1)]
    env = tiny_env(recs, max_jobs=4, place=True, max_candidates=4, invalid_action="raise")
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step(0)
    k = len(info["candidates"])
    with pytest.raises(ValueError, match=f"not one of the {k} candidates"):
        env.step(k)
    _, _, term, _, _ = env.step(0)
    assert term
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)


# ---------------------------------------------------------------------------- known schedules
def test_earliest_fitting_agent_on_a_hand_computed_case():
    # 4 nodes. 1 (2 nodes, 100 s) starts at 0; 2 (4 nodes) arrives at 1 and cannot fit;
    # 3 (1 node, 10 s) arrives at 2 and fits: the greedy agent starts it at once (FIFO
    # without backfill would hold it behind 2 until 110); 2 starts when 1 ends, at 100.
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1)]
    env = tiny_env(recs, max_jobs=4)
    _, info = env.reset(seed=0)
    rewards, nows, steps = [], [info["now"]], 0
    done = False
    while not done:
        _, r, term, trunc, info = env.step(earliest_fitting(info, 4))
        rewards.append(r)
        nows.append(info["now"])
        steps += 1
        done = term or trunc
    assert term and steps == 3
    res = env.result()
    assert res.start.tolist() == [0, 100, 2]
    assert nows == [0, 2, 100, 110]
    # step 1 covers [0, 2): job 1 for 2 s (1/100 per s), job 2 for 1 s (1/10 per s)
    assert rewards[0] == pytest.approx(-(2 / 100 + 1 / 10))
    # bsld 1, 10.9, 1
    assert sum(rewards) == pytest.approx(-12.9)
    assert info["episode_metrics"]["bsld_mean"] == pytest.approx(12.9 / 3)
    # waits 0, 99, 0: the 99th percentile interpolates 98% of the way from 0 to 99
    assert info["episode_metrics"]["wait_p99"] == pytest.approx(0.98 * 99)


def _guarded_run(limit: float, order: str = "age", recs=None, **cfg):
    """The earliest-fitting agent on a hand-computed case; (now, legal job ids) per step.

    4 nodes. 1 (2 nodes, 100 s) starts at 0; 2 (4 nodes) arrives at 1 and cannot fit
    before 100; 3 (1 node, 10 s) arrives at 2; 4 (1 node, 200 s) arrives at 3.
    """
    recs = recs or [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1), job(4, 3, 200, 1)]
    env = tiny_env(recs, max_jobs=4, starvation_limit=limit, starvation_order=order,
                   invalid_action="raise", **cfg)
    _, info = env.reset(seed=0)
    seen, done = [], False
    while not done:
        rows = env.rows
        ok = info["action_mask"][:4]
        assert info["observation"] is not None
        assert np.array_equal(env._observe()["job_mask"][:4].astype(bool), ok)
        seen.append((info["now"], env.stepper.jobs.job_id[rows[ok[:rows.size]]].tolist()))
        _, _, term, trunc, info = env.step(earliest_fitting(info, 4))
        done = term or trunc
    return env.result().start.tolist(), seen


def test_starvation_guard_in_the_env_on_a_hand_computed_case():
    # no guard: 3 and 4 start as they arrive, and 2 waits until 4 ends at 203
    starts, seen = _guarded_run(0.0)
    assert starts == [0, 203, 2, 3]
    # 2 starves from 1.5 s on: at 2, 3 may backfill (it ends by 12, before 2's shadow
    # time 100, when 1 reaches its limit); at 3, 4 may not (it would end at 203), so
    # time runs to 100, where only 2 may start (oldest first), then 4 at 110
    starts, seen = _guarded_run(0.5)
    assert starts == [0, 100, 2, 110]
    assert seen == [(0, [1]), (2, [3]), (100, [2]), (110, [4])]
    # starving jobs in the agent's order: any starving job that fits may start, so 4
    # (starving from 3.5 s on) may when 3 ends at 12, as if the net ranked it above 2
    starts, seen = _guarded_run(0.5, "policy")
    assert seen == [(0, [1]), (2, [3]), (12, [4]), (212, [2])]
    assert starts == [0, 212, 2, 12]
    # a guard that never acts changes nothing
    assert _guarded_run(1000.0)[0] == [0, 203, 2, 3]
    with pytest.raises(ValueError, match="starvation_limit"):
        EnvConfig(starvation_limit=-1.0)
    with pytest.raises(ValueError, match="starvation_order"):
        EnvConfig(starvation_order="oldest")


def test_express_lane_in_the_env_on_a_hand_computed_case():
    # 4 nodes: 1 (4 nodes, 100 s) runs from 0; 2 (2 nodes, 200 s) arrives at 1 and
    # starves from 31 s on; 3 (3 nodes, 5 s) arrives at 90. At 100 the guard lets only
    # the starving 2 start, and 3 waits for it; with a 10 s lane, 3 goes first, 2 at 105
    recs = [job(1, 0, 100, 4), job(2, 1, 200, 2), job(3, 90, 5, 3)]
    starts, seen = _guarded_run(30.0, "policy", recs)
    assert seen == [(0, [1]), (100, [2]), (300, [3])] and starts == [0, 100, 300]
    starts, seen = _guarded_run(30.0, "policy", recs, express_limit=10.0)
    assert seen == [(0, [1]), (100, [3]), (105, [2])] and starts == [0, 105, 100]
    # a lane shorter than every limit changes nothing
    assert _guarded_run(30.0, "policy", recs, express_limit=4.0)[0] == [0, 100, 300]
    # in age order too: the lane goes above the starving job
    starts, seen = _guarded_run(30.0, "age", recs, express_limit=10.0)
    assert seen == [(0, [1]), (100, [3]), (105, [2])] and starts == [0, 105, 100]
    with pytest.raises(ValueError, match="needs the starvation guard"):
        EnvConfig(starvation_order="policy", express_limit=10.0)  # no guard
    with pytest.raises(ValueError, match="express_limit must be"):
        EnvConfig(starvation_limit=30.0, starvation_order="policy", express_limit=-1.0)


def test_check_env_passes_behind_the_guard():
    jobs, cl = _busy_table(120)
    inc = incumbent_times(jobs, cl, make_policy("fifo"), SchedulerOptions(bf_interval=0))
    env = SchedEnv(jobs, cl, EnvConfig(episode_jobs=40, warm_start=True,
                                       starvation_limit=600.0), incumbent=inc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    for seed in range(3):  # random legal agents finish every job behind the guard
        _, _, term = random_episode(env, seed, seed)
        assert term


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_fifo_blocking_agent_matches_the_batch_simulator(kind):
    cfg = w.WorkloadConfig(kind=kind, num_jobs=200, seed=2)
    sp = w.default_cluster(cfg)
    cl = Cluster.from_spec(sp)
    jobs = build_jobs(w.replay_records(w.generate(cfg), sp), cl)
    ref = Simulator(jobs, cl, make_policy("fifo"),
                    SchedulerOptions(backfill=False, bf_interval=0)).run()
    env = from_table(jobs, cl, EnvConfig(episode_jobs=None, max_jobs=256))
    _, info = env.reset(seed=0)
    done = False
    while not done:
        rows = info["rows"]
        part = env.stepper.jobs.part[rows]
        mask = info["action_mask"]
        blocked: set[int] = set()
        a = 256
        for k, p in enumerate(part.tolist()):
            if p in blocked:
                continue
            if mask[k]:
                a = k
                break
            blocked.add(p)
        _, _, term, trunc, info = env.step(a)
        done = term or trunc
    assert term
    res = env.result()
    wait = res.start - res.jobs.eligible
    assert wait.tolist() == (ref.start - jobs.eligible).tolist()
    assert (res.end - res.start).tolist() == (ref.end - ref.start).tolist()


# ---------------------------------------------------------------------------- queue order
def _queue_run(pick, recs=None, **cfg):
    """The hand-computed case of _guarded_run in ``queue`` order, ``pick(rows, mask)``
    choosing the action; (now, legal job ids) per step and the starts."""
    recs = recs or [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1), job(4, 3, 200, 1)]
    env = tiny_env(recs, max_jobs=4, actions="queue", invalid_action="raise", **cfg)
    _, info = env.reset(seed=0)
    seen, done = [], False
    while not done:
        rows, ok = env.rows, info["action_mask"][:4]
        assert not info["action_mask"][4]  # the deployed order cannot hold
        assert np.array_equal(env._observe()["job_mask"][:4].astype(bool), ok)
        seen.append((info["now"], env.stepper.jobs.job_id[rows[ok[:rows.size]]].tolist()))
        _, _, term, trunc, info = env.step(pick(env.stepper.jobs.job_id[rows], ok))
        done = term or trunc
    return env.result().start.tolist(), seen


def test_queue_order_on_a_hand_computed_case():
    # 4 whole nodes. In arrival order (FIFO with EASY backfill): at 2, 2 (4 nodes) does
    # not fit and may be picked: it is reserved at its shadow time 100 (1's limit), then
    # only 3 (ends by 12) may start; at 3 and 12 each new pass reserves 2 again, and 4
    # (would run past 100 on a node 2 needs) may not start until 2 has: the order a
    # deployed FIFO priority gives under Slurm's backfill
    def first(ids, ok):
        return int(np.flatnonzero(ok)[0])

    starts, seen = _queue_run(first)
    assert starts == [0, 100, 2, 110]
    assert seen == [(0, [1]), (2, [2, 3]), (2, [3]), (3, [2, 4]), (12, [2, 4]),
                    (100, [2, 4]), (110, [4])]
    # an order that puts 4 above 2 starts it at once, and 2 waits for it
    def four_first(ids, ok):
        legal = np.flatnonzero(ok)
        hit = [k for k in legal.tolist() if ids[k] == 4]
        return hit[0] if hit else int(legal[0])

    starts, _ = _queue_run(four_first)
    assert starts == [0, 203, 2, 3]


def test_queue_order_rejects_what_backfill_would_not_start():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1), job(4, 3, 200, 1)]
    env = tiny_env(recs, max_jobs=4, actions="queue", invalid_action="raise")
    env.reset(seed=0)
    env.step(0)
    _, _, _, _, info = env.step(0)  # at 2: reserve 2
    assert info["action_mask"].tolist() == [False, True, False, False, False]
    with pytest.raises(ValueError, match=r"job 0 \(job id 2\) does not fit now and its"
                                         " partition already has a reserved job"):
        env.step(0)
    env.step(1)  # 3 starts; at 3, 4 arrives and 2 is reserved again
    _, _, _, _, info = env.step(0)
    assert info["now"] == 12  # nothing may start before 3 ends: time ran on by itself
    _, _, _, _, info = env.step(0)  # reserve 2 at 12: 4 would delay it
    assert info["now"] == 100
    with pytest.raises(ValueError, match="actions must be one of"):
        EnvConfig(actions="all")


def _dense(kind: str, n: int, seed: int) -> tuple:
    cfg = (w.WorkloadConfig(num_jobs=n, seed=seed, mean_interarrival_s=130.0) if kind == "gpu"
           else w.WorkloadConfig(kind=kind, num_jobs=n, seed=seed))
    sp = w.default_cluster(cfg)
    cl = Cluster.from_spec(sp)
    return build_jobs(w.replay_records(w.generate(cfg), sp), cl), cl


@pytest.mark.parametrize(("kind", "n", "seed"), [("gpu", 400, 1), ("hpc", 300, 2)])
def test_fifo_queue_order_matches_the_batch_simulators_easy_backfill(kind, n, seed):
    # picking the oldest legal job in queue order is FIFO priority under the engine's
    # EASY backfill (per-partition reservations by count or on the nodes, the rest
    # backfilled around them), start for start; the engine compares expected ends to
    # the second (bf_resolution 1), as the env does
    jobs, cl = _dense(kind, n, seed)
    ref = Simulator(jobs, cl, make_policy("fifo"),
                    SchedulerOptions(bf_interval=0, bf_resolution=1)).run()
    env = from_table(jobs, cl, EnvConfig(episode_jobs=None, max_jobs=256, actions="queue",
                                         invalid_action="raise"))
    _, info = env.reset(seed=0)
    done, reserved = False, 0
    while not done:
        a = int(np.flatnonzero(info["action_mask"])[0])
        reserved += int(not env.stepper.fits(info["rows"][a:a + 1])[0])
        _, _, term, trunc, info = env.step(a)
        done = term or trunc
    assert term
    res = env.result()
    assert ref.backfilled.sum() > 10 and reserved > 10  # the case exercises both
    assert (res.start - res.jobs.eligible).tolist() == (ref.start - jobs.eligible).tolist()
    # the agent of the default order starts what fits at once, with no reservation
    fits_env = from_table(jobs, cl, EnvConfig(episode_jobs=None, max_jobs=256))
    _, info = fits_env.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, info = fits_env.step(earliest_fitting(info, 256))
        done = term or trunc
    assert fits_env.result().start.tolist() != res.start.tolist()


# ------------------------------------------------------------- queue order, conservative
def _fifo_starts(env: SchedEnv, by_limit: bool = False) -> tuple[dict[int, int], int]:
    """Pick the first legal job at every step (``by_limit``: the one with the shortest
    time limit, then the first, as ``sjf`` orders): job id -> start (from the first
    arrival), and how many picks could not start (were planned later)."""
    _, info = env.reset(seed=0)
    done, later = False, 0
    while not done:
        assert not info["action_mask"][-1]  # the deployed order cannot hold
        ok = legal(info)
        a = int(ok[np.argmin(env.stepper.jobs.limit[env.rows[ok]])] if by_limit else ok[0])
        later += int(not env._may[a])
        _, _, term, trunc, info = env.step(a)
        done = term or trunc
    assert term
    res = env.result()
    t0 = int(res.jobs.eligible[0])
    return {int(j): int(s) - t0 for j, s in zip(res.jobs.job_id, res.start, strict=True)}, later


def test_free_profile_plans_by_hand():
    # 4 nodes: 1 idle now (10), 2 free at 50, 1 at 80
    prof = FreeProfile.of(np.array([10, 50, 50, 80, BIG]), 10)
    assert prof.times.tolist() == [10, 50, 80] and prof.free.tolist() == [1, 3, 4]
    assert [prof.earliest(n, 30) for n in (1, 2, 3, 4, 5)] == [10, 50, 50, 80, None]
    assert prof.starts_now(np.array([1, 1, 2]), np.array([500, 0, 1])).tolist() == [
        True, True, False]
    prof.take(50, 100, 2)  # 2 nodes planned over [50, 100)
    assert prof.times.tolist() == [10, 50, 80, 100] and prof.free.tolist() == [1, 1, 2, 4]
    assert prof.earliest(2, 1000) == 80 and prof.earliest(3, 10) == 100
    assert prof.earliest(1, 1000) == 10
    prof.take(10, 60, 1)
    assert prof.free.tolist() == [0, 0, 1, 2, 4] and prof.times.tolist() == [10, 50, 60, 80,
                                                                               100]
    assert prof.starts_now(np.array([1]), np.array([1])).tolist() == [False]
    # nobody idle: the plan starts now with none free
    busy = FreeProfile.of(np.array([20, 30]), 10)
    assert busy.times.tolist() == [10, 20, 30] and busy.free.tolist() == [0, 1, 2]
    # from a replay: job 1 (2 nodes) runs past its 50 s limit, job 2 (1 node) until 130;
    # at 60 the plan frees job 1's nodes from the next second, never now (as the engine's)
    recs = [replace(job(1, 0, 100, 2), time_limit=50), job(2, 30, 100, 1),
            job(3, 60, 10, 1)]
    env = tiny_env(recs, max_jobs=4, actions="queue", bf_plan="conservative")
    env.reset(seed=0)
    env.step(0)  # 1 starts; at 30, 2
    _, _, _, _, info = env.step(0)
    assert info["now"] == 60
    prof = env.stepper.free_profile()
    assert prof.times.tolist() == [60, 61, 130] and prof.free.tolist() == [1, 3, 4]


def test_conservative_queue_order_on_a_hand_computed_case():
    # the engine's hand case: 4 nodes; 2 (2 nodes) waits for 1 (3 nodes) until 100, 3
    # (the whole machine) then until 200. EASY lets 4 (1 node, 250 s) start at 3, since
    # it leaves 2 what it needs, and 3 waits for it until 253; picked in FIFO order under
    # conservative backfill, 4 is planned after 3 (300), as the engine's plan has it
    recs = [job(1, 0, 100, 3), job(2, 1, 100, 2), job(3, 2, 100, 4), job(4, 3, 250, 1)]
    easy, _ = _fifo_starts(tiny_env(recs, actions="queue", invalid_action="raise"))
    assert easy == {1: 0, 2: 100, 3: 253, 4: 3}
    env = tiny_env(recs, max_jobs=4, actions="queue", bf_plan="conservative",
                   invalid_action="raise")
    cons, later = _fifo_starts(env)
    assert cons == {1: 0, 2: 100, 3: 200, 4: 300}
    assert later == 3  # 2 and 3 planned at 3, 3 again at 100 (time moves on when no
    # job left unpicked may start: 4 is never picked while it could not start)
    # at 3, 2, 3 and 4 wait and 4 may start: all three are legal. 2 picked is planned
    # at 100; 4 may still start (nothing picked protects 3 yet), and 2 may not be picked
    # again
    env.reset(seed=0)
    _, _, _, _, info = env.step(0)  # 1 starts
    assert info["now"] == 3
    assert info["action_mask"].tolist() == [True, True, True, False, False]
    _, _, _, _, info = env.step(0)  # 2
    assert info["now"] == 3 and env._planned == {1}
    assert info["action_mask"].tolist() == [False, True, True, False, False]
    with pytest.raises(ValueError, match=r"job 0 \(job id 2\) was picked at this moment"
                                         " already"):
        env.step(0)
    _, _, _, _, info = env.step(2)  # 4 above 3: it starts now, and 3 waits for it
    assert info["now"] == 100 and not env._planned  # time ran on: a new plan
    done = False
    while not done:
        _, _, done, _, info = env.step(int(legal(info)[0]))
    res = env.result()
    assert (res.start - res.jobs.eligible[0]).tolist() == [0, 100, 253, 3]


def _whole_node_records(seed: int) -> list[JobRecord]:
    """250 whole-node jobs on 12 nodes, limits above the run times (jobs end early, and
    every moment plans again)."""
    rng = np.random.default_rng(seed)
    recs, t = [], 0
    for i in range(250):
        t += int(rng.integers(0, 40))
        runt = int(rng.integers(1, 400))
        recs.append(replace(job(i + 1, t, runt, int(rng.choice([1, 1, 2, 3, 4, 8]))),
                            time_limit=runt + int(rng.integers(0, 200))))
    return recs


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_fifo_conservative_queue_order_matches_the_batch_simulators_plan(seed):
    # picking the oldest legal job is FIFO priority under the engine's conservative
    # backfill, start for start; EASY differs on each workload
    recs = _whole_node_records(seed)
    env = tiny_env(recs, nodes=12, actions="queue", bf_plan="conservative", max_jobs=256,
                   invalid_action="raise")
    got, later = _fifo_starts(env)
    jobs, cl = env.jobs, env.cluster
    ref = Simulator(jobs, cl, make_policy("fifo"),
                    SchedulerOptions(bf_interval=0, bf_resolution=1,
                                     bf_plan="conservative")).run()
    want = {int(j): int(s - jobs.eligible[0]) for j, s in zip(jobs.job_id, ref.start, strict=True)}
    assert got == want
    assert later > 50 and ref.backfilled.sum() > 10  # the case plans and backfills
    easy, _ = _fifo_starts(tiny_env(recs, nodes=12, actions="queue", max_jobs=256))
    assert easy != want


@pytest.mark.parametrize(("seed", "order", "express"),
                         [(4, "age", 0), (5, "policy", 0), (6, "policy", 150),
                          (7, "age", 150)])
def test_guarded_conservative_queue_order_matches_the_batch_simulators_guard(
        seed, order, express):
    # behind the guard (25 min; a 150 s express lane), picking in the guard's tiers by
    # shortest limit is the engine's guarded sjf under conservative backfill, re-ranked
    # at every event, start for start; the guard moves most starts, and the EASY-style
    # guard (only the starving jobs that fit, then jobs ending before the oldest one's
    # shadow) put most of them elsewhere (checked when this was written: 164 to 192 of
    # 250 differ)
    recs = _whole_node_records(seed)
    env = tiny_env(recs, nodes=12, actions="queue", bf_plan="conservative", max_jobs=256,
                   invalid_action="raise", starvation_limit=1500, starvation_order=order,
                   express_limit=express)
    got, _ = _fifo_starts(env, by_limit=True)
    jobs, cl = env.jobs, env.cluster
    opts = SchedulerOptions(bf_interval=0, bf_resolution=1, bf_plan="conservative",
                            priority_calc_period=1)
    guarded = Simulator(jobs, cl, StarvationGuard(make_policy("sjf"), 1500, order, express),
                        opts).run()
    assert got == {int(j): int(s - jobs.eligible[0])
                   for j, s in zip(jobs.job_id, guarded.start, strict=True)}
    plain = Simulator(jobs, cl, make_policy("sjf"), opts).run()
    assert int((plain.start != guarded.start).sum()) > 150
    assert int((guarded.start - jobs.eligible > 1500).sum()) > 100  # the guard works


@pytest.mark.parametrize("plan", ["easy", "conservative"])
def test_a_pick_that_reserves_keeps_the_observation(plan):
    # a pick that reserves (EASY) or plans a job later (conservative) changes neither the
    # cluster nor the queue: the env keeps the last observation, which must be the one
    # the stepper would give afresh, at every decision of random picks
    recs = _whole_node_records(5)
    env = tiny_env(recs, nodes=12, actions="queue", bf_plan=plan, max_jobs=16,
                   invalid_action="raise", starvation_limit=1500, starvation_order="policy",
                   express_limit=150)
    rng = np.random.default_rng(3)
    _, info = env.reset(seed=0)
    done, kept = False, 0
    while not done:
        a = int(rng.choice(legal(info)))
        started = bool(env._may[a])
        before = info["observation"]
        _, _, term, trunc, info = env.step(a)
        done = term or trunc
        if not done:
            assert info["observation"] == EnvObservation.of(env.stepper.observation(16))
            kept += int(not started and info["observation"].jobs is before.jobs)
    assert term and kept > 10  # (21 with EASY, 503 conservative when written)


def _state_rule(env: SchedEnv, info) -> int:
    """A pick that depends on the state only (the time and the jobs), not on the step."""
    ok = legal(info)
    if info["phase"] == 1:
        return int(ok[(info["now"] + int(env.rows[env._selected])) % ok.size])
    ids = env.stepper.jobs.job_id[info["rows"]]
    mj = env.config.max_jobs
    keys = [((int(ids[a]) if a < mj else 0) * 7919 + info["now"]) % 101 for a in ok]
    return int(ok[int(np.argmax(keys))])


def _rule_episode(env: SchedEnv):
    """``(start times, return, steps, forced decisions after the first)``."""
    _, info = env.reset(seed=0)
    ret, steps, forced, done = 0.0, 0, 0, False
    while not done:
        if steps and info["phase"] == 0:
            m = info["action_mask"]
            forced += int(m.sum() == 1 and not m[-1])
        _, r, term, trunc, info = env.step(_state_rule(env, info))
        ret, steps, done = ret + r, steps + 1, term or trunc
    assert term
    return env.result().start.tolist(), ret, steps, forced


@pytest.mark.parametrize("setup", [
    {"actions": "queue", "bf_plan": "conservative", "starvation_limit": 1500,
     "starvation_order": "policy", "express_limit": 150},
    {"actions": "queue", "bf_plan": "easy", "starvation_limit": 1500,
     "starvation_order": "policy", "express_limit": 150},
    {"actions": "queue", "place": True},
    {"actions": "fits", "hold": False},
])
def test_taking_forced_picks_keeps_the_schedule_in_fewer_steps(setup):
    # the env takes a pick with one legal action itself: the same picks give the same
    # schedule and return, in as many fewer steps as there were forced decisions, and
    # the agent meets none (the first decision of an episode stays the agent's)
    recs = _whole_node_records(7)
    plain = _rule_episode(tiny_env(recs, nodes=12, max_jobs=16, **setup))
    taken = _rule_episode(tiny_env(recs, nodes=12, max_jobs=16, take_forced=True, **setup))
    assert taken[0] == plain[0]
    assert taken[1] == pytest.approx(plain[1], rel=1e-9, abs=1e-9)
    assert plain[3] > 5 and taken[3] == 0
    assert taken[2] == plain[2] - plain[3]


def test_guarded_conservative_queue_order_picks_the_lifted_jobs_first():
    # 2 nodes, busy until 100; at 100 jobs 2 and 3 have waited past the 30 s limit, 4
    # has not: 2 and 3 are the legal picks until both are picked (3 fits and starts; 2,
    # the whole machine, is planned after it at 110), then 4, whose 20 s limit would
    # delay 2: it is planned behind 2
    recs = [job(1, 0, 100, 2), job(2, 1, 50, 2), job(3, 2, 10, 1),
            replace(job(4, 90, 10, 1), time_limit=20)]
    env = tiny_env(recs, nodes=2, max_jobs=4, actions="queue", bf_plan="conservative",
                   invalid_action="raise", starvation_limit=30, starvation_order="policy")
    env.reset(seed=0)
    _, _, _, _, info = env.step(0)
    assert info["now"] == 100
    assert info["action_mask"].tolist() == [True, True, False, False, False]
    with pytest.raises(ValueError, match=r"job 2 \(job id 4\) ranks below a job the"
                                         " starvation guard lifts"):
        env.step(2)
    _, _, _, _, info = env.step(1)  # 3 starts
    assert info["action_mask"].tolist() == [True, False, False, False, False]
    _, _, _, _, info = env.step(0)  # 2 is planned at 110: 4 may not start, time runs on
    assert info["now"] == 110 and not env._planned
    done = False
    while not done:
        _, _, done, _, info = env.step(int(legal(info)[0]))
    res = env.result()
    assert (res.start - res.jobs.eligible[0]).tolist() == [0, 110, 100, 160]


def test_conservative_queue_order_refuses_what_it_does_not_model():
    jobs, cl = _dense("gpu", 60, 0)  # jobs sharing nodes
    with pytest.raises(ValueError, match="bf_plan 'conservative': conservative backfill"
                                         " is modelled for whole-node jobs.*sharing nodes"):
        from_table(jobs, cl, EnvConfig(actions="queue", bf_plan="conservative"))
    with pytest.raises(ValueError, match="bf_plan must be one of"):
        EnvConfig(bf_plan="lazy")


@pytest.mark.parametrize("place", [False, True])
def test_check_env_passes_in_queue_order(place):
    jobs, cl = _dense("gpu", 120, 0)
    env = SchedEnv(jobs, cl, EnvConfig(episode_jobs=60, max_jobs=16, place=place,
                                       max_candidates=4, actions="queue"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("place", [False, True])
def test_bsld_return_is_minus_the_sum_of_bounded_slowdowns(place):
    env = from_workload(SMALL, EnvConfig(place=place, episode_jobs=60, max_jobs=16))
    _, trace, term = random_episode(env, seed=4, rng_seed=9)
    assert term
    ret = sum(r for _, r, _ in trace)
    bsld = metrics.job_metrics(env.result())["bsld"]
    assert ret == pytest.approx(-bsld.sum(), rel=1e-6)


def test_fairness_term_is_added_once_at_the_end():
    cfg = EnvConfig(episode_jobs=60, max_jobs=16)
    plain = from_workload(SMALL, cfg)
    _, t1, _ = random_episode(plain, seed=4, rng_seed=9)
    fair = from_workload(SMALL, EnvConfig(episode_jobs=60, max_jobs=16, fairness=2.0))
    _, t2, _ = random_episode(fair, seed=4, rng_seed=9)
    r1 = [r for _, r, _ in t1]
    r2 = [r for _, r, _ in t2]
    assert r1[:-1] == r2[:-1]
    jain = metrics.compute(fair.result())["fairness"]["jain_bsld"]
    assert r2[-1] - r1[-1] == pytest.approx(2.0 * 60 * (jain - 1))
    assert jain < 1


@pytest.mark.parametrize("term", ["backlog", "stranding"])
def test_a_reward_term_is_added_to_every_step(term):
    cfg = EnvConfig(episode_jobs=60, max_jobs=16)
    runs = {}
    for name, c in (("bsld", cfg), ("term", replace(cfg, reward=term)),
                    ("mixed", replace(cfg, **{term: 0.25}))):
        env = from_workload(SMALL, c)
        _, trace, done = random_episode(env, seed=4, rng_seed=9)
        assert done
        runs[name] = np.array([r for _, r, _ in trace])
    # jobs waited (backlog), capacity sat idle while they did (stranding)
    assert runs["term"].min() < 0
    np.testing.assert_allclose(runs["mixed"], runs["bsld"] + 0.25 * runs["term"],
                               rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match=f"{term} must be >= 0"):
        EnvConfig(**{term: -0.1})


def test_truncation_after_max_steps():
    env = from_workload(SMALL, EnvConfig(episode_jobs=60, max_jobs=16, max_steps=5))
    _, trace, term = random_episode(env, seed=1, rng_seed=1)
    assert not term and len(trace) == 6


# ---------------------------------------------------------------------------- invariants
def check_state(env: SchedEnv) -> None:
    s = env.stepper.state
    cl = env.cluster
    if not s.whole_only:
        assert (s.free_c >= 0).all() and (s.free_c <= cl.cap_c).all()
        assert (s.free_g >= 0).all() and (s.free_g <= cl.cap_g).all()
        known = cl.cap_m < BIG
        assert (s.free_m[known] >= 0).all()
        assert (s.njobs[s.excl] == 1).all()
        assert s.used_c == int((cl.cap_c - s.free_c).sum())
        assert s.used_g == int((cl.cap_g - s.free_g).sum())
        assert (s.idle == (s.njobs == 0)).all()
    assert s.busy_nodes == int((~s.idle).sum())


@settings(max_examples=16, deadline=None)
@given(kind=st.sampled_from(["gpu", "hpc"]), seed=st.integers(0, 2**16),
       place=st.booleans(), hold_bias=st.floats(0.0, 0.9),
       actions=st.sampled_from(["fits", "queue"]))
def test_random_agents_never_over_allocate_and_finish_every_job(kind, seed, place,
                                                                 hold_bias, actions):
    cfg = w.WorkloadConfig(kind=kind, num_jobs=60, seed=seed % 7)
    env = from_workload(cfg, EnvConfig(place=place, episode_jobs=40, max_jobs=8,
                                       max_candidates=4, actions=actions))
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    done = False
    while not done:
        ok = legal(info)
        assert ok.size  # a legal action always exists
        if info["phase"] == 0 and ok[-1] == 8 and rng.random() < hold_bias:
            a = 8
        else:
            a = int(rng.choice(ok))
        _, _, term, trunc, info = env.step(a)
        check_state(env)
        done = term or trunc
    assert term
    res = env.result()
    jobs = res.jobs
    assert (res.start >= jobs.eligible).all()
    assert (res.end - res.start == jobs.run).all()  # the "none" speed model
    assert env.stepper.state.idle.all()


def test_warmup_jobs_are_replayed_first_but_not_counted():
    # four whole-node jobs on 4 nodes: jobs 1-2 (warm-up) take every node for 100 s, so
    # the window's jobs 3-4, arriving at 10 s, wait 90 s behind them
    recs = [job(1, 0, 100, 2), job(2, 0, 100, 2), job(3, 10, 50, 4), job(4, 10, 50, 4)]
    cold = tiny_env(recs, episode_jobs=2)
    warm = tiny_env(recs, episode_jobs=2, warmup_jobs=2)

    def play(env):
        obs, info = env.reset(seed=0, options={"start": 2})
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(earliest_fitting(info, 64))
            done = term or trunc
        return info["episode_metrics"]

    m_cold, m_warm = play(cold), play(warm)
    assert m_cold["jobs"] == m_warm["jobs"] == 2
    assert m_cold["wait_mean"] == 25.0  # job 4 waits for job 3 (50 s): (0 + 50) / 2
    assert m_warm["wait_mean"] == (90.0 + 140.0) / 2  # behind the warm-up jobs first
    # a window at the table's start has nothing to warm up with
    warm.reset(seed=0, options={"start": 0})
    assert warm._warm == 0
    with pytest.raises(ValueError, match="warmup_jobs"):
        EnvConfig(warmup_jobs=-1)


# ---------------------------------------------------------------------------- warm start
def _busy_table(n: int = 200, nodes: int = 8):
    rng = np.random.default_rng(3)
    recs = [job(i + 1, int(40 * i + rng.integers(0, 30)), int(rng.integers(60, 1500)),
                int(rng.integers(1, 5))) for i in range(n)]
    sp = ClusterSpec.synthetic("c", nodes, nodes_per_leaf=2, gpus_per_node=0,
                               mem_mb_per_node=0)
    cl = Cluster.from_spec(sp)
    return build_jobs(recs, cl), cl


def test_warm_start_needs_the_incumbent_and_excludes_warmup():
    jobs, cl = _busy_table(40)
    with pytest.raises(ValueError, match="incumbent"):
        SchedEnv(jobs, cl, EnvConfig(warm_start=True, episode_jobs=10))
    with pytest.raises(ValueError, match="incumbent"):
        SchedEnv(jobs, cl, EnvConfig(warm_start=True, episode_jobs=10),
                 incumbent=(np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)))
    with pytest.raises(ValueError, match="exclude each other"):
        EnvConfig(warm_start=True, warmup_jobs=5)


def test_warm_start_episode_starts_from_the_incumbent_state():
    jobs, cl = _busy_table()
    inc = incumbent_times(jobs, cl, make_policy("fifo"), SchedulerOptions(bf_interval=0))
    start, end = inc
    size = 30
    env = SchedEnv(jobs, cl, EnvConfig(warm_start=True, episode_jobs=size, hold=False),
                   incumbent=inc)
    cold = SchedEnv(jobs, cl, EnvConfig(episode_jobs=size, hold=False))
    # a moment the incumbent's queue is not empty
    lo = next(r for r in range(20, jobs.n - size)
              if ((start[:r] >= jobs.eligible[r]) & (end[:r] >= jobs.eligible[r])).sum() >= 2
              and jobs.eligible[r - 1] < jobs.eligible[r])
    t0 = int(jobs.eligible[lo])
    obs, info = env.reset(options={"start": lo})
    st = env.stepper
    prior = np.flatnonzero(end[:lo] >= t0)
    assert st.jobs.job_id.tolist() == jobs.job_id[np.r_[prior, lo:lo + size]].tolist()
    assert st.stats["warm_pending"] == int((start[prior] >= t0).sum()) >= 2
    assert st.stats["warm_running"] == int((start[prior] < t0).sum())
    done, steps = False, 0
    while not done:
        obs, r, term, trunc, info = env.step(earliest_fitting(info, env.config.max_jobs))
        done = term or trunc
        steps += 1
    assert term
    m = info["episode_metrics"]
    assert m["jobs"] == size  # the window's jobs only
    # the same window from an empty cluster waits less: the queue was not there
    _, info = cold.reset(options={"start": lo})
    done = False
    while not done:
        _, _, term, trunc, info = cold.step(earliest_fitting(info, cold.config.max_jobs))
        done = term or trunc
    assert info["episode_metrics"]["wait_mean"] < m["wait_mean"]
    # the same start replays identically
    env.reset(options={"start": lo})
    assert env.stepper.jobs.job_id.tolist() == st.jobs.job_id.tolist()


@settings(max_examples=10, deadline=None)
@given(kind=st.sampled_from(["gpu", "hpc"]), seed=st.integers(0, 2**16),
       place=st.booleans(), speed=st.sampled_from(["none", "locality", "bandwidth"]))
def test_warm_started_random_agents_never_over_allocate(kind, seed, place, speed):
    """Shared nodes, the speed models, the placement phase: a warm start keeps the node
    state consistent, the running jobs end when the incumbent's did, and all finishes."""
    cfg = w.WorkloadConfig(kind=kind, num_jobs=120, seed=seed % 5)
    sp = w.default_cluster(cfg)
    cl = Cluster.from_spec(sp)
    jobs = build_jobs(w.replay_records(w.generate(cfg), sp), cl)
    start, end = incumbent_times(jobs, cl, make_policy("fifo"),
                                 SchedulerOptions(bf_interval=0), speed)
    env = SchedEnv(jobs, cl, EnvConfig(warm_start=True, place=place, episode_jobs=40,
                                       max_jobs=8, max_candidates=4, speed_model=speed),
                   incumbent=(start, end))
    rng = np.random.default_rng(seed)
    lo = int(rng.integers(1, jobs.n - 40 + 1))
    _, info = env.reset(seed=seed, options={"start": lo})
    st_ = env.stepper
    t0 = int(jobs.eligible[lo])
    prior = np.flatnonzero(end[:lo] >= t0)
    ran = prior[start[prior] < t0]
    check_state(env)
    done = False
    while not done:
        ok = legal(info)
        assert ok.size
        _, _, term, trunc, info = env.step(int(rng.choice(ok)))
        check_state(env)
        done = term or trunc
    assert term
    res = env.result()
    k = {int(r): i for i, r in enumerate(prior.tolist())}
    placed = [k[int(r)] for r in ran.tolist()]
    assert st_.stats["warm_running"] + st_.stats["warm_skipped"] == ran.size
    if not st_.stats["warm_skipped"]:
        assert (res.end[placed] == end[ran] - t0).tolist() == [True] * ran.size
    assert info["episode_metrics"]["jobs"] == 40
    assert env.stepper.state.idle.all()


def test_the_clis_offer_the_envs_actions():
    # the CLIs spell the choices out (trainer.env imports gymnasium): they must agree
    import click

    from trainer.cli_train import train
    from trainer.demo import demo
    from trainer.env import ACTIONS

    rl_cmd = train.commands["rl"]
    for cmd in (rl_cmd, demo):
        opt = next(p for p in cmd.params if p.name == "actions")
        assert isinstance(opt.type, click.Choice) and tuple(opt.type.choices) == ACTIONS
