"""slurm_plugin.model and slurm_plugin.scorer on tiny models exported with torch.

Each refusal of load_model is provoked for real (a changed byte, a bad card, a
world-writable file...); the scorer's outputs are checked against the tiny policy's
formula computed by hand in numpy.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from slurm_plugin import features as F  # noqa: E402
from slurm_plugin import model as M  # noqa: E402
from slurm_plugin.placement import candidates  # noqa: E402
from slurm_plugin.scorer import MASKED, OnnxScorer, ScoreError  # noqa: E402
from tests import onnx_fixture as X  # noqa: E402

warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return X.build_model(tmp_path_factory.mktemp("m"))


@pytest.fixture()
def model_copy(built, tmp_path) -> Path:
    p = tmp_path / "model.onnx"
    p.write_bytes(built.read_bytes())
    X.write_card(p)
    p.chmod(0o644)
    M.card_path(p).chmod(0o644)
    return p


def _card(p: Path) -> dict:
    return json.loads(M.card_path(p).read_text())


def _set_card(p: Path, **kw) -> None:
    card = _card(p)
    card.update(kw)
    M.card_path(p).write_text(json.dumps(card))


def test_a_good_model_loads(model_copy):
    m = M.load_model(model_copy)
    assert m.sha256 == _card(model_copy)["sha256"] and m.opset == 17
    assert set(m.input_names) == set(M.INPUTS)
    assert m.metadata["rlsched.format"] == M.MODEL_FORMAT
    assert m.created == 1793491200.0
    assert M.load_model(model_copy, pin=m.sha256.upper()).sha256 == m.sha256


def test_header_reader_matches_onnx(model_copy):
    opsets, meta = M.read_onnx_header(model_copy.read_bytes())
    proto = onnx.load(str(model_copy))
    assert opsets == {o.domain: o.version for o in proto.opset_import}
    assert meta == {p.key: p.value for p in proto.metadata_props}
    with pytest.raises(ValueError):
        M.read_onnx_header(b"\x0a\xff\xff\xff")


@pytest.mark.parametrize("break_it, match", [
    (lambda p: M.card_path(p).unlink(), "model card .* not found"),
    (lambda p: p.unlink(), "model file .* not found"),
    (lambda p: os.chmod(p, 0o666), "world-writable"),
    (lambda p: os.chmod(M.card_path(p), 0o646), "world-writable"),
    (lambda p: p.write_bytes(p.read_bytes()[:-1] + b"\x00"), "sha256 .* the card says"),
    (lambda p: M.card_path(p).write_text("{not json"), "not JSON"),
    (lambda p: _set_card(p, format="other/1"), "format"),
    (lambda p: _set_card(p, opset="17"), "'opset' has the wrong type"),
    (lambda p: _set_card(p, schema_version=F.SCHEMA_VERSION + 1), "schema version"),
    (lambda p: _set_card(p, schema_hash="0" * 64), "schema hash"),
    (lambda p: _set_card(p, normalisation={"time_scale": 60.0}), "schema hash"),
    (lambda p: _set_card(p, normalisation={"colour": 1}), "unknown normalisation keys"),
    (lambda p: _set_card(p, opset=16), "opset 17, its card says 16"),
    (lambda p: _set_card(p, inputs=["jobs"]), "other inputs/outputs"),
])
def test_refusals_say_why_and_what_to_do(model_copy, break_it, match):
    break_it(model_copy)
    with pytest.raises(M.ModelError, match=match) as err:
        M.load_model(model_copy)
    assert err.value.action  # there is always something to do


def test_pinned_hash_must_match(model_copy):
    with pytest.raises(M.ModelError, match="configuration pins") as err:
        M.load_model(model_copy, pin="f" * 64)
    assert "model_sha256" in err.value.action


def test_a_corrupt_file_with_a_matching_card_is_refused(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(b"\x08\x07\x12\x04junk" + os.urandom(64))
    X.write_card(p)
    with pytest.raises(M.ModelError):
        M.load_model(p)


def test_opset_newer_than_onnxruntime_is_refused(model_copy, monkeypatch):
    monkeypatch.setattr(M, "max_supported_opset", lambda: 16)
    with pytest.raises(M.ModelError, match="opset 17 is not supported.*supports 7..16"):
        M.load_model(model_copy)


def test_metadata_must_agree_with_the_card(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = X.export(tmp_path / "model.onnx", X.tiny_policy(X.job_weights(log_limit=-1.0)),
                     metadata={"rlsched.format": "someone-else/2"})
    X.write_card(p)
    with pytest.raises(M.ModelError, match="rlsched.format"):
        M.load_model(p)


def test_other_input_names_are_refused(tmp_path):
    class Renamed(torch.nn.Module):
        def forward(self, jobs, extra):
            s = (jobs.sum(-1) + extra.sum())
            return torch.cat([s, s[:1]]), s, s.sum()

    p = tmp_path / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Renamed(), (torch.zeros(2, 14), torch.zeros(3)), str(p),
                          input_names=["jobs", "extra"], output_names=X.OUTPUT_NAMES,
                          opset_version=17, dynamo=False)
    m = onnx.load(str(p))
    for k, v in {"rlsched.format": "rlsched-model/1", "rlsched.schema_hash": F.schema_hash(),
                 "rlsched.schema_version": str(F.SCHEMA_VERSION)}.items():
        e = m.metadata_props.add()
        e.key, e.value = k, v
    onnx.save(m, str(p))
    X.write_card(p, inputs=["jobs", "extra"])
    with pytest.raises(M.ModelError, match="inputs the contract does not know.*extra"):
        M.load_model(p)


# ---------------------------------------------------------------------------- scorer
def _obs():
    jobs = F.JobsRaw.build(job_id=[1, 2, 3], eligible=[0, 10, 5], limit=[3600, 60, 7200],
                           nodes=[1, 2, 2], cpus=[4, 1, 1], gpus=[1, 0, 1], mem=[0, 0, 0],
                           exclusive=[False] * 3, user=[0, 1, 0], est_run=[1, 2, 3],
                           usage_share=[0] * 3, locality=[0] * 3)
    nodes = F.NodesRaw.build(cap_c=[8] * 6, cap_g=[4] * 6, cap_m=[0] * 6, free_c=[8] * 6,
                             free_g=[4, 4, 0, 4, 4, 4], free_m=[0] * 6, idle=[1] * 6,
                             up=[1] * 6, remaining=[0] * 6, leaf=[0, 0, 0, 1, 1, 2])
    return F.featurize(100, jobs, nodes), nodes


def test_scores_are_the_policy_formula(built):
    s = OnnxScorer(M.load_model(built))
    obs, _ = _obs()
    got = s.score(obs)
    want = -obs.jobs[:, F.JOB_FEATURES.index("log_limit")].astype(np.float64)
    assert got.shape == (4,)
    np.testing.assert_allclose(got[:3], want, rtol=1e-6)
    assert got[3] == pytest.approx(-50.0)
    masked = s.score(obs, job_mask=np.array([True, False, True]))
    assert masked[1] == pytest.approx(MASKED) and masked[0] == pytest.approx(got[0])


def test_place_prefers_one_leaf(built):
    s = OnnxScorer(M.load_model(built, threads=1))
    obs, nodes = _obs()
    # nodes with a free GPU: 2 in leaf 0, 2 in leaf 1, 1 in leaf 2
    c = candidates(nodes, 2, 1, 1, 0, False)
    k = s.place(obs, 1, c)
    assert c.leaves[k] == 1
    c3 = candidates(nodes, 3, 1, 1, 0, False)
    k3 = s.place(obs, 1, c3)
    assert c3.leaves[k3] == min(c3.leaves)
    with pytest.raises(ValueError, match="at least one candidate"):
        s.place(obs, 1, candidates(nodes, 99, 1, 1, 0, False))
    with pytest.raises(ValueError, match="job row"):
        s.place(obs, 7, c)


def test_scorer_reports_model_failures(built):
    s = OnnxScorer(M.load_model(built))
    obs, _ = _obs()
    with pytest.raises(ScoreError, match="job_mask"):
        s.score(obs, job_mask=np.ones(5, dtype=bool))
    bad = F.Observation(obs.jobs[:, :5], obs.job_mask, obs.job_ids, obs.nodes, obs.node_leaf,
                        obs.n_leaves, obs.globals, obs.now)
    with pytest.raises(ScoreError, match="jobs table"):
        s.score(bad)
