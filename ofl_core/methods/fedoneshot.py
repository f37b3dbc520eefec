"""FedOneShot (Guha et al. 2019, FedCVAE's baseline): the ensemble of all client classifiers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..combine import Ensemble
from ..presets import check_preset
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload, build_from_upload
from ..validation import check_config


@dataclass(frozen=True)
class FedOneShotConfig:
    """How the client classifiers' predictions are combined (``combine``, the
    :class:`~ofl_core.combine.Ensemble` field of the same name).

    ``"mean_softmax"`` (paper): FedCVAE §4.1, FedOneShot "ensembles the predictions of select
    uploaded client classifiers", using all clients; we read "ensembles the predictions" as the
    mean of the members' softmax outputs, whose argmax is the prediction.
    ⚑ ``preset="authors_code"`` → ``"vote"``: FedCVAE's code (ceh-2000/fed_cvae,
    ``servers/server_one_shot.py`` l. 127–142) takes each sampled user's argmax of softmax and
    the ensemble's prediction is ``np.bincount(votes).argmax()``: a hard majority vote, ties to
    the lowest class index (numpy's argmax returns the first maximum), one test image at a time
    (``batch_size=1``). With ``one_shot_sampling=all`` (the paper's FedOneShot hyperparameters,
    ``experiments/best_hyperparameters/*/oneshot.txt``) every client votes. The clients'
    per-client initialisation of that code is client-side:
    :func:`ofl_core.fedcvae.clients.baseline_local_config`.
    """

    combine: Literal["mean_softmax", "vote", "mean_logits"] = "mean_softmax"
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_config(self)

    @classmethod
    def for_preset(cls, preset: str = "paper") -> FedOneShotConfig:
        check_preset(preset)
        return cls(combine="mean_softmax" if preset == "paper" else "vote", preset=preset)


def run(uploads: list[ClientUpload], cfg: FedOneShotConfig, ctx: ServerContext) -> ServerResult:
    """Combine the (validated, frozen) client models; works for heterogeneous clients too."""
    models = [build_from_upload(u, ctx.device) for u in uploads]
    return ServerResult(method="fedoneshot", preset=cfg.preset,
                        model=Ensemble(models, combine=cfg.combine))


SPEC = MethodSpec(
    "fedoneshot", FedOneShotConfig, run,
    MethodKind(
        "Guha et al. 2019", True, 1, "none: the clients' predictions are combined at test time",
        MODEL, "nothing", "m client models (ensemble)"
    ),
)
