"""What is compared with what: for every server method of the registry, whether it needs real
data on the server, how many communication rounds and server stages it has, what a client
uploads and what the server needs besides the uploads (the method taxonomy; rendered in
the README and the report by :func:`taxonomy_markdown` / :func:`taxonomy_frame`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd


@dataclass(frozen=True)
class MethodKind:
    """One method's row. ``data_free``: the server uses no real data (FedDF only with its
    noise proxy); ``rounds``: communication rounds of the one-shot setting; ``stages``: what the
    server does after the uploads arrive; ``upload``: what each client sends; ``server_needs``:
    what the server needs beyond the uploads; ``output``: what the server returns;
    ``heterogeneous``: whether clients may use different architectures."""

    method: str
    source: str
    data_free: bool
    rounds: int
    stages: str
    upload: str
    server_needs: str
    output: str
    heterogeneous: bool


MODEL = "model"

TAXONOMY: tuple[MethodKind, ...] = (
    MethodKind("fedavg", "McMahan et al. 2017", True, 1,
               "1: weighted parameter average", MODEL + " + sample count",
               "one shared initialisation", "one model", False),
    MethodKind("ot", "Singh & Jaggi 2020 (FedHydra T12)", True, 1,
               "1: align neurons to an anchor client by optimal transport, then average",
               MODEL + " + sample count", "plain sequential networks", "one model", False),
    MethodKind("fedoneshot", "Guha et al. 2019", True, 1,
               "none: the clients' predictions are combined at test time", MODEL,
               "nothing", "m client models (ensemble)", True),
    MethodKind("ensemble", "DENSE Eq. 1 (reference)", True, 1,
               "none: mean of the clients' logits", MODEL, "nothing",
               "m client models (ensemble)", True),
    MethodKind("feddf", "Lin et al. 2020", False, 1,
               "1: ensemble distillation on proxy inputs",
               MODEL, "unlabelled proxy data (here: uniform noise, so data-free)",
               "one model", True),
    MethodKind("fed-dafl", "Chen et al. 2019 (DENSE baseline)", True, 1,
               "per epoch: generator step → distillation step", MODEL,
               "a generator", "one model", True),
    MethodKind("fed-adi", "Yin et al. 2020 (DENSE baseline)", True, 1,
               "per epoch: pixel optimisation → pool → distillation", MODEL,
               "the clients' BN statistics (inside the models)", "one model", True),
    MethodKind("dense", "Zhang et al. NeurIPS 2022", True, 1,
               "per epoch: generator training → distillation", MODEL,
               "a generator; the clients' BN statistics (L_BN)", "one model", True),
    MethodKind("fedhydra", "FedHydra (Bai et al.)", True, 1,
               "stratification (m·C generator runs), then per epoch: generator → distillation",
               MODEL, "a generator; the clients' BN statistics", "one model", True),
    MethodKind("coboosting", "Dai et al. ICLR 2024", True, 1,
               "per epoch: hard-sample generator → ensemble-weight boosting → distillation "
               "on perturbed samples", MODEL, "a generator", "one model", True),
    MethodKind("fedcvae-ens", "Heinbaugh et al. ICLR 2023", True, 1,
               "1: decode samples from every client decoder → train a classifier",
               "CVAE decoder + label counts", "nothing", "one model", True),
    MethodKind("fedcvae-kd", "Heinbaugh et al. ICLR 2023", True, 1,
               "2: distil the decoders into a server decoder → decode → train a classifier",
               "CVAE decoder + label counts", "nothing", "one model", True),
)


def taxonomy_frame() -> pd.DataFrame:
    """The taxonomy as a table, one row per method."""
    return pd.DataFrame([asdict(k) for k in TAXONOMY]).set_index("method")


def taxonomy_markdown() -> str:
    """The taxonomy as a Markdown table (the README's)."""
    head = ("| method | source | data-free | rounds | server stages | client uploads | "
            "server needs | output | mixed archs |")
    lines = [head, "|" + "---|" * 9]
    for k in TAXONOMY:
        lines.append(f"| `{k.method}` | {k.source} | {'yes' if k.data_free else 'no'} | "
                     f"{k.rounds} | {k.stages} | {k.upload} | {k.server_needs} | {k.output} | "
                     f"{'yes' if k.heterogeneous else 'no'} |")
    return "\n".join(lines)


__all__ = ["TAXONOMY", "MethodKind", "taxonomy_frame", "taxonomy_markdown"]
