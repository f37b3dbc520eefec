"""Which paper cells a task fills, known before it runs, and how much of the papers a grid covers.

One planner per notebook mirrors the tables its ``Run`` s serve (``notebooks/<name>.py``): given
the task's effective parameters it returns the keys of the records the notebook will publish;
the paper cells a task fills are those keys that are cells of ``paper_results.csv``. A test
checks every planner against the records its notebook actually publishes at tiny settings, so
a notebook and its planner cannot drift apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from ..heterogeneous import heterogeneous_settings, local_method_name
from ..results import alpha_key, paper_methods, paper_results

#: A paper cell: (paper, table, dataset, method, alpha key, partition, num_clients, setting).
Cell = tuple[str, str, str, str, str, str, int, str]
def paper_dataset(name: str) -> str:
    """The papers' name of a dataset parameter (the embedded subset is FMNIST)."""
    return "fmnist" if name.startswith("fmnist") else name.split("@")[0]


def _cells(paper: str, table: str, datasets: Iterable[str], alphas: Iterable[float | None],
           clients: Iterable[int], methods: Iterable[str], partition: str = "dirichlet",
           settings: Iterable[str] = ("",)) -> set[Cell]:
    return {(paper, table, paper_dataset(d), m, alpha_key(a), partition, int(n), s)
            for d, a, n, m, s in itertools.product(datasets, alphas, clients, methods, settings)}


def _subset(methods: Iterable[str], paper: str, table: str) -> list[str]:
    """The methods a ``Serves(paper, table, paper_methods(paper, table))`` keeps."""
    keep = paper_methods(paper, table)
    return [m for m in methods if m in keep]


def _main_tables(p: dict) -> set[Cell]:
    out: set[Cell] = set()
    for paper, table, only in (("dense", "T1", False), ("fedhydra", "T1", True),
                               ("fedhydra", "T12", True)):
        out |= _cells(paper, table, [p["dataset"]], p["alphas"], [p["num_clients"]],
                      _subset(p["methods"], paper, table) if only else p["methods"])
    return out | _cells("fedcvae", "T1", [p["fedcvae_dataset"]], p["fedcvae_alphas"],
                        [p["fedcvae_num_clients"]], p["fedcvae_methods"])


def _client_scaling(p: dict) -> set[Cell]:
    where = ([p["dataset"]], [p["alpha"]], p["num_clients"])
    out = (_cells("dense", "T3", *where, p["methods"])
           | _cells("fedhydra", "T4", *where, _subset(p["methods"], "fedhydra", "T4")))
    fed = ([p["fedcvae_dataset"]], [p["fedcvae_alpha"]], p["fedcvae_num_clients"],
           p["fedcvae_methods"])
    out |= _cells("fedcvae", "T2", *fed)
    if p["partition_seeds"]:
        out |= _cells("fedcvae", "T5", *fed, settings=["std_over=data_partitions"])
    return out


def _ablations(p: dict) -> set[Cell]:
    dense = ([p["dataset"]], p["alphas"], [p["num_clients"]])
    t4 = (["dense"] if "dense" in p["dense_variants"] else []) + (["dense+ldam"] * p["ldam"])
    out = _cells("dense", "T6", *dense, p["dense_variants"]) | _cells("dense", "T4", *dense, t4)
    fed = ([p["dataset"]], p["fedcvae_alphas"], [p["fedcvae_clients"]])
    out |= _cells("fedcvae", "T7", *fed, p["t7_methods"],
                  settings=[f"subset={s * 100:g}%" for s in p["subsets"]])
    return out | _cells("fedcvae", "T6", *fed, p["t6_methods"])


def _heterogeneous_models(p: dict) -> set[Cell]:
    # the sections import torch, the methods and the plots: imported here, run_all.py starts in
    # a second instead of five
    from ..sections.heterogeneous_models import fedhydra_partitions

    local, server = heterogeneous_settings(p["server_arch"])
    dense = ([p["dataset"]], p["dense_alphas"], [len(p["dense_archs"])])
    out = (_cells("dense", "T2", *dense, [local_method_name(a) for a in p["dense_archs"]],
                  settings=[local])
           | _cells("dense", "T2", *dense, p["dense_methods"], settings=[server]))
    m = [len(p["fedhydra_archs"])]
    for part, table in fedhydra_partitions(p["fedhydra_alphas"], p["fedhydra_2cc"],
                                           p["dataset"]):
        label = "2c/c" if part["partition"] == "classes_per_client" else part["partition"]
        where = ([p["dataset"]], [part["alpha"]], m)
        local_rows = [local_method_name(a) for a in p["fedhydra_archs"]]
        out |= _cells("fedhydra", table, *where, local_rows, label, [local])
        out |= _cells("fedhydra", table, *where, p["fedhydra_methods"], label, [server])
    return out | _cells("fedcvae", "T1", p["fedcvae_datasets"], [p["fedcvae_alpha"]],
                        [p["fedcvae_num_clients"]], p["fedcvae_methods"])


def _multi_round(p: dict) -> set[Cell]:
    from ..sections.multi_round import fedhydra_serves, partition_fields  # as above

    rounds = range(1, p["rounds"] + 1)
    out = _cells("dense", "T5", [p["dataset"]], p["dense_alphas"], [p["num_clients"]], ["dense"],
                 settings=[f"rounds={r};local_epochs={p['dense_local_epochs']}" for r in rounds])
    for part in p["fedhydra_partitions"]:
        table = fedhydra_serves(part).table
        fields = partition_fields(part)
        e = f";local_epochs={p['fedhydra_local_epochs']}" if table == "T5" else ""
        out |= _cells("fedhydra", table, [p["dataset"]], [fields["alpha"]], [p["num_clients"]],
                      p["fedhydra_methods"],
                      "2c/c" if fields["partition"] == "classes_per_client" else "dirichlet",
                      [f"rounds={r}{e}" for r in rounds])
    return out


def _synthetic_data(p: dict) -> set[Cell]:
    where = ([p["dataset"]], [p["alpha"]], [p["num_clients"]])
    return _cells("dense", "T1", *where, ["dense"]) | _cells("fedhydra", "T1", *where,
                                                             ["fedhydra"])


def _two_classes_per_client(p: dict) -> set[Cell]:
    return _cells("fedhydra", "T2", [p["dataset"]], [None], [p["num_clients"]], p["methods"],
                  "2c/c")


def _cvae_security_shift(p: dict) -> set[Cell]:
    where = ([p["dataset"]], [p["alpha"]], [p["num_clients"]], p["noise_methods"])
    out = _cells("fedcvae", "T1", *where) if 0 in p["gammas"] else set()
    return out | _cells("fedcvae", "T8", *where,
                        settings=[f"gamma={g:g}" for g in p["gammas"] if g != 0])


#: notebook → planner (notebooks that publish no paper-table records are absent)
PLANNERS: dict[str, Callable[[dict], set[Cell]]] = {
    "main_tables": _main_tables, "client_scaling": _client_scaling, "ablations": _ablations,
    "heterogeneous_models": _heterogeneous_models, "multi_round": _multi_round,
    "synthetic_data": _synthetic_data, "two_classes_per_client": _two_classes_per_client,
    "cvae_security_shift": _cvae_security_shift,
}


def paper_cell_set() -> set[Cell]:
    """Every cell of ``paper_results.csv`` as a :data:`Cell`."""
    pr = paper_results()
    return {(r.paper, r.table, r.dataset, r.method, alpha_key(r.alpha), r.partition,
             int(r.num_clients), r.setting) for r in pr.itertuples()}


def planned_cells(notebook: str, parameters: dict, cells: set[Cell] | None = None) -> set[Cell]:
    """The paper cells a task (its *effective* parameters: defaults included) will fill."""
    planner = PLANNERS.get(notebook)
    if planner is None or not parameters.get("seeds", [1]):
        return set()
    return planner(parameters) & (paper_cell_set() if cells is None else cells)


@dataclass(frozen=True)
class Coverage:
    """How many of the papers' cells a set of tasks fills, and which tables it misses."""

    covered: frozenset[Cell]
    total: int
    missed_tables: tuple[str, ...]

    def line(self) -> str:
        return f"paper cells covered: {len(self.covered)} of {self.total}"


def coverage(per_task: Sequence[set[Cell]]) -> Coverage:
    """Coverage of the tasks whose planned cells are ``per_task``."""
    every = paper_cell_set()
    covered = frozenset(set().union(*per_task) & every) if per_task else frozenset()
    touched = {(c[0], c[1]) for c in covered}
    missed = tuple(f"{p} {t}" for p, t in table_order(every) if (p, t) not in touched)
    return Coverage(covered, len(every), missed)


def table_order(cells: Iterable[Sequence] | pd.DataFrame) -> list[tuple[str, str]]:
    """Paper tables in the papers' order: DENSE, FedHydra, FedCVAE; tables by number."""
    keys = ({(r[0], r[1]) for r in cells} if not isinstance(cells, pd.DataFrame)
            else set(zip(cells["paper"], cells["table"], strict=True)))
    papers = {"dense": 0, "fedhydra": 1, "fedcvae": 2}

    def order(k: tuple[str, str]) -> tuple:
        num = "".join(ch for ch in k[1] if ch.isdigit())
        return (papers.get(k[0], 9), k[0], not k[1].startswith("T"), int(num or 0), k[1])

    return sorted(keys, key=order)


def summarize_cells(cells: Iterable[Cell]) -> str:
    """``dense T1: 15, fedhydra T1: 12`` — a task's cells counted per table."""
    counts: dict[tuple[str, str], int] = {}
    for c in cells:
        counts[(c[0], c[1])] = counts.get((c[0], c[1]), 0) + 1
    return ", ".join(f"{p} {t}: {counts[(p, t)]}" for p, t in table_order(counts))
