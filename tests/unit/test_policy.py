"""The policy network: invariances, sizes, masks, checkpoints, batching, simulator adapter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trainer.policy as policy_mod  # noqa: E402
from slurm_plugin.features import (  # noqa: E402
    JobsRaw,
    NodesRaw,
    Normalisation,
    Observation,
    featurize,
    schema_hash,
)
from slurm_plugin.placement import candidates  # noqa: E402
from trainer.policy import (  # noqa: E402
    MASKED,
    PolicyConfig,
    PolicyEnsemble,
    PolicyNet,
    SchemaMismatchError,
    TorchPolicy,
    batch_tensors,
    load_checkpoint,
    obs_tensors,
    save_checkpoint,
)
from trainer.sim.engine import EngineOptions, simulate  # noqa: E402
from trainer.sim.slurm import SchedulerOptions  # noqa: E402
from trainer.sim.workload import (  # noqa: E402
    WorkloadConfig,
    default_cluster,
    generate,
    replay_records,
)

ATOL = 1e-5


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def make_obs(n_jobs: int, n_nodes: int, n_leaves: int, seed: int = 0
             ) -> tuple[Observation, NodesRaw]:
    rng = np.random.default_rng(seed)
    j = n_jobs
    jr = JobsRaw.build(
        job_id=np.arange(j) + 1, eligible=rng.integers(0, 10_000, j),
        limit=rng.integers(0, 50_000, j), nodes=rng.integers(1, 4, j),
        cpus=rng.integers(1, 16, j), gpus=rng.integers(0, 3, j), mem=np.zeros(j),
        exclusive=rng.random(j) < 0.3, user=rng.integers(0, 5, j),
        est_run=rng.random(j) * 5000, usage_share=rng.random(j), locality=rng.random(j))
    leaf = np.sort(np.concatenate([np.arange(min(n_leaves, n_nodes)),
                                   rng.integers(0, n_leaves, max(0, n_nodes - n_leaves))]))
    idle = rng.random(n_nodes) < 0.5
    nr = NodesRaw.build(
        n_leaves=n_leaves, cap_c=np.full(n_nodes, 16), cap_g=np.full(n_nodes, 4),
        cap_m=np.zeros(n_nodes), free_c=np.where(idle, 16, rng.integers(0, 16, n_nodes)),
        free_g=np.where(idle, 4, rng.integers(0, 4, n_nodes)), free_m=np.zeros(n_nodes),
        idle=idle, up=np.ones(n_nodes, dtype=bool),
        remaining=np.where(idle, 0, rng.integers(1, 90_000, n_nodes)), leaf=leaf)
    return featurize(20_000, jr, nr), nr


def net_for_tests(hidden: int = 16, seed: int = 0, est_prior: float = 0.7,
                  area_prior: float = 0.3) -> PolicyNet:
    """A small net; both priors nonzero so that every test also covers those terms."""
    torch.manual_seed(seed)
    net = PolicyNet.from_config(PolicyConfig(hidden=hidden)).eval()
    with torch.no_grad():
        net.est_prior.fill_(est_prior)
        net.area_prior.fill_(area_prior)
    return net


def run(net, obs, cands=None, place_job=None):
    with torch.no_grad():
        return net(*obs_tensors(obs, cands, place_job))


# ---------------------------------------------------------------------------- invariances
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_job_scores_are_permutation_equivariant(seed):
    net = net_for_tests()
    obs, nr = make_obs(9, 12, 3, seed)
    cands = candidates(nr, 1, 1, 0)
    assert len(cands) >= 2
    perm = np.random.default_rng(seed + 10).permutation(obs.n_jobs)
    permuted = Observation(obs.jobs[perm], obs.job_mask[perm], obs.job_ids[perm], obs.nodes,
                           obs.node_leaf, obs.n_leaves, obs.globals, obs.now)
    place = 4
    a_jobs, a_place, a_value = run(net, obs, cands, place)
    b_jobs, b_place, b_value = run(net, permuted, cands, int(np.flatnonzero(perm == place)[0]))
    np.testing.assert_allclose(b_jobs[:-1].numpy(), a_jobs[:-1].numpy()[perm], atol=ATOL)
    np.testing.assert_allclose(b_jobs[-1].item(), a_jobs[-1].item(), atol=ATOL)
    np.testing.assert_allclose(b_place.numpy(), a_place.numpy(), atol=ATOL)
    np.testing.assert_allclose(b_value.item(), a_value.item(), atol=ATOL)
    # the scores are not all equal: equivariance is not trivially met
    assert float(a_jobs[:-1][obs.job_mask].std()) > 1e-4


@pytest.mark.parametrize("seed", [0, 3])
def test_outputs_invariant_to_node_order_within_and_across_leaves(seed):
    net = net_for_tests()
    obs, nr = make_obs(7, 15, 4, seed)
    cands = candidates(nr, 2, 1, 0)
    assert len(cands) >= 2
    rng = np.random.default_rng(seed)
    within = np.concatenate([rng.permutation(np.flatnonzero(obs.node_leaf == k))
                             for k in range(obs.n_leaves)])
    anywhere = rng.permutation(obs.n_nodes)
    base = run(net, obs, cands, 2)
    for perm in (within, anywhere):
        moved = Observation(obs.jobs, obs.job_mask, obs.job_ids, obs.nodes[perm],
                            obs.node_leaf[perm], obs.n_leaves, obs.globals, obs.now)
        out = run(net, moved, cands.sets[:, perm], 2)
        for x, y in zip(out, base, strict=True):
            np.testing.assert_allclose(x.numpy(), y.numpy(), atol=ATOL)


def test_leaf_pooling_sees_the_switch_boundaries():
    # the same nodes grouped in other leaves give another context (pooling is per leaf)
    net = net_for_tests()
    obs, _ = make_obs(5, 8, 2, 4)
    regrouped = Observation(obs.jobs, obs.job_mask, obs.job_ids, obs.nodes,
                            np.arange(8) % 2, 2, obs.globals, obs.now)
    assert abs(run(net, obs)[2].item() - run(net, regrouped)[2].item()) > 1e-6


# ---------------------------------------------------------------------------- sizes
def test_empty_queue_no_candidates_one_node():
    net = net_for_tests()
    obs, _ = make_obs(0, 1, 1)
    jobs, place, value = run(net, obs, None, None)
    assert jobs.shape == (1,) and place.shape == (0,) and value.shape == ()
    assert torch.isfinite(jobs).all() and torch.isfinite(value)
    # placing "row 0" of an empty queue is no job, not an error
    assert run(net, obs, None, 0)[0].shape == (1,)


def test_two_thousand_jobs_and_one_node():
    net = net_for_tests()
    obs, _ = make_obs(2500, 1, 1, 5)
    jobs, _, _ = run(net, obs)
    assert jobs.shape == (2501,)
    unmasked = jobs[:-1][torch.from_numpy(obs.job_mask)]
    assert torch.isfinite(unmasked).all() and unmasked.numel() == int(obs.job_mask.sum())


def test_many_leaves_and_nodes():
    net = net_for_tests()
    obs, nr = make_obs(40, 600, 150, 6)
    jobs, place, value = run(net, obs, candidates(nr, 3, 2, 1), 7)
    assert jobs.shape == (41,) and place.shape[0] >= 2 and torch.isfinite(place).all()


# ---------------------------------------------------------------------------- masks
def test_masked_jobs_and_sets_get_the_fill_and_hold_is_never_masked():
    net = net_for_tests()
    obs, nr = make_obs(12, 10, 3, 7)
    cands = candidates(nr, 1, 1, 0)
    t = list(obs_tensors(obs, cands, 0))
    mask = torch.tensor([k % 3 != 0 for k in range(obs.n_jobs)])
    t[1] = mask
    t[6] = torch.tensor([k % 2 == 0 for k in range(len(cands))])
    with torch.no_grad():
        jobs, place, _ = net(*t)
    assert (jobs[:-1][~mask] == MASKED).all()
    assert (jobs[:-1][mask] > MASKED / 2).all()
    assert (place[1::2] == MASKED).all() and (place[0::2] > MASKED / 2).all()
    t[1] = torch.zeros(obs.n_jobs, dtype=torch.bool)
    with torch.no_grad():
        jobs = net(*t)[0]
    assert (jobs[:-1] == MASKED).all() and jobs[-1] > MASKED / 2
    # a softmax over all-masked jobs puts everything on hold
    assert torch.softmax(jobs, 0)[-1].item() == pytest.approx(1.0)


# ---------------------------------------------------------------------------- batch
def test_batched_path_equals_single_path():
    net = net_for_tests(hidden=24)
    items = []
    for k, (j, n, leaves) in enumerate([(5, 12, 3), (0, 1, 1), (30, 40, 7), (3, 20, 5),
                                        (1, 2, 2)]):
        obs, nr = make_obs(j, n, leaves, k)
        cands = candidates(nr, 1, 1, 0) if n > 1 else None
        items.append((obs, cands, min(2, j - 1) if j else None))
    batch = batch_tensors(items)
    with torch.no_grad():
        jl, pl, val = net.forward_batch(batch)
        assert torch.equal(net.forward_batch(batch.to("cpu"))[0], jl)
    assert batch.hold_index == jl.shape[1] - 1
    jmax = max(o.n_jobs for o, _, _ in items)
    assert jl.shape == (len(items), jmax + 1)
    for i, (obs, cands, pj) in enumerate(items):
        jobs, place, value = run(net, obs, cands, pj)
        j, k = obs.n_jobs, 0 if cands is None else len(cands)
        np.testing.assert_allclose(jl[i, :j].numpy(), jobs[:-1].numpy(), atol=ATOL)
        np.testing.assert_allclose(jl[i, -1].item(), jobs[-1].item(), atol=ATOL)
        assert (jl[i, j:-1] == MASKED).all()
        np.testing.assert_allclose(pl[i, :k].numpy(), place.numpy(), atol=ATOL)
        assert (pl[i, k:] == MASKED).all()
        np.testing.assert_allclose(val[i].item(), value.item(), atol=ATOL)
        # the padded batch gives the same distribution as the single observation
        np.testing.assert_allclose(torch.softmax(jl[i], 0)[:j].numpy(),
                                   torch.softmax(jobs, 0)[:-1].numpy(), atol=ATOL)


def test_est_prior_alone_orders_shortest_estimate_first():
    """With the job head's output zeroed, the scores are -est_prior * log_est_run: the
    order of the sef baseline (shortest estimated run first), on both paths."""
    net = net_for_tests(hidden=16, est_prior=5.0, area_prior=0.0)
    assert PolicyNet().est_prior.item() == 0.0  # a fresh net starts without the prior
    with torch.no_grad():
        net.job_head.out.weight.zero_()
        net.job_head.out.bias.zero_()
    obs, nr = make_obs(40, 12, 3, seed=4)
    mask = torch.ones(obs.n_jobs, dtype=torch.bool)
    args = list(obs_tensors(obs))
    args[1] = mask
    with torch.no_grad():
        single = net(*args)[0][:-1].numpy()
        batched = net.forward_batch(batch_tensors(
            [(dataclasses.replace(obs, job_mask=np.ones(obs.n_jobs, dtype=bool)), None,
              None)]))[0][0, :-1].numpy()
    est = obs.jobs[:, policy_mod._EST]
    np.testing.assert_allclose(single, -5.0 * est, rtol=1e-6)
    np.testing.assert_allclose(batched, single, atol=ATOL)
    assert np.array_equal(np.argsort(-single, kind="stable"), np.argsort(est, kind="stable"))
    # and it learns: one gradient step on "start the shortest" raises the prior
    net.train()
    net.est_prior.data.fill_(0.0)
    logits = net(*args)[0]
    loss = torch.nn.functional.cross_entropy(logits.unsqueeze(0),
                                             torch.tensor([int(np.argmin(est))]))
    loss.backward()
    assert net.est_prior.grad is not None and net.est_prior.grad.item() < 0


def _sized_jobs(gpus: bool, j: int, seed: int):
    """``j`` pending jobs of 1-3 nodes, 1-15 CPUs, 0-2 GPUs (30% whole-node) on 6 idle
    nodes of 16 CPUs (4 GPUs each with ``gpus``), every job marked startable: the
    observation, the jobs, and each job's amount (GPUs, or CPUs, in total, as lrf counts)."""
    rng = np.random.default_rng(seed)
    n = 6
    jr = JobsRaw.build(
        job_id=np.arange(j) + 1, eligible=np.zeros(j), limit=np.full(j, 86_400),
        nodes=rng.integers(1, 4, j), cpus=rng.integers(1, 16, j), gpus=rng.integers(0, 3, j),
        mem=np.zeros(j), exclusive=rng.random(j) < 0.3, user=np.zeros(j),
        est_run=rng.random(j) * 50_000, usage_share=np.zeros(j), locality=np.zeros(j))
    cap_g = np.full(n, 4 if gpus else 0)
    nr = NodesRaw.build(
        n_leaves=2, cap_c=np.full(n, 16), cap_g=cap_g, cap_m=np.zeros(n),
        free_c=np.full(n, 16), free_g=cap_g, free_m=np.zeros(n), idle=np.ones(n, dtype=bool),
        up=np.ones(n, dtype=bool), remaining=np.zeros(n), leaf=np.arange(n) % 2)
    obs = dataclasses.replace(featurize(1_000, jr, nr), job_mask=np.ones(j, dtype=bool))
    per = np.where(jr.exclusive, 4 if gpus else 16, jr.gpus if gpus else jr.cpus)
    return obs, jr, per * jr.nodes


def _job_scores(net, obs):
    """The job scores (hold left out) of one observation, on the single and batch paths."""
    with torch.no_grad():
        single = net(*obs_tensors(obs))[0][:-1].numpy()
        batched = net.forward_batch(batch_tensors([(obs, None, None)]))[0][0, :-1].numpy()
    np.testing.assert_allclose(batched, single, atol=ATOL)
    return single


@pytest.mark.parametrize("gpus", [True, False])
def test_area_prior_alone_orders_smallest_estimated_area_first(gpus):
    """With the job head's output and est_prior zeroed, the scores are -area_prior *
    log1p(estimate x amount): the seaf baseline's order, GPUs in total on a cluster with
    GPUs (whole nodes' for an exclusive job), CPUs without, on both paths."""
    net = net_for_tests(hidden=16, est_prior=0.0, area_prior=2.0)
    assert PolicyNet().area_prior.item() == 0.0
    assert "area_prior" not in dict(net.named_parameters())  # a buffer, never trained
    with torch.no_grad():
        net.job_head.out.weight.zero_()
        net.job_head.out.bias.zero_()
    obs, jr, amount = _sized_jobs(gpus, 30, seed=7)
    want = -2.0 * np.log1p(jr.est_run / 3600.0 * amount)
    single = _job_scores(net, obs)
    np.testing.assert_allclose(single, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.argsort(-single, kind="stable"), np.argsort(-want, kind="stable"))


@pytest.mark.parametrize("gpus", [True, False])
def test_amount_prior_alone_orders_fewest_gpus_or_cpus_first(gpus):
    """With the job head's output and est_prior zeroed, the scores are -amount_prior *
    log1p(amount): the lrf baseline's order (GPUs in total on a cluster with GPUs, whole
    nodes' for an exclusive job, CPUs without), equal amounts tied, on both paths."""
    net = net_for_tests(hidden=16, est_prior=0.0, area_prior=0.0)
    assert PolicyNet().amount_prior.item() == 0.0
    assert "amount_prior" not in dict(net.named_parameters())  # a buffer, never trained
    with torch.no_grad():
        net.amount_prior.fill_(3.0)
        net.job_head.out.weight.zero_()
        net.job_head.out.bias.zero_()
    obs, _, amount = _sized_jobs(gpus, 40, seed=8)
    j = len(amount)
    single = _job_scores(net, obs)
    np.testing.assert_allclose(single, -3.0 * np.log1p(amount), rtol=1e-5, atol=1e-5)
    # lrf's order, ties and all: equal amounts score exactly alike
    for a in range(j):
        for b in range(j):
            assert (single[a] > single[b]) == (amount[a] < amount[b])
            assert (single[a] == single[b]) == (amount[a] == amount[b])


def test_batch_rejects_empty_list_and_bad_sets():
    obs, _ = make_obs(2, 3, 1)
    with pytest.raises(ValueError, match="at least one"):
        batch_tensors([])
    with pytest.raises(ValueError, match=r"\(K, 3\)"):
        obs_tensors(obs, np.zeros((2, 4), dtype=bool))


# ---------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip(tmp_path):
    net = net_for_tests(hidden=20, seed=3)
    path = tmp_path / "p.pt"
    norm = Normalisation(time_scale=60.0)
    save_checkpoint(path, net, {"epochs": 3, "note": "x"}, norm=norm)
    ck = load_checkpoint(path)
    assert ck.config == PolicyConfig(hidden=20)
    assert ck.extra == {"epochs": 3, "note": "x"}
    assert ck.norm == norm and ck.schema["normalisation"]["time_scale"] == 60.0
    obs, nr = make_obs(6, 9, 3)
    cands = candidates(nr, 1, 1, 0)
    for x, y in zip(run(ck.net, obs, cands, 1), run(net, obs, cands, 1), strict=True):
        assert torch.equal(x, y)


def test_ensemble_scores_the_mean_of_its_nets_and_round_trips(tmp_path):
    nets = [net_for_tests(hidden=12, seed=s) for s in range(3)]
    ens = PolicyEnsemble(nets).eval()
    assert len(ens) == 3 and ens.config == nets[0].config
    obs, nr = make_obs(7, 9, 3)
    obs = dataclasses.replace(obs, job_mask=np.arange(7) % 3 != 1)  # two do not fit
    cands = candidates(nr, 1, 1, 0)
    outs = [run(n, obs, cands, 1) for n in nets]
    got = run(ens, obs, cands, 1)
    for i, g in enumerate(got):
        want = torch.stack([o[i] for o in outs]).mean(0)
        masked = outs[0][i] <= MASKED / 2
        assert torch.equal(g[masked], outs[0][i][masked])  # masked entries stay MASKED
        torch.testing.assert_close(g[~masked], want[~masked])
    assert bool((got[0] <= MASKED / 2).any())  # (the case has jobs that do not fit)
    # the training path too, on a batch of two observations
    batch = batch_tensors([(obs, cands, 1), (make_obs(4, 9, 3, seed=1)[0], None, None)])
    with torch.no_grad():
        bouts = [n.forward_batch(batch) for n in nets]
        bgot = ens.forward_batch(batch)
    for i, g in enumerate(bgot):
        want = torch.stack([o[i] for o in bouts]).mean(0)
        masked = bouts[0][i] <= MASKED / 2
        torch.testing.assert_close(g[~masked], want[~masked])
        assert torch.equal(g[masked], bouts[0][i][masked])
    # saved and loaded as an ensemble, scoring the same
    path = tmp_path / "e.pt"
    save_checkpoint(path, ens, {"ensemble": {"members": [5, 10, 15]}})
    ck = load_checkpoint(path)
    assert isinstance(ck.net, PolicyEnsemble) and len(ck.net) == 3
    for x, y in zip(run(ck.net, obs, cands, 1), got, strict=True):
        assert torch.equal(x, y)
    assert isinstance(load_checkpoint(_single(tmp_path)).net, PolicyNet)  # one net stays one
    # an ensemble is layout 2, one net layout 1 (what every version reads); newer: refused
    assert torch.load(path, weights_only=True)["format"] == 2
    assert torch.load(_single(tmp_path), weights_only=True)["format"] == 1
    data = torch.load(path, weights_only=True)
    data["format"] = 4
    torch.save(data, tmp_path / "newer.pt")
    with pytest.raises(ValueError, match="checkpoint format 4, saved by rlsched .* reads"
                                         " formats up to 3: upgrade rlsched"):
        load_checkpoint(tmp_path / "newer.pt")
    # a TorchPolicy ranks with it
    assert TorchPolicy(ck.net).net is ck.net
    with pytest.raises(ValueError, match="at least one"):
        PolicyEnsemble([])
    with pytest.raises(ValueError, match="one configuration"):
        PolicyEnsemble([nets[0], net_for_tests(hidden=8)])


def test_load_ensemble_averages_single_net_checkpoints_and_refuses_what_does_not_mix(
        tmp_path):
    from trainer.policy import load_ensemble

    nets = [net_for_tests(hidden=12, seed=s) for s in range(2)]
    norm = Normalisation(time_scale=60.0)
    paths = []
    for i, n in enumerate(nets):
        paths.append(tmp_path / f"n{i}.pt")
        save_checkpoint(paths[-1], n, {"i": i}, norm=norm)
    ck = load_ensemble(paths)
    assert isinstance(ck.net, PolicyEnsemble) and len(ck.net) == 2
    assert ck.extra == {"i": 0} and ck.norm == norm  # the first checkpoint's
    obs, nr = make_obs(6, 9, 3)
    cands = candidates(nr, 1, 1, 0)
    for x, y in zip(run(ck.net, obs, cands, 1), run(PolicyEnsemble(nets).eval(), obs, cands,
                                                    1), strict=True):
        assert torch.equal(x, y)
    with pytest.raises(ValueError, match="at least one checkpoint"):
        load_ensemble([])
    save_checkpoint(tmp_path / "e.pt", ck.net, norm=norm)
    with pytest.raises(ValueError, match="e.pt: already an ensemble of 2 nets"):
        load_ensemble([paths[0], tmp_path / "e.pt"])
    save_checkpoint(tmp_path / "other_norm.pt", nets[1])  # default constants
    with pytest.raises(ValueError, match="other_norm.pt: its net's width or feature"
                                         " normalisation differs from .*n0.pt's"):
        load_ensemble([paths[0], tmp_path / "other_norm.pt"])
    save_checkpoint(tmp_path / "narrow.pt", net_for_tests(hidden=8), norm=norm)
    with pytest.raises(ValueError, match="narrow.pt: its net's width"):
        load_ensemble([paths[0], tmp_path / "narrow.pt"])


def _single(d):
    path = d / "one.pt"
    save_checkpoint(path, net_for_tests(hidden=12))
    return path


def test_checkpoint_saved_before_the_area_prior_loads_without_it(tmp_path):
    net = net_for_tests(hidden=8, area_prior=0.0)
    path = tmp_path / "old.pt"
    save_checkpoint(path, net)
    data = torch.load(path, weights_only=True)
    del data["state_dict"]["area_prior"]
    torch.save(data, path)
    ck = load_checkpoint(path)
    assert float(ck.net.area_prior) == 0.0
    obs, _ = make_obs(6, 9, 3)
    for x, y in zip(run(ck.net, obs), run(net, obs), strict=True):
        assert torch.equal(x, y)
    # and any state dict (an RL run's saved state, its best weights)
    other = net_for_tests(hidden=8, seed=1, area_prior=0.5)
    old = {k: v for k, v in net.state_dict().items() if k != "area_prior"}
    other.load_state_dict(old)
    assert float(other.area_prior) == 0.0


def test_amount_prior_is_saved_only_when_set_and_then_as_layout_3(tmp_path):
    """A net without amount_prior saves as before it existed (layout 1, no key: older
    versions read it); one with it saves as layout 3 and loads back with it."""
    net = net_for_tests(hidden=8)
    save_checkpoint(tmp_path / "plain.pt", net)
    data = torch.load(tmp_path / "plain.pt", weights_only=True)
    assert data["format"] == 1 and "amount_prior" not in data["state_dict"]
    assert float(load_checkpoint(tmp_path / "plain.pt").net.amount_prior) == 0.0
    with torch.no_grad():
        net.amount_prior.fill_(1.5)
    save_checkpoint(tmp_path / "lrf.pt", net)
    data = torch.load(tmp_path / "lrf.pt", weights_only=True)
    assert data["format"] == 3 and float(data["state_dict"]["amount_prior"]) == 1.5
    ck = load_checkpoint(tmp_path / "lrf.pt")
    assert float(ck.net.amount_prior) == 1.5
    obs, _ = make_obs(6, 9, 3)
    for x, y in zip(run(ck.net, obs), run(net, obs), strict=True):
        assert torch.equal(x, y)
    # in an ensemble: layout 3 when a member has it, its members' values kept
    ens = PolicyEnsemble([net, net_for_tests(hidden=8, seed=1)])
    save_checkpoint(tmp_path / "ens.pt", ens)
    data = torch.load(tmp_path / "ens.pt", weights_only=True)
    assert data["format"] == 3
    assert "members.0.amount_prior" in data["state_dict"]
    assert "members.1.amount_prior" not in data["state_dict"]
    back = load_checkpoint(tmp_path / "ens.pt").net
    assert isinstance(back, PolicyEnsemble)
    assert [float(m.amount_prior) for m in back.nets] == [1.5, 0.0]


def test_checkpoint_with_another_schema_is_refused(tmp_path):
    net = net_for_tests()
    path = tmp_path / "p.pt"
    save_checkpoint(path, net)
    data = torch.load(path, weights_only=True)
    data["schema"]["job_features"] = [*data["schema"]["job_features"], "new_feature"]
    data["schema_hash"] = "0" * 64
    torch.save(data, path)
    with pytest.raises(SchemaMismatchError, match="retrain"):
        load_checkpoint(path)
    assert schema_hash() != "0" * 64


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"weights": 1}, path)
    with pytest.raises(ValueError, match="not an rlsched"):
        load_checkpoint(path)


def test_config_validation():
    with pytest.raises(ValueError, match="hidden"):
        PolicyConfig(hidden=0)
    with pytest.raises(ValueError, match="unknown PolicyConfig"):
        PolicyConfig.from_dict({"hidden": 8, "layers": 3})


# ---------------------------------------------------------------------------- simulator
def _workload(n: int = 120):
    cfg = WorkloadConfig(kind="gpu", num_jobs=n, seed=2, mean_interarrival_s=120)
    spec = default_cluster(cfg)
    return spec, replay_records(generate(cfg), spec)


def test_torch_policy_runs_in_the_simulator_and_repeats():
    spec, recs = _workload()
    results = []
    for _ in range(2):
        pol = TorchPolicy(net_for_tests(seed=5))
        results.append(simulate(spec, recs, pol, SchedulerOptions(backfill=True),
                                EngineOptions(keep_placements=True)))
    a, b = results
    assert (a.start >= 0).all() and a.policy == "torch"
    assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
    assert a.placements == b.placements
    # every job got as many distinct nodes as it asked for
    for i in range(a.jobs.n):
        assert len(set(a.placements[i])) == int(a.jobs.nodes[i])


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_a_net_ordering_by_the_amount_prior_alone_replays_as_lrf(kind):
    """The job head's output zeroed and amount_prior set, the net is the lrf baseline:
    the same starts and ends in a replay with backfill (equal amounts in arrival order)."""
    from trainer.sim.policies import Lrf

    cfg = WorkloadConfig(kind=kind, num_jobs=150, seed=3, mean_interarrival_s=90)
    spec = default_cluster(cfg)
    recs = replay_records(generate(cfg), spec)
    net = net_for_tests(hidden=8, seed=2, est_prior=0.0, area_prior=0.0)
    with torch.no_grad():
        net.amount_prior.fill_(20.0)
        net.job_head.out.weight.zero_()
        net.job_head.out.bias.fill_(1e4)  # far above hold: it never holds
    from trainer.evaluate import FixedPlacement

    opts = SchedulerOptions(backfill=True)
    # the scheduler's placement, as lrf's (the net's placement head is another matter)
    pol = FixedPlacement(TorchPolicy(net), opts.placement)
    got = simulate(spec, recs, pol, opts, EngineOptions())
    want = simulate(spec, recs, Lrf(), opts, EngineOptions())
    assert np.array_equal(got.start, want.start) and np.array_equal(got.end, want.end)


def test_torch_policy_rescores_the_queue_every_helper_cycle():
    # the helper ranks every pending job each cycle (its interval, 15 s by default):
    # a replay re-scores a learned policy that often, not every Slurm calc period
    from slurm_plugin.helper.config import HelperConfig
    from trainer.evaluate import EvalConfig, as_deployed
    from trainer.policy import HELPER_CYCLE
    from trainer.rl.config import TrainConfig

    # one default everywhere a learned policy replays: evaluate, tune-guard, RL validation
    assert HELPER_CYCLE == HelperConfig().interval == EvalConfig().rescore == (
        TrainConfig().rescore)
    spec, recs = _workload(200)
    calls = {}
    for period in (None, 300):
        pol = TorchPolicy(net_for_tests(seed=5), rescore_period=period)
        seen = []
        score = pol.score

        def counting(jobs, idx, ctx, score=score, seen=seen):
            seen.append(len(idx))
            return score(jobs, idx, ctx)

        pol.score = counting  # type: ignore[method-assign]
        wrapped = as_deployed(pol, starvation_limit=86400.0)
        assert wrapped.rescore_period == pol.rescore_period  # the wrappers keep it
        simulate(spec, recs, wrapped, SchedulerOptions(priority_calc_period=300), EngineOptions())
        calls[period] = len(seen)
    assert pol.rescore_period == 300 and TorchPolicy(net_for_tests()).rescore_period == 15
    assert calls[None] > 1.5 * calls[300]


def test_torch_policy_scores_follow_the_net():
    spec, recs = _workload(30)
    from trainer.sim.policies import ScoreContext
    from trainer.sim.state import Cluster, NodeState, build_jobs

    cl = Cluster.from_spec(spec)
    jobs = build_jobs(recs, cl)
    pol = TorchPolicy(net_for_tests(seed=1))
    idx = np.arange(10)
    st = NodeState(cl)
    now = int(jobs.eligible[9])
    ctx = ScoreContext(now, cl, st, np.zeros(1), np.random.default_rng(0))
    scores = pol.score(jobs, idx, ctx)
    assert scores.shape == (10,) and np.isfinite(scores).all()
    from trainer.sim.observe import observe

    obs = observe(jobs, idx, cl, st, now, pol.history, pol.norm)
    t = list(obs_tensors(obs))
    t[1] = torch.ones(10, dtype=torch.bool)  # the order ignores feasibility
    with torch.no_grad():
        ref = net_for_tests(seed=1)(*t)[0][:-1].numpy()
    np.testing.assert_allclose(scores, ref, atol=ATOL)
    # placement returns usable nodes only
    from trainer.sim.placement import Request

    usable = np.zeros(cl.num_nodes, dtype=bool)
    usable[[1, 2, 5, 6, 7]] = True
    nodes, leaves = pol.place(cl, st, usable, Request(2, 4, 1, False))
    assert len(nodes) == 2 and usable[nodes].all()
    assert leaves == len(np.unique(cl.leaf_of[nodes]))
    assert pol.place(cl, st, np.zeros(cl.num_nodes, dtype=bool), Request(1, 1, 1, False)) \
        is None


def test_torch_policy_without_rank_all_puts_the_jobs_that_fit_first():
    spec, recs = _workload(40)
    from trainer.policy import FITS_FIRST
    from trainer.sim.observe import observe
    from trainer.sim.policies import Multifactor, ScoreContext
    from trainer.sim.state import Cluster, NodeState, build_jobs

    cl = Cluster.from_spec(spec)
    jobs = build_jobs(recs, cl)
    st = NodeState(cl)
    now = int(jobs.eligible[29])
    st.allocate_whole(np.arange(1, cl.num_nodes), now + 3600, now + 1800)
    st.allocate_shared(np.array([0]), 32, 6, 0, now + 3600, now + 1800)  # 2 GPUs free
    idx = np.arange(30)
    ctx = ScoreContext(now, cl, st, np.zeros(len(jobs.users)), np.random.default_rng(0))
    pol = TorchPolicy(net_for_tests(seed=1), rank_all=False)
    scores = pol.score(jobs, idx, ctx)
    obs = observe(jobs, idx, cl, st, now, pol.history, pol.norm)
    fits = obs.job_mask
    assert 0 < fits.sum() < fits.size
    assert scores[fits].min() > scores[~fits].max()
    # the jobs that fit: the net's scores with the true mask (its context as in training)
    with torch.no_grad():
        ref = net_for_tests(seed=1)(*obs_tensors(obs))[0][:-1].numpy()
    np.testing.assert_allclose(scores[fits] - FITS_FIRST, ref[fits], atol=1e-5)
    # the others: Slurm's multifactor order
    np.testing.assert_array_equal(scores[~fits], Multifactor().score(jobs, idx, ctx)[~fits])
    raw = TorchPolicy(net_for_tests(seed=1)).score(jobs, idx, ctx)
    assert not np.allclose(raw[fits], ref[fits], atol=1e-4)  # all-true mask: other context


# ---------------------------------------------------------------------------- ONNX
def test_forward_exports_to_onnx_with_dynamic_axes(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import warnings

    net = net_for_tests()
    obs, nr = make_obs(6, 12, 3)
    names = ["jobs", "job_mask", "nodes", "node_leaf", "globals", "cand_sets", "cand_mask",
             "place_job"]
    dyn = {"jobs": {0: "J"}, "job_mask": {0: "J"}, "nodes": {0: "N"}, "node_leaf": {0: "N"},
           "cand_sets": {0: "K", 1: "N"}, "cand_mask": {0: "K"}, "job_logits": {0: "J1"},
           "place_logits": {0: "K"}}
    path = tmp_path / "p.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, obs_tensors(obs, candidates(nr, 1, 1, 0), 1), str(path),
                          input_names=names, output_names=["job_logits", "place_logits",
                                                           "value"],
                          dynamic_axes=dyn, dynamo=False, opset_version=17)
    sess = ort.InferenceSession(str(path))
    for j, n, leaves in [(40, 50, 9), (0, 1, 1), (3, 20, 5)]:
        o, r = make_obs(j, n, leaves, j)
        args = obs_tensors(o, candidates(r, 1, 1, 0) if n > 1 else None, 0 if j else None)
        got = sess.run(None, {k: v.numpy() for k, v in zip(names, args, strict=True)})
        with torch.no_grad():
            want = net(*args)
        for x, y in zip(got, want, strict=True):
            np.testing.assert_allclose(x, y.numpy(), atol=ATOL)


# ---------------------------------------------------------------------------- repeated node rows
def _big_batch(n_nodes: int = 6000, states: int = 3, sets: bool = True):
    """States of a big whole-node-like cluster: most node rows and leaves repeat.

    Every node of a leaf gets the same one of 12 rows (idle, or one job's nodes).
    """
    items = []
    for k in range(states):
        obs, nr = make_obs(20, n_nodes, n_nodes // 4, seed=k)
        rows = make_obs(20, 12, 3, seed=100 + k)[0].nodes
        pattern = np.random.default_rng(k).integers(0, 12, n_nodes // 4)
        obs = dataclasses.replace(obs, nodes=rows[pattern[obs.node_leaf]])
        items.append((obs, candidates(nr, 1, 1, 0), 1) if sets else (obs, None, None))
    return batch_tensors(items)


def _encoded_rows(net, batch):
    """forward_batch's outputs, and the rows its node and leaf encoders saw."""
    seen = {"node": 0, "leaf": 0}

    def hook(name):
        def f(m, i, o):
            seen[name] += i[0].shape[:-1].numel()
        return f

    hs = [net.node_enc.register_forward_hook(hook("node")),
          net.leaf_enc.register_forward_hook(hook("leaf"))]
    try:
        out = net.forward_batch(batch)
    finally:
        for h in hs:
            h.remove()
    return out, seen


@pytest.mark.parametrize("sets", [True, False])
def test_repeated_node_rows_and_leaves_are_encoded_once_same_outputs_and_gradients(
        monkeypatch, sets):
    net = net_for_tests(hidden=24).train()
    batch = _big_batch(sets=sets)
    assert bool(batch.cand_mask.any()) == sets
    rows = batch.nodes.shape[0] * batch.nodes.shape[1]
    slots = batch.nodes.shape[0] * (int(batch.node_leaf.max()) + 1)
    assert slots >= policy_mod._DEDUP_ROWS
    (jl, pl, v), seen = _encoded_rows(net, batch)
    assert seen["node"] < rows / 100 and seen["leaf"] < slots / 10  # each distinct one once
    loss = jl.clamp(min=-50).sum() + pl.clamp(min=-50).sum() + v.sum()
    grads = torch.autograd.grad(loss, list(net.parameters()), allow_unused=True)
    monkeypatch.setattr(policy_mod, "_DEDUP_ROWS", 10**12)  # every node and leaf encoded
    (jl2, pl2, v2), seen2 = _encoded_rows(net, batch)
    assert seen2 == {"node": rows, "leaf": slots}
    loss2 = jl2.clamp(min=-50).sum() + pl2.clamp(min=-50).sum() + v2.sum()
    grads2 = torch.autograd.grad(loss2, list(net.parameters()), allow_unused=True)
    # (without node sets the placement head gets no gradient: zero or unused alike)
    params = list(net.parameters())
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]
    grads2 = [torch.zeros_like(p) if g is None else g
              for g, p in zip(grads2, params, strict=True)]
    assert torch.equal(pl == MASKED, ~batch.cand_mask)
    for a, b in ((jl, jl2), (pl, pl2), (v, v2), *zip(grads, grads2, strict=True)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4,
                                   atol=1e-4)


def test_rows_sharing_a_key_are_all_encoded(monkeypatch):
    net = net_for_tests(hidden=8)
    batch = _big_batch(states=2)
    with torch.no_grad():
        monkeypatch.setattr(policy_mod, "_DEDUP_ROWS", 10**12)
        want = net.forward_batch(batch)  # every row encoded
        monkeypatch.setattr(policy_mod, "_DEDUP_ROWS", 4096)
        monkeypatch.setattr(policy_mod, "_row_key_weights",
                            lambda f: torch.zeros(f, dtype=torch.float64))  # one key for all
        got, seen = _encoded_rows(net, batch)
    assert seen["node"] == batch.nodes.shape[0] * batch.nodes.shape[1]
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_groups_need_equal_rows_under_one_key():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).repeat(3000, 1)
    first, inv = policy_mod._groups(torch.arange(6000) % 2, x)
    assert first.tolist() == [0, 1] and torch.equal(x[first][inv], x)
    assert policy_mod._groups(torch.zeros(6000, dtype=torch.int64), x) is None  # differ
    assert policy_mod._groups(torch.arange(6000), x) is None  # nothing repeats
    assert policy_mod._row_groups(x) is not None
    assert policy_mod._row_groups(x.to("meta")) is None  # CPU only
    assert policy_mod._row_groups(x.clone().requires_grad_()) is None  # inputs only


def test_leaf_groups_check_the_rows_exactly(monkeypatch):
    # slots 0..999: row s % 3 twice; slots 1000..2999: rows 0 and 1 once each
    ps = torch.cat((torch.arange(1000), torch.arange(1000, 3000).repeat_interleave(2)))
    pu = torch.cat((torch.arange(1000) % 3, torch.tensor([0, 1]).repeat(2000)))
    pc = torch.cat((torch.full((1000,), 2), torch.ones(4000, dtype=torch.int64)))
    monkeypatch.setattr(policy_mod, "_DEDUP_ROWS", 1000)
    group, rep, rep_pair = policy_mod._leaf_groups(ps, pu, pc, 3000, 3)
    assert group.unique().numel() == 4
    assert sorted(rep.tolist()) == [0, 1, 2, 1000]
    assert int(rep_pair.numel()) == 3 + 2
    assert torch.equal(group[:6], group[3:9]) and len(set(group[:3].tolist())) == 3
    # every slot keyed alike: the exact checks refuse to merge different rows
    monkeypatch.setattr(torch, "randint",
                        lambda lo, hi, size, generator=None: torch.zeros(size, dtype=torch.int64))
    assert policy_mod._leaf_groups(ps, pu, pc, 3000, 3) is None  # pair counts differ
    one = torch.arange(3000)
    assert policy_mod._leaf_groups(one, one % 3, torch.full((3000,), 2), 3000, 3) is None


def test_set_rows_equals_bmm_over_every_node_with_gradients():
    g = torch.Generator().manual_seed(0)
    bsz, kmax, n, u, h = 3, 4, 50, 7, 5
    inv = torch.randint(0, u, (bsz * n,), generator=g)
    c = (torch.rand(bsz, kmax, n, generator=g) < 0.3).to(torch.float32)
    c[0, 1] *= 2.5  # any weights, not only 0/1
    c[2, 3] = 0.0  # an empty set sums to zero
    rows = torch.randn(u, h, generator=g, requires_grad=True)
    got = policy_mod._set_rows(c, inv, rows)
    want = torch.bmm(c, rows[inv].reshape(bsz, n, h))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-5)
    assert not got[2, 3].any()
    w = torch.randn(bsz, kmax, h, generator=g)
    (ga,) = torch.autograd.grad((got * w).sum(), rows)
    (gb,) = torch.autograd.grad((want * w).sum(), rows)
    np.testing.assert_allclose(ga.numpy(), gb.numpy(), atol=1e-5)


def test_node_sets_of_a_big_cluster_are_summed_over_distinct_rows(monkeypatch):
    net = net_for_tests(hidden=16)
    batch = _big_batch(n_nodes=2400, states=2)
    assert batch.nodes.shape[1] >= policy_mod._SET_ROWS_NODES and bool(batch.cand_mask.any())
    calls = []
    real = policy_mod._set_rows
    monkeypatch.setattr(policy_mod, "_set_rows", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        got = net.forward_batch(batch)
        assert calls == [1]
        monkeypatch.setattr(policy_mod, "_SET_ROWS_NODES", 10**9)  # bmm over [B, N, H]
        want = net.forward_batch(batch)
    assert calls == [1]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_equal_estimated_areas_tie_exactly():
    """1 h x 8 CPUs and 2 h x 4 CPUs tie in seaf's arithmetic; the net's area feature,
    read back from float32 features, ties them exactly too (then arrival order decides),
    while an area 0.1% larger still scores apart."""
    j = 4
    jr = JobsRaw.build(
        job_id=np.arange(j) + 1, eligible=np.zeros(j), limit=np.full(j, 86_400),
        nodes=np.ones(j), cpus=np.array([8, 4, 2, 8]), gpus=np.zeros(j), mem=np.zeros(j),
        exclusive=np.zeros(j, dtype=bool), user=np.zeros(j),
        est_run=np.array([3600.0, 7200.0, 14_400.0, 3603.6]), usage_share=np.zeros(j),
        locality=np.zeros(j))
    nr = NodesRaw.build(
        n_leaves=1, cap_c=np.full(2, 16), cap_g=np.zeros(2), cap_m=np.zeros(2),
        free_c=np.full(2, 16), free_g=np.zeros(2), free_m=np.zeros(2),
        idle=np.ones(2, dtype=bool), up=np.ones(2, dtype=bool), remaining=np.zeros(2),
        leaf=np.zeros(2, dtype=np.int64))
    obs = featurize(1_000, jr, nr)
    area = policy_mod.log_est_area(torch.from_numpy(obs.jobs), torch.tensor(False)).numpy()
    assert area[0] == area[1] == area[2] and area[3] > area[0]
    np.testing.assert_allclose(area[0], np.log1p(8.0), atol=1e-5)


def test_gpu_cluster_reads_real_node_rows_only():
    """Whether a cluster has GPUs: any real node row with has_gpus set. A batch's padding
    rows do not count, and a table with no rows has none (no error on an empty max)."""
    col = policy_mod.NODE_FEATURES.index("has_gpus")
    nodes = torch.zeros(2, 3, len(policy_mod.NODE_FEATURES))
    nodes[0, 1, col] = 1.0  # a GPU node in the first observation
    nodes[1, 2, col] = 1.0  # ... and in a padding row of the second
    valid = torch.tensor([[True, True, False], [True, True, False]])
    assert policy_mod.gpu_cluster(nodes, valid).tolist() == [True, False]
    assert policy_mod.gpu_cluster(nodes).tolist() == [True, True]
    assert policy_mod.gpu_cluster(nodes[0]).item() is True
    assert policy_mod.gpu_cluster(nodes[0, :0]).item() is False
