"""The teacher × distillation-regime experiment: which reading of FedHydra
reproduces its claims (Table 2: FedHydra above DENSE on 2c/c), on the same clients as DENSE.

Each *variant* is a server method with a teacher (:mod:`ofl_core.distill.combiners`), a
distillation regime (``kd_data``: FedHydra's ``"intermediate"`` / ``"replay"`` / ``"fresh"``
/ ``"pool"``, DENSE's ``"pool"``) and a rule for u (``strat_u``). Every variant of one setting
and seed runs on the same clients and the same stratification (computed once, exactly as
FedHydra's server computes it). Per setting and seed a *teacher panel* measures every teacher
on the real test set with no distillation (:func:`~ofl_core.fedhydra.diagnostics.teacher_panel`).

:func:`run_table` writes everything to one JSON file after each run and skips the rows it
already holds (resumable); :func:`summarise` and :func:`panel_summary` turn the file into the
tables (mean ± std over seeds). ``scripts/evidence/fedhydra_teacher_regime.py`` is the command
line.

Two scales (:data:`SCALES`): ``"quick"`` (the embedded FMNIST subset, 10 local epochs, the
notebook's quick server sizes; every variant) and ``"paper"`` (full FashionMNIST 2c/c, the
paper's 200 local epochs, T_G = 30 steps of b = 128, the 30 × 128 stratification probe, ngf 64,
but 10 server epochs instead of the paper's T_g = 200 so that a 2-core CPU can run it; only
:data:`PAPER_SCALE_ROWS`). The results file records the scale, and each row and setup the
machine it ran on and its wall time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ..clients import LocalTrainConfig
from ..dense.server import run_dense
from ..distill.combiners import DIAGNOSTIC, oracle_weights, stratification_stage
from ..distill.loop import open_run
from ..distill.stratification import Stratification
from ..evaluate import predict_logits
from ..experiment import ExperimentConfig, Setup, setup_experiment
from ..fedhydra.diagnostics import teacher_panel
from ..fedhydra.server import run_fedhydra
from ..precision import precision_label, resolve_amp
from ..registry import method_config
from ..results import machine
from ..uploads import build_from_upload

#: the quick server sizes of ``notebooks/two_classes_per_client.py``'s parameters cell
QUICK = {"epochs": 5, "steps_per_epoch": 5, "batch_size": 32, "kd_batch_size": 32,
         "strat_steps": 3, "strat_batch_size": 8, "ngf": 32}
SETTINGS = ("2c/c", "α=0.1")  # FedHydra Table 2's and Table 1's (α = 0.1) partitions
#: the committed results of ``scripts/evidence/fedhydra_teacher_regime.py`` (quick sizes)
RESULTS = "fedhydra_teacher_regime.json"
#: the results of the paper-scale run (``--scale paper``; absent until it has run)
RESULTS_FULL = "fedhydra_teacher_regime_fmnist_full.json"
#: FedHydra §4.1.4's server sizes: T_g = 200 distillation epochs, T_G = 30 generator steps,
#: b = 128 (generator and KD batch; the stratification probe uses the same T_G and b), and
#: ngf 64 (the generator width of SPEC §2; the paper gives none)
PAPER_SERVER = {"epochs": 200, "steps_per_epoch": 30, "batch_size": 128, "kd_batch_size": 128,
                "strat_steps": 30, "strat_batch_size": 128, "ngf": 64}
#: the paper-scale run: PAPER_SERVER with T_g cut to 10 epochs. Measured on the shared 2-core
#: CPU at one thread (docs/decisions/fedhydra.md): the 200 local epochs of 5 clients take
#: 30–75 min and the 30 × 128 probe (50 generators) 17–38 min, depending on the load; one
#: server epoch (30 generator steps of 128 images at ngf 64) 34–43 s per row under load
PAPER_SCALE_SERVER = {**PAPER_SERVER, "epochs": 10}


@dataclass(frozen=True)
class Scale:
    """Where a table runs: ``dataset``, the clients' ``local_epochs``, the ``server`` sizes,
    the ``settings`` and ``seeds`` run by default, and ``reduced``: what differs from the
    paper's settings (recorded in the results file)."""

    name: str
    dataset: str
    local_epochs: int
    server: dict
    settings: tuple[str, ...]
    seeds: tuple[int, ...]
    reduced: str = ""

    def record(self, server: dict) -> dict:
        """The ``scale`` entry of the results file for a run with ``server`` sizes."""
        cut = {k: (v, PAPER_SERVER[k]) for k, v in server.items()
               if k in PAPER_SERVER and v != PAPER_SERVER[k]}
        paper_vs_ours = "; ".join(f"{k} {ours} (paper {paper})"
                                  for k, (ours, paper) in cut.items())
        return {"name": self.name, "dataset": self.dataset, "local_epochs": self.local_epochs,
                "reduced": self.reduced, "server_vs_paper": paper_vs_ours or "as the paper"}


SCALES = {
    "quick": Scale("quick", "fmnist_embedded", 10, QUICK, SETTINGS, (1, 2, 3),
                   "embedded FMNIST subset (10k training images), 10 local epochs (paper: "
                   "200), the notebook's quick server sizes"),
    "paper": Scale("paper", "fmnist", 200, PAPER_SCALE_SERVER, ("2c/c",), (1,),
                   "server epochs T_g (server_vs_paper), to fit a 2-core CPU; the rest as "
                   "FedHydra §4.1.4 (m = 5, E = 200 local epochs of SGD lr 0.01 with batch "
                   "128, T_G = 30, b = 128, probe 30 × 128) with ngf 64"),
}


@dataclass(frozen=True)
class Variant:
    """One server configuration of the table: ``method`` ("fedhydra" or "dense"), its
    ``teacher``, ``kd_data`` and ``strat_u``. ``label`` names it in the table."""

    method: str
    teacher: str
    kd_data: str
    strat_u: str = "eq2"

    @property
    def label(self) -> str:
        u = "" if self.strat_u == "eq2" else f"+u={self.strat_u}"
        return f"{self.method}: {self.teacher}{u} / {self.kd_data}"

    @property
    def diagnostic(self) -> bool:
        """Uses the clients' label counts (the oracle): a diagnostic, never a method."""
        return self.teacher in DIAGNOSTIC

    def config(self, server: dict) -> object:
        # float32 for every row, as the label says (DENSE's default is bfloat16 where native)
        return method_config(self.method, "paper", **{**server, "amp": False},
                             teacher=self.teacher, kd_data=self.kd_data, strat_u=self.strat_u)


PAPER = Variant("fedhydra", "sa", "intermediate")  # FedHydra as written (the paper preset)
DENSE = Variant("dense", "mean_logits", "pool")  # DENSE (its paper preset)
#: the paper-scale run's rows: DENSE, the paper preset, and the best label-free combination of
#: the quick and 20-epoch tables (SA without Ū_c from the pool) in FedHydra's loop and DENSE's
PAPER_SCALE_ROWS = (DENSE, PAPER, Variant("fedhydra", "sa_no_uc", "pool"),
                    Variant("dense", "sa_no_uc", "pool"))


def variants() -> list[Variant]:
    """Every variant, the cheapest and most informative first: DENSE and the paper preset, the
    readings that isolate the teacher (same regime) and the regime (same teacher), then the
    rest of teacher × regime, the robust u, and DENSE with other teachers."""
    F = "fedhydra"
    first = [DENSE, PAPER, Variant(F, "sa_no_uc", "pool"), Variant(F, "sa_no_uc", "intermediate"),
             Variant(F, "mean_logits", "pool"), Variant(F, "sa", "pool"),
             Variant(F, "sa_no_uc", "replay"), Variant(F, "sa_probs", "intermediate"),
             Variant(F, "sa_no_uc_labelled", "intermediate"), Variant(F, "mean_softmax", "pool"),
             Variant(F, "oracle", "pool"), Variant(F, "sa", "intermediate", "log_ratio"),
             Variant(F, "sa", "pool", "log_ratio"), Variant(F, "sa", "replay"),
             Variant(F, "sa", "fresh")]
    teachers = ("sa", "sa_probs", "sa_no_uc", "sa_no_uc_labelled", "mean_logits",
                "mean_softmax", "oracle")
    grid = [Variant(F, t, k) for t in teachers for k in ("intermediate", "replay", "pool",
                                                         "fresh")]
    grid += [Variant(F, "sa", k, "log_ratio") for k in ("replay", "fresh")]
    grid += [Variant(F, t, k, "log_ratio") for t in ("sa_probs", "sa_no_uc")
             for k in ("intermediate", "pool")]
    grid += [Variant("dense", t, "pool") for t in ("mean_softmax", "sa_no_uc", "oracle")]
    return list(dict.fromkeys(first + grid))


def experiment_config(setting: str, seed: int, local_epochs: int = 10,
                      dataset: str = "fmnist_embedded") -> ExperimentConfig:
    """The notebook's clients (``dataset``: the embedded FMNIST subset or the full "fmnist",
    m = 5, cnn_mnist, ``local_epochs``) for ``setting`` "2c/c" or "α=<alpha>"; one training
    worker (one thread)."""
    common = dict(dataset=dataset, num_clients=5, seed=seed, workers=1,
                  local=LocalTrainConfig(arch="cnn_mnist", epochs=local_epochs),
                  experiment="two_classes_per_client", progress=False)
    if setting == "2c/c":
        return ExperimentConfig(partition="classes_per_client", alpha=None,
                                classes_per_client=2, **common)
    return ExperimentConfig(partition="dirichlet", alpha=float(setting.split("=")[1]),
                            **common)


def client_settings(local_epochs: int = 10) -> dict:
    """The clients' local training as run here (recorded in the results file): the
    :class:`~ofl_core.clients.LocalTrainConfig` fields and the precision it resolves to on
    this machine's CPU (``amp="auto"`` = bfloat16 where native)."""
    local = experiment_config("2c/c", 1, local_epochs).local
    out = {**dataclasses.asdict(local),
           "precision": precision_label(resolve_amp(local.amp, "cpu"), False)}
    return json.loads(json.dumps(out))  # as the results file holds it


def setup_stratification(setup: Setup, server: dict, rule: str = "eq2") -> Stratification:
    """Model stratification (Alg. 2) of the setup's clients exactly as FedHydra's server
    computes it (same teacher bank, seed and settings), with u by ``rule``."""
    cfg = method_config("fedhydra", "paper", **server, strat_u=rule)
    ctx = setup.context()
    run_ = open_run(setup.uploads, cfg, ctx, "FedHydra", "fedhydra", fuse_student=False)
    try:
        return stratification_stage(run_, cfg, ctx, len(setup.uploads), None)
    finally:
        run_.finish()


def run_variant(setup: Setup, v: Variant, server: dict, strat: Stratification) -> dict:
    """One row: ``v`` on the setup's clients with the given stratification (the oracle gets
    its weights from the partition's label counts)."""
    cfg, ctx = v.config(server), setup.context()
    oracle = oracle_weights(setup.partition.counts) if v.diagnostic else None
    run = run_fedhydra if v.method == "fedhydra" else run_dense
    t0 = time.perf_counter()
    res = run(setup.uploads, cfg, ctx, stratification=strat, teacher_weights=oracle)
    return {"variant": v.label, "method": v.method, "teacher": v.teacher,
            "kd_data": v.kd_data, "strat_u": v.strat_u, "diagnostic": v.diagnostic,
            "last": res.last_acc, "best": res.best_acc, "curve": res.curve,
            "teacher_acc": res.extras.get("teacher_acc"),
            "kd_steps": res.extras.get("kd_steps"),
            "time_generator_s": res.extras.get("time_generator_s"),
            "time_kd_s": res.extras.get("time_kd_s"),
            "wall_s": round(time.perf_counter() - t0, 1), "machine": machine_info()}


def machine_info() -> dict:
    """Where a row ran: host, CPU model and features, cores, torch's threads and version (and
    GPUs)."""
    return {**machine(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


def wall_time(data: dict) -> dict:
    """Wall time of the file's runs in seconds: clients and stratification of the setups that
    recorded them (None when none did: files written before they were recorded), the server
    rows, and the total of both."""
    timed = [s["clients_s"] + s["strat_s"] for s in data["setups"].values()
             if "clients_s" in s and "strat_s" in s]
    setups = round(sum(timed), 1) if timed else None
    rows = round(sum(r.get("wall_s", 0) for r in data["rows"]), 1)
    return {"setups_s": setups, "rows_s": rows, "total_s": round((setups or 0) + rows, 1)}


def setup_panels(setup: Setup, strats: dict[str, Stratification], seed: int) -> list[dict]:
    """The teacher panel of the setup's clients for each u rule (test logits computed once)."""
    ds = setup.dataset
    logits = torch.stack([predict_logits(build_from_upload(u), ds.x_test)
                          for u in setup.uploads])
    rows = []
    for rule, st in strats.items():
        panel = teacher_panel(logits, ds.y_test, st, setup.partition.counts, seed=seed)
        rows += [{"strat_u": rule, **r} for r in panel.to_dict("records")]
    return rows


def load_results(path: str | os.PathLike) -> dict:
    """The results file (empty structure when it does not exist yet)."""
    p = Path(path)
    if p.exists():
        return json.loads(p.read_text())
    return {"server": {}, "clients": {}, "rows": [], "panels": [], "setups": {}}


def save_results(path: str | os.PathLike, data: dict) -> None:
    """Write atomically (a crash never leaves a half-written file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(p)


def run_table(path: str | os.PathLike, seeds: Sequence[int] = (1, 2, 3),
              settings: Sequence[str] = SETTINGS, server: dict | None = None,
              only: Callable[[Variant], bool] | None = None, log: Callable = print,
              scale: Scale | None = None) -> dict:
    """Run every missing (setting, seed, variant) row, best rows first: for each setting, each
    variant of :func:`variants` over ``seeds``. Saves ``path`` after every row. ``scale``
    (default: quick) gives the dataset and local epochs; ``server`` defaults to its sizes."""
    scale = SCALES["quick"] if scale is None else scale
    server = dict(scale.server if server is None else server)
    data = load_results(path)
    clients = client_settings(scale.local_epochs)
    for key, now in (("server", server), ("clients", clients), ("scale", scale.record(server))):
        if data.get(key) and data[key] != now:
            raise ValueError(f"{path} holds results for {key} settings {data[key]}, not "
                             f"{now}: use another file")
    data["server"], data["clients"] = server, clients
    data["scale"] = scale.record(server)
    done = {(r["setting"], r["seed"], r["variant"]) for r in data["rows"]}
    cache: dict[tuple[str, int], tuple[Setup, dict[str, Stratification]]] = {}
    for setting in settings:
        for v in variants():
            if only is not None and not only(v):
                continue
            for seed in seeds:
                if (setting, seed, v.label) in done:
                    continue
                setup, strats = prepare(setting, seed, server, data, cache, path, scale, log)
                row = {"setting": setting, "seed": seed,
                       **run_variant(setup, v, server, strats[v.strat_u])}
                data["rows"].append(row)
                save_results(path, data)
                log(f"{setting} seed {seed} {v.label}: last {row['last']:.2f} best "
                    f"{row['best']:.2f} ({row['wall_s']} s)")
    return data


def prepare(setting: str, seed: int, server: dict, data: dict, cache: dict,
            path: str | os.PathLike, scale: Scale | None = None, log: Callable = print
            ) -> tuple[Setup, dict[str, Stratification]]:
    """The setup and its stratifications (per u rule) for (setting, seed), made once; the
    first time also its teacher panel and stratification record in ``data`` (with the wall
    time of the clients, which come from the upload cache when trained before, and of the
    stratification)."""
    scale = SCALES["quick"] if scale is None else scale
    if (setting, seed) not in cache:
        log(f"{setting} seed {seed}: {scale.dataset} clients, {scale.local_epochs} local "
            "epochs (loaded from the upload cache when trained before) ...")
        t0 = time.perf_counter()
        setup = setup_experiment(experiment_config(setting, seed, scale.local_epochs,
                                                   scale.dataset))
        t1 = time.perf_counter()
        log(f"{setting} seed {seed}: clients {t1 - t0:.0f} s (ensemble "
            f"{setup.ensemble_acc:.2f}); stratification, {server['strat_steps']} steps × "
            f"{server['strat_batch_size']} ...")
        strat = setup_stratification(setup, server)
        t2 = time.perf_counter()
        log(f"{setting} seed {seed}: stratification {t2 - t1:.0f} s")
        strats = {"eq2": strat, "log_ratio": Stratification.from_losses(
            strat.losses, rule="log_ratio")}
        key = f"{setting} seed {seed}"
        if key not in data["setups"]:
            data["setups"][key] = {
                "setting": setting, "seed": seed, "client_accs": setup.client_accs,
                "ensemble_acc": setup.ensemble_acc,
                "counts": setup.partition.counts.tolist(), "strat_losses": strat.losses.tolist(),
                "clients_s": round(t1 - t0, 1), "strat_s": round(t2 - t1, 1),
                "machine": machine_info()}
            data["panels"] += [{"setting": setting, "seed": seed, **r}
                               for r in setup_panels(setup, strats, seed)]
            save_results(path, data)
        for key in [k for k in cache if k[0] != setting]:  # one setting's setups in memory
            del cache[key]
        cache[(setting, seed)] = (setup, strats)
    return cache[(setting, seed)]


def mean_std(values: pd.Series) -> str:
    return f"{values.mean():.1f} ± {values.std(ddof=1):.1f}" if len(values) > 1 else (
        f"{values.mean():.1f}")


def summarise(data: dict, setting: str | None = None) -> pd.DataFrame:
    """The teacher × regime table: per (setting, variant) the mean and sample std over seeds
    of the last and best test accuracy, ``n`` seeds, and the variant's fields; sorted by
    mean last accuracy within each setting."""
    rows = pd.DataFrame(data["rows"])
    if rows.empty:
        return rows
    if setting is not None:
        rows = rows[rows.setting == setting]
    keys = ["setting", "variant", "method", "teacher", "kd_data", "strat_u", "diagnostic"]
    g = rows.groupby(keys, sort=False)
    out = g.agg(n=("seed", "count"), last_mean=("last", "mean"), last_std=("last", "std"),
                best_mean=("best", "mean"), best_std=("best", "std")).reset_index()
    out["last"] = g["last"].apply(mean_std).values
    out["best"] = g["best"].apply(mean_std).values
    return out.sort_values(["setting", "last_mean"], ascending=[True, False],
                           ignore_index=True)


def verdict(data: dict, setting: str = "2c/c") -> pd.DataFrame:
    """The test on ``setting``: every non-diagnostic FedHydra variant against DENSE on
    the same clients and seeds (the seeds both have), by mean last and mean best accuracy;
    ``beats_dense`` = higher mean last accuracy. Sorted by mean last accuracy."""
    rows = pd.DataFrame(data["rows"])
    if rows.empty:
        return rows
    rows = rows[rows.setting == setting]
    dense = rows[rows.variant == DENSE.label].set_index("seed")
    out = []
    for label, g in rows[(rows.method == "fedhydra") & ~rows.diagnostic].groupby("variant"):
        seeds = sorted(set(g.seed) & set(dense.index))
        if not seeds:
            continue
        g = g.set_index("seed").loc[seeds]
        d = dense.loc[seeds]
        out.append({"variant": label, "paper_preset": label == PAPER.label, "n": len(seeds),
                    "last": g["last"].mean(), "dense_last": d["last"].mean(),
                    "best": g["best"].mean(), "dense_best": d["best"].mean(),
                    "seeds_above_dense": int((g["last"] > d["last"]).sum())})
    v = pd.DataFrame(out)
    if v.empty:
        return v
    v["beats_dense"] = v["last"] > v["dense_last"]
    return v.sort_values("last", ascending=False, ignore_index=True)


def panel_summary(data: dict, rule: str = "eq2") -> pd.DataFrame:
    """The teacher panel: per (setting, teacher) the mean over seeds of the label-free
    accuracy, the *leaky* true-label accuracy and the random-label echo rate."""
    p = pd.DataFrame(data["panels"])
    if p.empty:
        return p
    p = p[p.strat_u == rule]
    cols = ["label_free", "true_label_leaky", "echo_rate"]
    out = p.groupby(["setting", "teacher", "diagnostic"], sort=False)[cols].mean()
    return out.round(1).reset_index()


__all__ = ["DENSE", "PAPER", "PAPER_SCALE_ROWS", "PAPER_SCALE_SERVER", "PAPER_SERVER", "QUICK",
           "RESULTS", "RESULTS_FULL", "SCALES", "SETTINGS", "Scale", "Variant",
           "client_settings", "experiment_config", "load_results", "machine_info",
           "panel_summary", "prepare", "run_table", "run_variant", "save_results",
           "setup_panels", "setup_stratification", "summarise", "variants", "verdict",
           "wall_time"]
