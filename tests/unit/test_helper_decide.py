"""slurm_plugin.helper.decide: ranking to site factors, starvation, hysteresis, steering."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin import features as F
from slurm_plugin.helper import decide as D

RULE = D.SiteFactorRule(lo=0, hi=100, hysteresis=5, starvation_limit=1000, max_changes=10)


def test_rank_values_by_hand():
    # scores 3 > 2 > 1 -> ranks 0, 1, 2 -> 100, 50, 0
    assert D.rank_values(np.array([3.0, 1.0, 2.0]), RULE).tolist() == [100, 0, 50]
    # ties share the best rank's value
    assert D.rank_values(np.array([2.0, 2.0, 1.0]), RULE).tolist() == [100, 100, 0]
    # one job gets the top, none gives nothing
    assert D.rank_values(np.array([-7.0]), RULE).tolist() == [100]
    assert D.rank_values(np.array([]), RULE).tolist() == []
    # five jobs over 0..100: step 25
    r = D.SiteFactorRule(lo=1000, hi=1100)
    assert D.rank_values(np.array([5.0, 4, 3, 2, 1]), r).tolist() == [1100, 1075, 1050, 1025, 1000]


def test_logit_values_by_hand():
    r = D.SiteFactorRule(lo=0, hi=100, mapping="logit", logit_scale=10.0, logit_center=0.5)
    # 50 + 10 * logit, clipped; masked -> lo
    got = D.logit_values(np.array([2.0, -10.0, 0.4, 9.0, -1e9]), r)
    assert got.tolist() == [70, 0, 54, 100, 0]


def test_targets_starving_jobs_go_to_the_top():
    values, starving = D.targets(np.array([1.0, 2.0, 3.0]), np.array([10.0, 5000.0, 1.0]), RULE)
    assert starving.tolist() == [False, True, False]
    assert values.tolist() == [0, 100, 100]  # rank gives [0, 50, 100]; job 2 starving


def test_plan_respects_hysteresis_and_orders_head_first():
    ids = np.array([11, 12, 13, 14])
    values = np.array([100, 66, 33, 0])
    current = np.array([97, 0, 33, 10])       # |diff| = 3, 66, 0, 10
    starving = np.array([False, False, False, False])
    order = np.array([0, 1, 2, 3])
    changes, deferred = D.plan_site_factors(ids, values, starving, current, order, RULE)
    assert [(c.job_id, c.old, c.new) for c in changes] == [(12, 0, 66), (14, 10, 0)]
    assert deferred == 0


def test_targets_policy_order_keeps_the_policy_order_among_starving_jobs():
    rule = replace(RULE, starvation_order="policy")
    scores = np.array([1.0, 2.0, 3.0, 0.5, -1e9])
    waited = np.array([5000.0, 9000.0, 1.0, 2000.0, 10.0])  # 0, 1, 3 starving; 4 masked
    values, starving = D.targets(scores, waited, rule)
    assert starving.tolist() == [True, True, False, True, False]
    # starving by score (1 > 0 > 3, not oldest first), then the others by score
    assert values.tolist() == [75, 100, 25, 50, 0]
    age, _ = D.targets(scores, waited, RULE)
    # age: the starving jobs share hi with the policy's best job; Slurm's age decides
    assert age.tolist() == [100, 100, 100, 100, 0]


def test_starving_first_keeps_both_orders_and_edge_cases():
    s = np.array([-1e9, 3.0, 2.0, 50.0])
    st = np.array([True, False, True, False])
    got = D.starving_first(s, st)
    assert np.argsort(-got).tolist() == [2, 0, 3, 1]
    assert D.starving_first(s, np.zeros(4, bool)).tolist() == s.tolist()
    assert D.starving_first(s, np.ones(4, bool)).tolist() == s.tolist()
    above = np.array([True, False])  # already above: unchanged
    assert D.starving_first(np.array([5.0, 1.0]), above).tolist() == [5.0, 1.0]


def test_targets_express_lane_lifts_short_jobs_above_the_starving_ones():
    rule = replace(RULE, starvation_order="policy", express_limit=600.0)
    scores = np.array([1.0, 2.0, 3.0, 0.5, 4.0, -1.0])
    waited = np.array([5000.0, 9000.0, 1.0, 2000.0, 10.0, 3000.0])  # 0, 1, 3, 5 starving
    limits = np.array([3600, 7200, 600, 300, 0, 120])  # 2, 3, 5 express; 4 unknown
    values, lifted = D.targets(scores, waited, rule, limits)
    assert D.express_jobs(limits, rule).tolist() == [False, False, True, True, False, True]
    assert lifted.tolist() == [True, True, True, True, False, True]
    # express first (starving ones among them first: 3, 5 by score, then 2), then the
    # starving 1, 0, then job 4 although the policy likes it best
    assert np.argsort(-values, kind="stable").tolist() == [3, 5, 2, 1, 0, 4]
    assert values.tolist() == [20, 40, 60, 100, 0, 80]
    # no limits, or the lane off: as before
    for got in (D.targets(scores, waited, rule)[0],
                D.targets(scores, waited, replace(rule, express_limit=0.0), limits)[0]):
        assert got.tolist() == D.targets(scores, waited, replace(RULE,
                                         starvation_order="policy"))[0].tolist()
    assert D.express_jobs(None, rule).tolist() == []
    # the reasons the plan gives
    changes, _ = D.plan_site_factors(np.arange(6), values, lifted, np.full(6, -50),
                                     np.argsort(-scores, kind="stable"), rule,
                                     D.express_jobs(limits, rule))
    assert {c.job_id: c.reason for c in changes} == {
        0: "starvation", 1: "starvation", 2: "express", 3: "express", 4: "policy",
        5: "express"}
    assert [c.reason for c in changes][-1] == "policy"  # lifted jobs are written first


def test_targets_express_lane_in_age_order_splits_the_band():
    # band 0..1000, Slurm's PriorityWeightAge 100: S = (1000 - 101) * 3 // 4 = 674, the
    # lane from X = 775 up; the starving jobs outside the lane all at S (age orders them
    # and the rest's best), the starving express job at hi, the other express jobs below
    rule = D.SiteFactorRule(lo=0, hi=1000, hysteresis=5, starvation_limit=1000,
                            express_limit=600.0, age_weight=100)
    assert rule.split and D.lane_levels(rule) == (674, 775)
    scores = np.array([1.0, 2.0, 3.0, 0.5, 4.0, -1.0, 0.0])
    waited = np.array([5000.0, 9000.0, 1.0, 2000.0, 10.0, 3000.0, 20.0])  # 0 1 3 5 starve
    limits = np.array([3600, 7200, 600, 300, 0, 120, 60])  # 2 3 5 6 express; 4 unknown
    values, lifted = D.targets(scores, waited, rule, limits)
    assert lifted.tolist() == [True, True, True, True, False, True, True]
    # lane: 3 and 5 starving, at hi (Slurm's age factor puts 5, older, first), then 2
    # (score 3) above 6 (score 0), ranked below them in [775, 1000] (the starving ones
    # take the top two of four ranks); starving 0 and 1 at S; job 4 alone in [0, S]
    assert values.tolist() == [674, 674, 850, 1000, 674, 1000, 775]
    assert values[[2, 6]].min() >= 775 and values[4] <= 674
    # with no job in the lane the levels hold: the rest below S, the starving at S
    quiet, _ = D.targets(scores, waited, rule, np.full(7, 3600))
    assert quiet.max() == 674 and quiet[[0, 1, 3, 5]].tolist() == [674] * 4
    # the plan: exact where age orders (starving at S or at hi); the lane's others only
    # until they are in its part of the band, then within the hysteresis
    ids = np.arange(7)
    cur = np.array([674, 670, 800, 990, 674, 1000, 700])
    changes, _ = D.plan_site_factors(ids, values, lifted, cur, np.argsort(-scores), rule,
                                     D.express_jobs(limits, rule))
    assert {c.job_id: (c.new, c.reason) for c in changes} == {
        1: (674, "starvation"), 2: (850, "express"), 3: (1000, "express"),
        6: (775, "express")}
    near = np.array([674, 674, 847, 1000, 674, 1000, 775])  # 2 within 5 of 850: left
    assert D.plan_site_factors(ids, values, lifted, near, np.argsort(-scores), rule,
                               D.express_jobs(limits, rule))[0] == []
    # job 4 left just above S (within the hysteresis, from before the lane): lowered
    above = near.copy()
    above[4] = 677
    assert [(c.job_id, c.new) for c in D.plan_site_factors(
        ids, values, lifted, above, np.argsort(-scores), rule,
        D.express_jobs(limits, rule))[0]] == [(4, 674)]


def test_express_lane_needs_a_guard_a_sane_limit_and_room_in_age_order():
    assert D.SiteFactorRule(express_limit=600.0).split  # the default order is age
    assert not D.SiteFactorRule(express_limit=600.0, starvation_order="policy").split
    with pytest.raises(ValueError, match="needs the starvation guard"):
        D.SiteFactorRule(express_limit=600.0, starvation_limit=0.0)
    with pytest.raises(ValueError, match=r"band wider than Slurm's PriorityWeightAge \(1000\)"
                                         r" \+ 2: band_hi - band_lo is 1002; widen the band"):
        D.SiteFactorRule(lo=0, hi=1002, express_limit=600.0, age_weight=1000)
    D.SiteFactorRule(lo=0, hi=1003, express_limit=600.0, age_weight=1000)  # room for one
    D.SiteFactorRule(lo=0, hi=10, age_weight=1000)  # no lane: no split, any band
    with pytest.raises(ValueError, match="age_weight"):
        D.SiteFactorRule(age_weight=-1)
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="express_limit must be"):
            D.SiteFactorRule(starvation_order="policy", express_limit=bad)
    D.check_express_limit(0.0, "age", 0.0)  # off: any order, any guard


def test_policy_order_needs_the_rank_mapping_and_a_known_name():
    with pytest.raises(ValueError, match="needs mapping 'rank'"):
        D.SiteFactorRule(mapping="logit", starvation_order="policy")
    with pytest.raises(ValueError, match="unknown starvation_order"):
        D.SiteFactorRule(starvation_order="oldest")


def test_plan_policy_order_moves_a_starving_job_only_until_it_is_above_the_rest():
    rule = D.SiteFactorRule(lo=0, hi=100, hysteresis=5, starvation_order="policy")
    ids = np.array([1, 2, 3])
    values = np.array([100, 90, 50])  # jobs 1, 2 starving; job 3 not (floor 50)
    starving = np.array([True, True, False])
    order = np.array([0, 1, 2])
    # job 1 within hysteresis of its target and above the floor: left alone;
    # job 2 within hysteresis but below the floor: raised
    changes, _ = D.plan_site_factors(ids, values, starving, np.array([97, 48, 50]), order,
                                     rule)
    assert [(c.job_id, c.new, c.reason) for c in changes] == [(2, 90, "starvation")]
    age, _ = D.plan_site_factors(ids, values, starving, np.array([97, 48, 50]), order,
                                 replace(rule, starvation_order="age"))
    assert [c.job_id for c in age] == [1, 2]  # age: a starving job always goes to its value


def test_plan_starving_first_and_max_changes():
    rule = D.SiteFactorRule(lo=0, hi=100, hysteresis=5, max_changes=2)
    ids = np.array([1, 2, 3, 4])
    values = np.array([100, 50, 0, 100])
    current = np.array([0, 0, 50, 98])  # job 4: starving, within hysteresis but not at top
    starving = np.array([False, False, False, True])
    order = np.array([0, 1, 2, 3])
    changes, deferred = D.plan_site_factors(ids, values, starving, current, order, rule)
    assert [c.job_id for c in changes] == [4, 1]
    assert changes[0].reason == "starvation" and changes[1].reason == "policy"
    assert deferred == 2


def test_plan_clips_to_the_band():
    changes, _ = D.plan_site_factors(np.array([1]), np.array([10**9]), np.array([False]),
                                     np.array([0]), np.array([0]), RULE)
    assert changes[0].new == 100


def test_policy_order_breaks_ties_by_arrival_then_id():
    order = D.policy_order(np.array([1.0, 2.0, 1.0, 1.0]), np.array([30, 5, 10, 10]),
                           np.array([4, 3, 2, 1]))
    assert order.tolist() == [1, 3, 2, 0]


def test_quantize_ties_only_close_scores_and_keeps_masked_jobs():
    s = np.array([1.04, 0.96, 1.31, -1e9, 0.55])
    q = D.quantize(s, 0.2)
    np.testing.assert_allclose(q[[0, 1, 2, 4]], [1.0, 1.0, 1.4, 0.6])
    assert q[3] == -1e9  # masked stays masked
    np.testing.assert_array_equal(D.quantize(s, 0.0), s)  # 0: exact
    assert D.quantize(np.zeros(0), 0.2).size == 0
    # the two close jobs now tie: they share the best rank's value, Slurm's age decides
    v = D.rank_values(q, RULE)
    assert v[0] == v[1] == 75 and v[2] == 100
    # and the policy's order puts the older of them first
    order = D.policy_order(q, np.array([20, 10, 0, 0, 0]), np.array([1, 2, 3, 4, 5]))
    assert order.tolist()[:3] == [2, 1, 0]
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="score_resolution"):
            D.SiteFactorRule(score_resolution=bad)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40),
       st.floats(1e-6, 1e3))
def test_quantize_never_inverts_the_order(scores, res):
    s = np.array(scores)
    q = D.quantize(s, res)
    i, j = np.meshgrid(np.arange(s.size), np.arange(s.size))
    assert not ((s[i] > s[j]) & (q[i] < q[j])).any()
    assert (np.abs(q - s) <= res / 2 + 1e-9 * np.abs(s)).all()


def test_rule_refuses_bad_band_and_mapping():
    with pytest.raises(ValueError, match="band_lo"):
        D.SiteFactorRule(lo=5, hi=5)
    with pytest.raises(ValueError, match="mapping"):
        D.SiteFactorRule(mapping="magic")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60),
       st.integers(-10**6, 10**6), st.integers(1, 10**6), st.sampled_from(sorted(D.MAPPINGS)))
def test_mappings_stay_in_band_and_follow_the_scores(scores, lo, width, mapping):
    rule = D.SiteFactorRule(lo=lo, hi=lo + width, mapping=mapping, logit_scale=7.0)
    s = np.array(scores)
    v = D.MAPPINGS[mapping](s, rule)
    assert v.dtype == np.int64
    assert (v >= rule.lo).all() and (v <= rule.hi).all()
    order = np.argsort(-s, kind="stable")
    # a higher score never gets a lower site factor
    assert (np.diff(v[order]) <= 0).all()


# ---------------------------------------------------------------------------- steering
def _nodes():
    # 6 nodes: leaf 0 = 0,1,2 (node 2 busy), leaf 1 = 3,4,5
    return F.NodesRaw.build(cap_c=[8] * 6, cap_g=[4] * 6, cap_m=[0] * 6,
                            free_c=[8, 8, 0, 8, 8, 8], free_g=[4, 4, 0, 4, 4, 4],
                            free_m=[0] * 6, idle=[1, 1, 0, 1, 1, 1], up=[1] * 6,
                            remaining=[0] * 6, leaf=[0, 0, 0, 1, 1, 1])


def _jobs(nodes, gpus):
    n = len(nodes)
    return F.JobsRaw.build(job_id=list(range(1, n + 1)), eligible=[0] * n, limit=[60] * n,
                           nodes=nodes, cpus=[1] * n, gpus=gpus, mem=[0] * n,
                           exclusive=[False] * n, user=[0] * n, est_run=[1] * n,
                           usage_share=[0] * n, locality=[0] * n)


def _compact(row, cands):
    return int(np.argmin(cands.leaves))


def test_steer_takes_nodes_before_the_next_job():
    nodes = _nodes()
    jobs = _jobs([3, 3], [4, 4])  # each needs 3 nodes with all 4 GPUs free
    all_ok = np.ones(6, dtype=bool)
    got = D.steer(jobs, nodes, [0, 1], np.array([True, True]), np.array([True, True]),
                  lambda r: all_ok, _compact, max_jobs=4)
    # job 0 fills leaf 1 (the only leaf with 3 free nodes); job 1 no longer fits
    assert [(c.row, c.nodes, c.leaves) for c in got] == [(0, (3, 4, 5), 1)]


def test_steer_respects_order_limits_and_masks():
    nodes = _nodes()
    jobs = _jobs([1, 2, 1, 1], [1, 1, 1, 1])
    all_ok = np.ones(6, dtype=bool)
    may = np.array([True, True, False, True])
    fits = np.array([True, True, True, True])
    got = D.steer(jobs, nodes, [1, 2, 3, 0], may, fits, lambda r: all_ok, _compact,
                  max_jobs=2, min_nodes=1)
    assert [c.row for c in got] == [1, 3]  # row 2 may not be steered
    got = D.steer(jobs, nodes, [1, 2, 3, 0], may, fits, lambda r: all_ok, _compact,
                  max_jobs=5, min_nodes=2)
    assert [c.row for c in got] == [1]
    # the allowed mask keeps a job off leaf 1
    only_leaf0 = np.array([1, 1, 1, 0, 0, 0], dtype=bool)
    got = D.steer(jobs, nodes, [0], may, fits, lambda r: only_leaf0, _compact, max_jobs=1)
    assert set(got[0].nodes) <= {0, 1}


def test_steer_skips_jobs_that_do_not_fit_and_checks_the_choice():
    nodes = _nodes()
    jobs = _jobs([1], [1])
    ok = np.ones(6, dtype=bool)
    assert D.steer(jobs, nodes, [0], np.array([True]), np.array([False]), lambda r: ok,
                   _compact, max_jobs=1) == []
    with pytest.raises(ValueError, match="candidate"):
        D.steer(jobs, nodes, [0], np.array([True]), np.array([True]), lambda r: ok,
                lambda r, c: 99, max_jobs=1)


def test_leaf_waits_picks_jobs_that_could_start_now_only_across_leaves():
    nodes = _nodes()  # free: 0, 1 (leaf 0; node 2 busy) and 3, 4, 5 (leaf 1)
    ok = np.ones(6, dtype=bool)
    yes = np.array([True, True, True])
    # jobs one leaf holds now are left to Slurm and take their nodes: row 0 (3 nodes)
    # leaf 1, row 1 (2 nodes) leaf 0; row 2 then does not fit now: nothing waits
    jobs = _jobs([3, 2, 2], [4, 4, 4])
    assert D.leaf_waits(jobs, nodes, [0, 1, 2], yes, yes, lambda r: ok, max_jobs=4) == []
    # 4 nodes never fit one leaf of 3: it starts across leaves, no wait
    jobs = _jobs([4], [4])
    assert D.leaf_waits(jobs, nodes, [0], yes[:1], yes[:1], lambda r: ok, max_jobs=1) == []
    # row 0 (1 node) is not looked at. Row 1 (3 nodes, kept off node 5) fits now only
    # over nodes 0, 1, 3, 4, while leaf 0 holds it once node 2 is free: it waits and
    # takes nothing, so row 2 (3 nodes) still gets leaf 1 whole
    jobs = _jobs([1, 3, 3], [1, 1, 1])
    no5 = np.array([1, 1, 1, 1, 1, 0], dtype=bool)
    allowed = {0: ok, 1: no5, 2: ok}
    got = D.leaf_waits(jobs, nodes, [0, 1, 2], yes, yes, lambda r: allowed[r], max_jobs=4)
    assert got == [1]
    # max_jobs counts the multi-node jobs looked at (row 2 first takes leaf 1)
    assert D.leaf_waits(jobs, nodes, [0, 2, 1], yes, yes, lambda r: allowed[r],
                        max_jobs=1) == []
    # a job that may not be steered, or that does not fit now, is skipped
    no1 = np.array([True, False, True])
    for may, fits in ((no1, yes), (yes, no1)):
        assert D.leaf_waits(jobs, nodes, [0, 1, 2], may, fits, lambda r: allowed[r],
                            max_jobs=4) == []
    # no tree (one leaf): nothing to wait for
    flat = replace(nodes, leaf=np.zeros(6, dtype=np.int64), n_leaves=1)
    assert D.leaf_waits(jobs, flat, [0, 1, 2], yes, yes, lambda r: allowed[r],
                        max_jobs=4) == []
