"""The exporter: ONNX round trip, metadata and card, verify's checks, parity, OnnxPolicy."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium")

from click.testing import CliRunner  # noqa: E402

from exporter import parity  # noqa: E402
from exporter.contract import CARD_FIELDS, INPUTS, OUTPUTS, card_path  # noqa: E402
from exporter.onnx_export import (  # noqa: E402
    OPSET,
    ExportConfig,
    ExportError,
    cluster_summary,
    export,
    resolve_cluster,
)
from exporter.policy import OnnxPolicy  # noqa: E402
from exporter.synthetic import edge_cases, synthetic_case  # noqa: E402
from exporter.verify import session_for, smoke  # noqa: E402
from slurm_plugin import cli  # noqa: E402
from slurm_plugin.cluster import ClusterSpec  # noqa: E402
from slurm_plugin.features import (  # noqa: E402
    NODE_FEATURES,
    SCHEMA_VERSION,
    Normalisation,
    schema_hash,
)
from slurm_plugin.model import ModelError, load_model  # noqa: E402
from trainer.policy import PolicyConfig, PolicyNet, TorchPolicy, save_checkpoint  # noqa: E402
from trainer.sim.engine import EngineOptions, simulate  # noqa: E402
from trainer.sim.slurm import SchedulerOptions  # noqa: E402
from trainer.sim.workload import (  # noqa: E402
    WorkloadConfig,
    default_cluster,
    generate,
    replay_records,
)

MASKED = -1e9
TRAINING = {"algorithm": "ppo", "config": {"lr": 3e-4, "epochs": 4},
            "window": {"since": "2024-01-01T00:00:00Z", "until": "2024-02-01T00:00:00Z"}}
EVALUATION = {"slurm": {"bsld_mean": 12.5}, "policy": {"bsld_mean": 9.25}}


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def make_net(seed: int = 0, hidden: int = 16) -> PolicyNet:
    """A small net with every prior nonzero, so the parity checks cover their terms too
    (``log_est_area`` in float64, ``log_amount``, and whether the cluster has GPUs)."""
    torch.manual_seed(seed)
    net = PolicyNet.from_config(PolicyConfig(hidden=hidden)).eval()
    with torch.no_grad():
        net.est_prior.fill_(0.7)
        net.area_prior.fill_(0.3)
        net.amount_prior.fill_(0.2)
    return net


def spec10() -> ClusterSpec:
    # 10 nodes in leaves of 4: leaf1 (4), leaf2 (4), leaf3 (2) under a spine
    return ClusterSpec.synthetic("demo", 10, gpus_per_node=8, nodes_per_leaf=4)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    ck = d / "policy.pt"
    save_checkpoint(ck, make_net(), extra={"cluster": spec10().to_dict(), "training": TRAINING})
    res = export(ck, d / "model.onnx", evaluation=EVALUATION)
    return ck, res


def copy_model(res, dest):
    out = dest / "model.onnx"
    shutil.copyfile(res.path, out)
    shutil.copyfile(res.card_path, card_path(out))
    return out


# ---------------------------------------------------------------------------- round trip
def test_export_round_trip(exported):
    ck, res = exported
    assert res.path.is_file() and res.card_path == card_path(res.path)
    assert res.card_path.name == "model.onnx.card.json"
    for f in (res.path, res.card_path):
        assert not f.stat().st_mode & stat.S_IWOTH
    model = onnx.load(str(res.path))
    onnx.checker.check_model(model)
    assert {o.domain: o.version for o in model.opset_import}[""] == OPSET
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}
    assert dims["jobs"][0] == "J" and dims["nodes"][0] == "N"
    assert dims["cand_sets"] == ["K", "N"] and dims["place_job"] == []
    # parity ran on >= 1,000 simulator observations plus every edge case
    assert res.parity.ok and res.parity.recorded >= 1000
    assert res.parity.cases == res.parity.recorded + len(edge_cases())
    # the file computes what the net computes, at a size it was not traced at
    net = make_net()
    case = synthetic_case("x", 37, 21, 5, seed=3)
    m = load_model(res.path)
    got = m.session.run(list(OUTPUTS), case.feed(frozenset(m.input_names)))
    ref = parity.torch_reference(net, case)
    for g, r in zip(got, ref, strict=True):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, atol=1e-5, rtol=0)


def test_metadata_and_card(exported):
    ck, res = exported
    data = res.path.read_bytes()
    card = json.loads(res.card_path.read_text())
    assert set(CARD_FIELDS) <= set(card)
    assert card["format"] == "rlsched-model-card/1"
    assert card["sha256"] == hashlib.sha256(data).hexdigest()
    assert card["opset"] == OPSET
    assert card["schema_version"] == SCHEMA_VERSION and card["schema_hash"] == schema_hash()
    assert card["normalisation"] == asdict(Normalisation())
    assert card["inputs"] == ["jobs", "job_mask", "nodes", "node_leaf", "globals",
                              "cand_sets", "cand_mask", "place_job"]
    assert set(card["inputs"]) <= set(INPUTS) and card["outputs"] == list(OUTPUTS)
    assert card["cluster"] == {"name": "demo", "nodes": 10, "gpus": 80, "leaves": 3,
                               "switch_tree_hash": spec10().switch_tree_hash()}
    assert {k: card["training"][k] for k in TRAINING} == TRAINING
    assert card["training"]["net"]["hidden"] == 16
    assert card["evaluation"] == EVALUATION
    assert card["checkpoint"]["sha256"] == hashlib.sha256(ck.read_bytes()).hexdigest()
    assert card["parity"]["recorded"] >= 1000 and card["parity"]["failures"] == 0
    assert card["place_trained"] is True  # (the checkpoint does not say: as before)
    created = datetime.fromisoformat(card["created"].replace("Z", "+00:00"))
    assert created.utcoffset().total_seconds() == 0

    meta = {p.key: p.value for p in onnx.load(str(res.path)).metadata_props}
    assert meta["rlsched.format"] == "rlsched-model/1"
    assert meta["rlsched.schema_version"] == str(SCHEMA_VERSION)
    assert meta["rlsched.schema_hash"] == schema_hash()
    assert json.loads(meta["rlsched.normalisation"]) == asdict(Normalisation())
    assert json.loads(meta["rlsched.cluster"]) == card["cluster"]
    assert json.loads(meta["rlsched.training"]) == card["training"]
    assert meta["rlsched.version"] == card["rlsched_version"]
    assert meta["rlsched.created"] == card["created"]


def test_load_model_accepts_the_export(exported):
    _, res = exported
    m = load_model(res.path)
    assert m.sha256 == res.card["sha256"] and m.opset == OPSET
    assert sorted(m.input_names) == sorted(res.card["inputs"])
    assert m.norm == Normalisation()
    assert smoke(m.session).ok


# ---------------------------------------------------------------------------- verify
def test_verify_detects_one_changed_byte(exported, tmp_path):
    out = copy_model(exported[1], tmp_path)
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0x01
    out.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="sha256"):
        load_model(out)


def _edit_card(out, **changes):
    cp = card_path(out)
    card = json.loads(cp.read_text())
    card.update(changes)
    cp.write_text(json.dumps(card))


def test_verify_detects_schema_mismatch(exported, tmp_path):
    out = copy_model(exported[1], tmp_path)
    _edit_card(out, schema_hash="0" * 64)
    with pytest.raises(ModelError, match="schema hash"):
        load_model(out)
    out = copy_model(exported[1], tmp_path)
    _edit_card(out, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(ModelError, match=f"schema version {SCHEMA_VERSION + 1}"):
        load_model(out)
    # other normalisation constants than the ones hashed: a different schema
    out = copy_model(exported[1], tmp_path)
    _edit_card(out, normalisation={**asdict(Normalisation()), "time_scale": 60.0})
    with pytest.raises(ModelError, match="schema hash"):
        load_model(out)


def test_verify_other_mismatches(exported, tmp_path):
    res = exported[1]
    cases = [
        ({"opset": OPSET - 1}, "opset"),
        ({"inputs": ["jobs"]}, "inputs/outputs"),
        ({"format": "something/2"}, "format"),
    ]
    for changes, msg in cases:
        out = copy_model(res, tmp_path)
        _edit_card(out, **changes)
        with pytest.raises(ModelError, match=msg):
            load_model(out)
    out = copy_model(res, tmp_path)
    with pytest.raises(ModelError, match="pin"):
        load_model(out, pin="ab" * 32)
    os.chmod(out, 0o666)
    with pytest.raises(ModelError, match="world-writable"):
        load_model(out)
    os.chmod(out, 0o644)
    card_path(out).unlink()
    with pytest.raises(ModelError, match="not found"):
        load_model(out)


def test_smoke_catches_a_model_that_ignores_masks(tmp_path):
    class NoMask(torch.nn.Module):
        def forward(self, jobs, job_mask, cand_sets, cand_mask):
            s = jobs.sum(1)
            return (torch.cat((s, s.sum().reshape(1))), cand_sets.float().sum(1),
                    jobs.sum())

    f = tmp_path / "bad.onnx"
    args = (torch.rand(3, 14), torch.tensor([True, False, True]),
            torch.tensor([[True, False], [False, True]]), torch.tensor([True, True]))
    with pytest.warns(DeprecationWarning):
        torch.onnx.export(NoMask(), args, str(f), dynamo=False, opset_version=OPSET,
                          input_names=["jobs", "job_mask", "cand_sets", "cand_mask"],
                          output_names=list(OUTPUTS),
                          dynamic_axes={"jobs": {0: "J"}, "job_mask": {0: "J"},
                                        "cand_sets": {0: "K", 1: "N"}, "cand_mask": {0: "K"}})
    res = smoke(session_for(f))
    assert not res.ok
    assert any("all jobs masked: a masked job does not score -1e9" == p for p in res.problems)
    assert any("all candidates masked: a masked candidate" in p for p in res.problems)


# ---------------------------------------------------------------------------- parity
def test_edge_cases_are_what_they_say():
    cases = {c.name: c for c in edge_cases()}
    assert cases["0 pending jobs"].obs.n_jobs == 0 and cases["0 pending jobs"].n_cands == 0
    assert cases["1 pending job"].obs.n_jobs == 1 and cases["1 pending job"].n_cands >= 1
    big = cases["10,000 pending jobs, 1,000 nodes"]
    assert (big.obs.n_jobs, big.obs.n_nodes) == (10_000, 1000) and big.n_cands >= 1
    assert 0 < big.obs.job_mask.sum() < big.obs.n_jobs
    masked = cases["all jobs masked"]
    assert masked.obs.n_jobs > 0 and not masked.obs.job_mask.any()
    cm = cases["all candidates masked"]
    assert cm.n_cands > 0 and not cm.cand_mask.any()
    one = cases["one node"]
    assert one.obs.n_nodes == 1 and one.obs.n_jobs > 0 and one.n_cands == 1
    cpu = cases["no GPUs"]
    col = NODE_FEATURES.index("has_gpus")
    assert cpu.obs.n_jobs > 0 and cpu.n_cands >= 1 and not cpu.obs.nodes[:, col].any()
    assert all(c.obs.nodes[:, col].all() for k, c in cases.items() if k != "no GPUs")
    # deterministic for a seed
    again = {c.name: c for c in edge_cases()}
    assert all(np.array_equal(cases[k].obs.jobs, again[k].obs.jobs) for k in cases)


def test_parity_on_edge_cases(exported):
    _, res = exported
    net = make_net()
    session = load_model(res.path).session
    rep = parity.check_parity(net, session, edge_cases(seed=5))
    assert rep.ok, rep.message()
    assert rep.cases == len(edge_cases()) and rep.max_diff["job_logits"] <= 1e-5
    # every job masked: only hold is left, and it wins
    case = {c.name: c for c in edge_cases(seed=5)}["all jobs masked"]
    jl = session.run(["job_logits"], case.feed(set(res.card["inputs"])))[0]
    j = case.obs.n_jobs
    assert (jl[:j] == MASKED).all() and np.isfinite(jl[j]) and int(np.argmax(jl)) == j


def test_parity_failure_writes_nothing(exported, tmp_path, monkeypatch):
    ck, res = exported
    real = parity.torch_reference

    def noisy(net, case):
        jl, pl, v = real(net, case)
        jl = np.where(jl > MASKED / 2, jl + 1e-3, jl).astype(np.float32)
        return jl, pl, v

    monkeypatch.setattr(parity, "torch_reference", noisy)
    out = tmp_path / "model.onnx"
    cases = edge_cases()
    with pytest.raises(parity.ParityError, match="parity FAILED") as err:
        export(ck, out, cases=cases)
    assert "job_logits: max diff 1.00e-03" in str(err.value)
    assert not err.value.report.ok
    assert sorted(os.listdir(tmp_path)) == []  # no model, no card, no temporary file
    # a model already there stays as it was
    prev = copy_model(res, tmp_path)
    before = prev.read_bytes(), card_path(prev).read_bytes()
    with pytest.raises(parity.ParityError):
        export(ck, prev, cases=cases)
    assert (prev.read_bytes(), card_path(prev).read_bytes()) == before
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "model.onnx.card.json"]


def test_parity_observations_are_recorded_and_deterministic():
    a = parity.record_observations(40, seed=3)
    b = parity.record_observations(40, seed=3)
    assert len(a) == 40 and all(c.name.startswith(parity.SIM_PREFIX) for c in a)
    assert any(c.n_cands > 0 for c in a) and any(c.n_cands == 0 for c in a)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.obs.jobs, y.obs.jobs)
        assert np.array_equal(x.cand_sets, y.cand_sets) and x.place_job == y.place_job


# ---------------------------------------------------------------------------- cluster
def test_resolve_cluster():
    spec = spec10()
    summary = cluster_summary(spec)
    assert summary == {"name": "demo", "nodes": 10, "gpus": 80, "leaves": 3,
                       "switch_tree_hash": spec.switch_tree_hash()}
    assert resolve_cluster({"cluster": spec.to_dict()}) == summary
    assert resolve_cluster({"cluster": dict(summary)}) == summary
    assert resolve_cluster({}, spec) == summary
    assert resolve_cluster({"cluster": spec.to_dict()}, spec) == summary
    with pytest.raises(ExportError, match="--cluster-spec"):
        resolve_cluster({})
    other = ClusterSpec.synthetic("other", 10, nodes_per_leaf=5)
    with pytest.raises(ExportError, match="trained for cluster 'demo'"):
        resolve_cluster({"cluster": spec.to_dict()}, other)
    with pytest.raises(ExportError, match="lacks"):
        resolve_cluster({"cluster": {"name": "x", "nodes": 3}})
    # no switch tree: one leaf
    flat = ClusterSpec.synthetic("flat", 3, nodes_per_leaf=4)
    assert cluster_summary(flat)["leaves"] == 1


def test_export_refuses_checkpoint_without_cluster(tmp_path):
    ck = tmp_path / "p.pt"
    save_checkpoint(ck, make_net(), extra={})
    with pytest.raises(ExportError, match="which cluster"):
        export(ck, tmp_path / "m.onnx", cases=edge_cases())
    assert not (tmp_path / "m.onnx").exists()
    res = export(ck, tmp_path / "m.onnx", cluster_spec=spec10(), cases=edge_cases(),
                 config=ExportConfig(observations=0))
    assert res.card["cluster"]["name"] == "demo"
    assert res.card["training"]["algorithm"] is None and res.card["evaluation"] == {}


# ---------------------------------------------------------------------------- CLI
def test_cli_export_and_verify(tmp_path):
    ck = tmp_path / "policy.pt"
    save_checkpoint(ck, make_net(seed=2), extra={"training": TRAINING})
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec10().to_dict()))
    eval_file = tmp_path / "eval.json"
    eval_file.write_text(json.dumps(EVALUATION))
    out = tmp_path / "model.onnx"
    runner = CliRunner()
    r = runner.invoke(cli.main, ["export", str(ck), "-o", str(out), "--cluster-spec",
                                 str(spec_file), "--eval", str(eval_file)])
    assert r.exit_code == 0, r.output
    assert "parity OK on 1011 inputs (1000 recorded" in r.output
    card = json.loads(card_path(out).read_text())
    assert card["evaluation"] == EVALUATION and card["cluster"]["nodes"] == 10

    r = runner.invoke(cli.main, ["verify", str(out)])
    assert r.exit_code == 0, r.output
    assert card["sha256"] in r.output and "OK: the helper may use this model" in r.output
    assert "10,000 pending jobs" in r.output and len(r.output.splitlines()) <= 30

    data = bytearray(out.read_bytes())
    data[100] ^= 0xFF
    out.write_bytes(bytes(data))
    r = runner.invoke(cli.main, ["verify", str(out)])
    assert r.exit_code != 0 and "sha256" in r.output and "FAILED" in r.output

    r = runner.invoke(cli.main, ["export", str(ck), "-o", str(tmp_path / "x.onnx")])
    assert r.exit_code != 0 and "--cluster-spec" in r.output


def test_verify_command_needs_no_torch():
    code = ("import sys, exporter.verify, exporter.cli, exporter.contract, exporter.synthetic\n"
            "heavy = sorted(k for k in sys.modules"
            " if k.split('.')[0] in ('torch', 'onnx', 'trainer', 'gymnasium'))\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- simulator
def test_onnx_policy_reproduces_torch_policy(exported):
    _, res = exported
    cfg = WorkloadConfig(kind="gpu", num_jobs=150, seed=4, mean_interarrival_s=90)
    spec = default_cluster(cfg)
    recs = replay_records(generate(cfg), spec)
    opts, eng = SchedulerOptions(backfill=True), EngineOptions(keep_placements=True)
    a = simulate(spec, recs, TorchPolicy(make_net()), opts, eng)
    b = simulate(spec, recs, OnnxPolicy.from_file(res.path), opts, eng)
    assert b.policy == "onnx"
    assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
    assert np.array_equal(a.leaves, b.leaves) and a.placements == b.placements
    # the net decides something: another net gives another schedule
    c = simulate(spec, recs, TorchPolicy(make_net(seed=9)), opts, eng)
    assert not np.array_equal(a.start, c.start)
    with pytest.raises(TypeError, match="from_file"):
        OnnxPolicy.from_checkpoint("policy.pt")


def test_smoke_feeds_a_graph_that_takes_n_leaves(tmp_path):
    # the helper's test fixture: another writer of the contract, whose graph takes n_leaves
    # (it fails on J = 0 or K = 0, which the contract allows: only non-empty cases here)
    import warnings

    from tests import onnx_fixture

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = onnx_fixture.build_model(tmp_path)
    m = load_model(path)
    assert "n_leaves" in m.input_names
    cases = [c for c in edge_cases() if c.obs.n_jobs and c.n_cands]
    assert len(cases) >= 4
    res = smoke(m.session, cases)
    assert res.ok, res.problems


def test_export_of_an_ensemble_computes_the_mean_of_its_nets(tmp_path):
    from trainer.policy import PolicyEnsemble

    a, b = make_net(0), make_net(1)
    ck = tmp_path / "ensemble.pt"
    save_checkpoint(ck, PolicyEnsemble([a, b]), extra={"cluster": spec10().to_dict(),
                                                       "training": TRAINING,
                                                       "ensemble": {"members": [10, 5]}})
    res = export(ck, tmp_path / "m.onnx", cases=edge_cases())
    assert res.parity.ok
    assert res.card["training"]["ensemble"] == {"nets": 2, "members": [10, 5]}
    m = load_model(res.path)  # (the helper's checks pass)
    case = synthetic_case("x", 23, 13, 4, seed=5)
    got = m.session.run(list(OUTPUTS), case.feed(frozenset(m.input_names)))
    ra, rb = parity.torch_reference(a, case), parity.torch_reference(b, case)
    for g, x, y in zip(got, ra, rb, strict=True):
        masked = x <= MASKED / 2
        np.testing.assert_array_equal(g <= MASKED / 2, masked)
        np.testing.assert_allclose(g[~masked], ((x + y) / 2)[~masked], atol=1e-5, rtol=0)
    # and it is not either net alone
    assert not np.allclose(got[0][~(ra[0] <= MASKED / 2)], ra[0][~(ra[0] <= MASKED / 2)])
