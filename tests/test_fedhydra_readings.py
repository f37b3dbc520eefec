"""The readings of FedHydra (docs/decisions/fedhydra.md): the pluggable teacher in the FedHydra and
DENSE servers, the ``"replay"`` regime, the opt-in robust u, the stratification diagnostics, the
teacher panel and the teacher × regime table's bookkeeping."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import pandas as pd
import pytest
import torch

from ofl_core.dense.server import DenseConfig, run_dense
from ofl_core.distill.combiners import oracle_weights
from ofl_core.distill.stratification import Stratification, guidance_capability
from ofl_core.experiment import ExperimentConfig, config_hash
from ofl_core.fedhydra.diagnostics import (
    loss_curves_frame,
    own_class_ratios,
    stratification_frame,
    teacher_panel,
)
from ofl_core.fedhydra.server import FedHydraConfig, adversarial_loss, run_fedhydra
from ofl_core.sections.teacher_regime import DENSE, PAPER, Variant, summarise, variants, verdict

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(epochs=2, steps_per_epoch=2, batch_size=16, kd_batch_size=16, nz=32, ngf=8,
            strat_steps=3, strat_batch_size=8)


def test_robust_u_log_ratio_and_from_losses() -> None:
    L = torch.tensor([[3.0, 2.0, 1.0], [1.0, 1e-6, 1e-3], [0.5, 0.5, 0.5]],
                     dtype=torch.float64)
    u = guidance_capability(L, rule="log_ratio")
    torch.testing.assert_close(u, torch.tensor([math.log(3.0), math.log(1e6), 0.0],
                                               dtype=torch.float64))
    torch.testing.assert_close(u, torch.log1p(guidance_capability(L)))  # log(1 + u_Eq.2)
    with pytest.raises(ValueError, match="rule"):
        guidance_capability(L, rule="rank")
    losses = L.view(3, 1, 3).expand(3, 2, 3)  # (m=3, C=2, T=3)
    s = Stratification.from_losses(losses, rule="log_ratio")
    assert s.U.shape == (2, 3) and torch.equal(s.losses, losses)
    torch.testing.assert_close(s.U_r.sum(1), torch.ones(2, dtype=torch.float64))
    # Eq. 2's ratio 1e6 : 3 between two classes becomes 13.8 : 1.1 with the logarithm
    assert s.U[0, 1] / s.U[0, 0] < 13


def _strat() -> Stratification:
    # 2 clients, 3 classes, 3 steps; client 0 owns class 0, client 1 classes 1 and 2
    losses = torch.tensor([[[2.0, 0.1, 0.01], [2.0, 1.9, 1.8], [2.0, 1.5, 1.0]],
                           [[2.0, 1.8, 1.7], [2.0, 0.2, 0.1], [2.0, 1.0, 0.5]]],
                          dtype=torch.float64)
    return Stratification.from_losses(losses)


def test_stratification_frames() -> None:
    s, counts = _strat(), [[5, 0, 0], [0, 3, 3]]
    curves = loss_curves_frame(s, counts)
    assert len(curves) == 2 * 3 * 3 and curves.step.max() == 3
    assert curves[(curves.client == 1) & (curves["class"] == 1)].owned.all()
    f = stratification_frame(s, counts)
    assert len(f) == 6 and f.owned.sum() == 3 and f["count"].sum() == 11
    row = f[(f.client == 0) & (f["class"] == 0)].iloc[0]
    assert row.u == pytest.approx((2.0 - 0.01) / 0.01) and row.U_c_rel == pytest.approx(1.0)
    assert row.u_log_ratio == pytest.approx(math.log(200.0))
    ratios = own_class_ratios(f)
    r1 = ratios[ratios.client == 1].iloc[0]
    assert r1.classes == [1, 2] and r1.U_c_ratio == pytest.approx(19.0 / 3.0)
    assert stratification_frame(s).owned.sum() == 0  # no counts: no owners


def test_teacher_panel_echo_rate_and_leaky_accuracy() -> None:
    s, counts = _strat(), [[5, 0, 0], [0, 3, 3]]
    g = torch.Generator().manual_seed(7)  # not the panel's seed: y ≠ its random labels
    y = torch.randint(0, 3, (600,), generator=g)
    logits = torch.randn(2, 600, 3, generator=g)
    logits[0, :, 0] += 4 * (y == 0)  # each owner knows its classes
    logits[1, :, 1] += 4 * (y == 1)
    logits[1, :, 2] += 4 * (y == 2)
    p = teacher_panel(logits, y, s, counts, seed=0).set_index("teacher")
    assert set(p.index) >= {"mean_logits", "sa", "sa_no_uc", "oracle", "oracle×Ū_c"}
    assert p.loc["oracle", "diagnostic"] and not p.loc["sa", "diagnostic"]
    for t in ("mean_logits", "mean_softmax", "sa_no_uc", "oracle"):  # label-free teachers
        assert p.loc[t, "label_free"] == p.loc[t, "true_label_leaky"]
        assert abs(p.loc[t, "echo_rate"] - 100 / 3) < 8
    assert p.loc["sa_no_uc_labelled", "echo_rate"] > 40  # the label decides, in part
    assert p.loc["sa_no_uc_labelled", "true_label_leaky"] > 90
    no_counts = teacher_panel(logits, y, s)
    assert "oracle" not in set(no_counts.teacher)


@pytest.fixture(scope="module")
def given(iid_clients):
    uploads, ctx = iid_clients
    res = run_fedhydra(uploads, FedHydraConfig(**TINY), ctx)
    strat = Stratification.from_losses(res.extras["strat_losses"])
    assert res.extras["U_r"] == strat.U_r.tolist()  # the extras rebuild the stratification
    return uploads, ctx, strat


def test_fedhydra_replay_and_teachers(given) -> None:
    uploads, ctx, strat = given
    cfg = FedHydraConfig(**TINY, kd_data="replay", teacher="sa_no_uc")
    res = run_fedhydra(uploads, cfg, ctx, stratification=strat)
    ex = res.extras
    assert ex["kd_steps"] == TINY["epochs"] * TINY["steps_per_epoch"]
    assert ex["pool_size"] == TINY["epochs"] * TINY["steps_per_epoch"] * TINY["batch_size"]
    assert ex["teacher"] == "sa_no_uc" and 0 <= ex["teacher_acc"] <= 100
    assert len(res.curve) == TINY["epochs"]
    with pytest.raises(ValueError, match="diagnostic"):
        run_fedhydra(uploads, FedHydraConfig(**TINY, teacher="oracle"), ctx,
                     stratification=strat)
    counts = [[4, 4, 4, 4, 4, 4]] * 3  # IID bars: every client holds every class
    res = run_fedhydra(uploads, FedHydraConfig(**TINY, teacher="oracle"), ctx,
                       stratification=strat, teacher_weights=oracle_weights(counts))
    assert res.extras["teacher"] == "oracle" and res.extras["teacher_acc"] > 50
    with pytest.raises(ValueError, match="teacher"):
        FedHydraConfig(teacher="median")
    with pytest.raises(ValueError, match="strat_u"):
        FedHydraConfig(strat_u="rank")


def test_adversarial_loss_mask() -> None:
    """Eq. 15 counts every sample; ``adv_mask`` only those where argmax P ≠ argmax S."""
    P = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    S = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]])  # agrees on row 0, not on row 1
    kl = (P.softmax(1) * (P.log_softmax(1) - S.log_softmax(1))).sum(1)
    zero = torch.zeros(())
    assert adversarial_loss(P, S, zero).item() == pytest.approx(-kl.mean().item(), rel=1e-6)
    assert adversarial_loss(P, S, zero, mask=True).item() == pytest.approx(-kl[1].item() / 2,
                                                                           rel=1e-6)
    assert adversarial_loss(P, None, zero, mask=True) is zero


def test_adv_mask_runs_and_keeps_the_paper_hash(given) -> None:
    uploads, ctx, strat = given
    paper = run_fedhydra(uploads, FedHydraConfig(**TINY), ctx, stratification=strat)
    masked = run_fedhydra(uploads, FedHydraConfig(**TINY, adv_mask=True), ctx,
                          stratification=strat)
    assert len(masked.curve) == TINY["epochs"]
    a, b = paper.model.state_dict(), masked.model.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the mask changed the training
    # records made before the field existed keep their config hash; the masked reading differs
    exp = ExperimentConfig()
    method = dataclasses.asdict(FedHydraConfig())
    del method["adv_mask"]
    blob = json.dumps({"exp": exp.hash(), "method": method}, sort_keys=True, default=str)
    assert config_hash(exp, FedHydraConfig()) == hashlib.sha256(blob.encode()).hexdigest()[:12]
    assert config_hash(exp, FedHydraConfig(adv_mask=True)) != config_hash(exp, FedHydraConfig())


def test_dense_with_a_weighted_teacher(given) -> None:
    uploads, ctx, strat = given
    assert DenseConfig().teacher == "mean_logits" and FedHydraConfig().teacher == "sa"
    small = {k: v for k, v in TINY.items() if not k.startswith("strat")}
    res = run_dense(uploads, DenseConfig(**small, teacher="sa_no_uc_labelled"), ctx,
                    stratification=strat)
    assert res.extras["teacher"] == "sa_no_uc_labelled" and len(res.curve) == 2
    res = run_dense(uploads, DenseConfig(**TINY, teacher="mean_softmax"), ctx)
    assert res.extras["teacher"] == "mean_softmax"
    with pytest.raises(ValueError, match="diagnostic"):
        run_dense(uploads, DenseConfig(**small, teacher="oracle"), ctx)


def test_teacher_regime_variants_and_summary() -> None:
    vs = variants()
    assert vs[:2] == [DENSE, PAPER] and len(set(vs)) == len(vs)
    assert PAPER.config({}) == FedHydraConfig.for_preset("paper")  # the paper preset
    # DENSE's paper preset, in float32 as every row of the table (DENSE's default is bf16)
    assert DENSE.config({}) == DenseConfig.for_preset("paper", amp=False)
    assert DENSE.config({"amp": True}).amp is False and PAPER.config({"amp": True}).amp is False
    assert Variant("fedhydra", "oracle", "pool").diagnostic
    assert Variant("fedhydra", "sa", "pool", "log_ratio").label == (
        "fedhydra: sa+u=log_ratio / pool")
    rows = [{"setting": "2c/c", "seed": s, "variant": v.label, "method": v.method,
             "teacher": v.teacher, "kd_data": v.kd_data, "strat_u": v.strat_u,
             "diagnostic": v.diagnostic, "last": last, "best": last + 1}
            for v, base in ((DENSE, 20.0), (PAPER, 5.0)) for s, last in
            ((1, base), (2, base + 2), (3, base + 4))]
    t = summarise({"rows": rows})
    assert list(t.variant) == [DENSE.label, PAPER.label]  # sorted by mean last accuracy
    assert t.loc[0, "last"] == "22.0 ± 2.0" and t.loc[1, "best"] == "8.0 ± 2.0"
    assert (t.n == 3).all()
    assert summarise({"rows": []}).empty and isinstance(t, pd.DataFrame)
    v = verdict({"rows": rows}).set_index("variant")
    assert list(v.index) == [PAPER.label]  # FedHydra variants only, against DENSE
    assert v.loc[PAPER.label, "last"] == 7.0 and v.loc[PAPER.label, "dense_last"] == 22.0
    assert not v.loc[PAPER.label, "beats_dense"] and v.loc[PAPER.label, "paper_preset"]


def test_notebook_sections_read_the_results_file(tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from ofl_core.sections import two_classes_per_client as section
    from ofl_core.sections.teacher_regime import save_results

    s, counts = _strat(), [[5, 0, 0], [0, 3, 3]]
    rows = [{"setting": "2c/c", "seed": seed, "variant": v.label, "method": v.method,
             "teacher": v.teacher, "kd_data": v.kd_data, "strat_u": v.strat_u,
             "diagnostic": v.diagnostic, "last": 10.0 + seed, "best": 12.0}
            for v in (DENSE, PAPER) for seed in (1, 2)]
    panels = [{"setting": "2c/c", "seed": 1, "strat_u": "eq2", **r}
              for r in teacher_panel(torch.randn(2, 30, 3), torch.randint(0, 3, (30,)), s,
                                     counts).to_dict("records")]
    save_results(tmp_path / "r.json", {"server": {}, "rows": rows, "panels": panels,
                                       "setups": {}})
    table = section.teacher_regime_report(tmp_path / "r.json", tmp_path, "t")
    assert len(table) == 2 and (tmp_path / "teacher_regime_2cc.png").exists()
    assert section.teacher_regime_report(tmp_path / "missing.json", tmp_path, "t") is None
    fig = section.plot_stratification(loss_curves_frame(s, counts),
                                      stratification_frame(s, counts), "t")
    assert len(fig.axes) == 3


def test_paper_scale_settings_and_records(tmp_path) -> None:
    """The paper scale: full FMNIST, E = 200, T_G = 30 × b = 128, the 30 × 128 probe, ngf 64,
    fewer server epochs (recorded against the paper); the notebook section names its figure
    and prints the recorded scale and wall time."""
    import matplotlib

    matplotlib.use("Agg")
    from ofl_core.sections import teacher_regime as tr
    from ofl_core.sections import two_classes_per_client as section

    paper = tr.SCALES["paper"]
    assert (paper.dataset, paper.local_epochs, paper.settings) == ("fmnist", 200, ("2c/c",))
    assert {k: v for k, v in paper.server.items() if k != "epochs"} == {
        k: v for k, v in tr.PAPER_SERVER.items() if k != "epochs"}
    assert tr.PAPER_SERVER["epochs"] == 200 and paper.server["epochs"] < 200
    rec = paper.record(paper.server)
    assert rec["server_vs_paper"] == f"epochs {paper.server['epochs']} (paper 200)"
    assert tr.SCALES["quick"].record(tr.PAPER_SERVER)["server_vs_paper"] == "as the paper"
    assert {v.label for v in tr.PAPER_SCALE_ROWS} >= {DENSE.label, PAPER.label}
    assert set(tr.PAPER_SCALE_ROWS) <= set(variants())
    rows = [{"setting": "2c/c", "seed": 1, "variant": v.label, "method": v.method,
             "teacher": v.teacher, "kd_data": v.kd_data, "strat_u": v.strat_u,
             "diagnostic": v.diagnostic, "last": 10.0, "best": 12.0, "wall_s": 5.0}
            for v in tr.PAPER_SCALE_ROWS]
    data = {"server": paper.server, "scale": rec, "rows": rows, "panels": [],
            "setups": {"2c/c seed 1": {"clients_s": 3.0, "strat_s": 2.0}}}
    assert tr.wall_time(data) == {"setups_s": 5.0, "rows_s": 20.0, "total_s": 25.0}
    assert tr.wall_time({"setups": {"old": {}}, "rows": []})["setups_s"] is None
    tr.save_results(tmp_path / "full.json", data)
    table = section.teacher_regime_report(None, tmp_path, "t", name="full",
                                          default=tmp_path / "full.json")
    assert len(table) == len(rows) and (table.n == 1).all()
    assert (tmp_path / "full.png").exists()
