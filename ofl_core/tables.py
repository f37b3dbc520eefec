"""Paper tables declared, not hand-assembled: each experiment runs once and its records are
labelled for every paper table (or figure) it serves.

A notebook builds a list of :class:`Run` s — an experiment (:class:`ExperimentConfig`, and the
client training), the server methods to run on its clients, and the tables it serves
(:class:`Serves`) — and calls :func:`run_tables`. Runs that need the same clients share one
:class:`~ofl_core.experiment.Setup`; a method with the same config on the same clients runs
once, however many runs or tables ask for it. The result (:class:`Tables`) holds every record
labelled for each table it serves, the server results, and ``compare(paper, table)`` (ours
beside the paper's cells).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .data.datasets import ImageDataset
from .experiment import ExperimentConfig, Setup, load_experiment_data, run_one, setup_experiment
from .heterogeneous import client_records
from .multi_round import run_multi_round_methods
from .results import ResultRecord, compare_with_paper, records_frame

#: A method of a run: (name, config) or (name, config, preset label of its records)
MethodEntry = tuple[str, Any] | tuple[str, Any, str]


@dataclass(frozen=True)
class Serves:
    """A paper table (or figure) whose cells a run's records fill.

    ``methods``: which of the run's methods (record names) the table has; None = all.
    ``setting``: the records' setting in this table, a template filled from the run's setting
    (``"k=v;k=v"``, e.g. ``"rounds={rounds}"``); None keeps the run's. ``rename``: our
    method name → the table's. ``seed_from_partition``: the records' seed is the run's
    ``partition_seed`` (FedCVAE Table 5: ± over data partitions).
    """

    paper: str
    table: str
    methods: tuple[str, ...] | None = None
    setting: str | None = None
    rename: tuple[tuple[str, str], ...] = ()
    seed_from_partition: bool = False

    def label(self, rec: ResultRecord, partition_seed: int | None) -> ResultRecord | None:
        """``rec`` labelled for this table, or None when the table does not have its method."""
        if self.methods is not None and rec.method not in self.methods:
            return None
        setting = rec.setting
        if self.setting is not None:
            fields = dict(kv.split("=", 1) for kv in rec.setting.split(";") if "=" in kv)
            setting = self.setting.format(**fields)
        seed = partition_seed if self.seed_from_partition and partition_seed is not None else None
        return dataclasses.replace(rec, paper=self.paper, table=self.table, setting=setting,
                                   method=dict(self.rename).get(rec.method, rec.method),
                                   seed=rec.seed if seed is None else seed)


@dataclass(frozen=True)
class Run:
    """One experiment and the server methods to run on its clients, for the tables it serves.

    ``clients``: the client training (None = ``experiment.client_configs()``; a FedCVAE
    ``CVAETrainConfig`` for decoder clients). ``rounds`` > 0 runs the methods as multi-round
    FL (one record per round, setting ``round_setting``). ``client_rows``: also one
    ``local-<arch>`` record per client, with this setting (heterogeneous-model tables).
    """

    experiment: ExperimentConfig
    methods: tuple[MethodEntry, ...]
    serves: tuple[Serves, ...]
    clients: Any = None
    partition_seed: int | None = None
    rounds: int = 0
    round_setting: str = "rounds={round};local_epochs={local_epochs}"
    client_rows: str | None = None

    def setup_key(self) -> tuple:
        return (self.experiment.hash(), repr(self.clients), self.partition_seed,
                self.experiment.device)


@dataclass
class Tables:
    """What :func:`run_tables` returns: labelled records, results and setups."""

    records: list[ResultRecord] = field(default_factory=list)
    results: dict[tuple[int, str], Any] = field(default_factory=dict)
    setups: list[Setup] = field(default_factory=list)

    def of(self, paper: str, table: str) -> list[ResultRecord]:
        """Our records labelled for one paper table."""
        return [r for r in self.records if r.paper == paper and r.table == table]

    def compare(self, paper: str, table: str) -> pd.DataFrame:
        """Ours (mean over seeds) beside the paper's cells of one table."""
        return compare_with_paper(self.of(paper, table), paper, table)

    def frame(self) -> pd.DataFrame:
        return records_frame(self.records)

    def result(self, method: str, run: int = 0) -> Any:
        """The server result of ``method`` (its record name, e.g. ``"dense"`` or
        ``"fedhydra (paper+sa_rescale)"`` for a labelled variant) in the ``run``-th run that
        has it."""
        hits = [v for (i, k), v in self.results.items() if k == method]
        if len(hits) <= run:
            raise KeyError(f"no result for {method!r}; have {sorted({k for _, k in self.results})}")
        return hits[run]


def _method_specs(run: Run) -> list[tuple[str, Any, str | None]]:
    return [(m[0], m[1], m[2] if len(m) > 2 else None) for m in run.methods]  # type: ignore[misc]


def _summary(setup: Setup, run: Run) -> str:
    c = setup.cfg
    where = f"α={c.alpha}" if c.partition.startswith("dirichlet") else c.partition
    line = f"{c.experiment} {where} m={c.num_clients} seed={c.seed}"
    if run.partition_seed is not None:
        line += f" partition seed={run.partition_seed}"
    if c.setting:
        line += f" {c.setting}"
    if setup.client_accs:
        line += (f": clients {[round(a, 1) for a in setup.client_accs]}, "
                 f"ensemble {setup.ensemble_acc:.2f}")
    return line


def run_tables(runs: Sequence[Run], *, verbose: bool = True,
               dataset: ImageDataset | None = None) -> Tables:
    """Run every :class:`Run` once (shared clients and shared method runs) and label the
    records for every table each run serves. ``verbose`` prints one line per experiment and
    per method (the notebooks' plain-text log). ``dataset``: use this data for every run
    instead of loading each run's ``experiment.dataset``."""
    out = Tables()
    datasets: dict[tuple, ImageDataset] = {}
    setups: dict[tuple, Setup] = {}
    done: dict[tuple, list[tuple[ResultRecord, Any]]] = {}
    for i, run in enumerate(runs):
        exp = run.experiment
        dkey = (exp.dataset, exp.data_root, exp.resize)
        if dkey not in datasets:
            datasets[dkey] = dataset if dataset is not None else load_experiment_data(exp)
        skey = run.setup_key()
        if skey not in setups:
            setups[skey] = setup_experiment(exp, run.clients, partition_seed=run.partition_seed,
                                            dataset=datasets[dkey])
            out.setups.append(setups[skey])
            if verbose:
                print(_summary(setups[skey], run))
        setup = setups[skey]
        recs: list[ResultRecord] = []
        for name, cfg, label in _method_specs(run):
            key = (skey, name, repr(cfg), run.rounds)
            if key not in done:
                done[key] = _execute(setup, run, name, cfg)
                for rec, _ in done[key] if verbose else ():
                    print(f"  {rec.method:16s} {label or rec.preset:22s} {rec.setting:24s} "
                          f"last {rec.last_acc:6.2f}  best {rec.best_acc:6.2f}  "
                          f"({rec.wall_time_s:.1f} s)")
            for rec, res in done[key]:
                # a shared run carries this run's labels (one-shot: its setting too)
                rec = dataclasses.replace(
                    rec, experiment=exp.experiment, preset=label or rec.preset,
                    setting=exp.setting if run.rounds == 0 else rec.setting)
                recs.append(rec)
                suffix = "" if label is None else f" ({label})"
                out.results.setdefault((i, rec.method + suffix), res)
        if run.client_rows is not None:
            recs = client_records(setup, setting=run.client_rows) + recs
        local = {r.method for r in recs if r.method.startswith("local-")}
        for s in run.serves:
            keep = s if s.methods is None else dataclasses.replace(
                s, methods=tuple(s.methods) + tuple(local))
            out.records += [x for r in recs
                            if (x := keep.label(r, run.partition_seed)) is not None]
    return out


def _execute(setup: Setup, run: Run, name: str, cfg: Any) -> list[tuple[ResultRecord, Any]]:
    if run.rounds > 0:
        recs, res = run_multi_round_methods(setup, [(name, cfg)], run.rounds,
                                            setting=run.round_setting)
        chain = next(iter(res.values()))
        return list(zip(recs, chain.results, strict=True))
    return [run_one(setup, name, cfg)]


#: the sizes of FedHydra's stratification (Alg. 2): fields of the configs that can stratify
STRATIFICATION = ("strat_steps", "strat_batch_size")


def server_settings(server: Mapping[str, Any] | None = None, *, stratification: bool = True,
                    **sizes: Any) -> dict[str, Any]:
    """A notebook's ``server`` parameter (and any further ``sizes``) as
    ``configure_methods(common=...)``: keys are config fields (``epochs``, ``steps_per_epoch``,
    ``batch_size``, ``ngf``, ``strat_steps``, ...); a missing key or ``None`` keeps each method's
    paper default. ``batch_size`` also sizes the distillation batches (``kd_batch_size``)
    unless that is given too. ``stratification=False`` leaves out :data:`STRATIFICATION`, for
    methods run beside FedHydra that get no stratification sizes."""
    merged = {**(server or {}), **sizes}
    if merged.get("batch_size") is not None:
        merged.setdefault("kd_batch_size", merged["batch_size"])
    return {k: v for k, v in merged.items()
            if v is not None and (stratification or k not in STRATIFICATION)}


__all__ = ["MethodEntry", "Run", "Serves", "Tables", "run_tables",
           "server_settings", "STRATIFICATION"]

