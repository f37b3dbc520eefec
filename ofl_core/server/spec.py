"""A server method's declaration: everything the rest of the library needs to know about it,
written once in the method's own module (``SPEC = MethodSpec(...)``).

The registry (:mod:`ofl_core.registry`) collects the specs; the taxonomy table (README and
report), the run-time checks of mixed architectures and the records' method names all derive
from them. ``docs/extending.md`` shows how to add a method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .context import ServerContext, ServerResult

MODEL = "model"  #: the usual upload: a state_dict and its architecture's name
#: what a parameter-combining server needs: clients trained from one initial model
SHARED_INIT = "one shared initialisation"
#: what a DENSE-style synthesis needs: a generator and the BN statistics inside the clients
GENERATOR_BN = "a generator; the clients' BN statistics (L_BN)"


@dataclass(frozen=True)
class MethodKind:
    """One method's row of the taxonomy. ``source``: who proposed it; ``data_free``: the server
    uses no real data (FedDF only with its noise proxy); ``rounds``: communication rounds of the
    one-shot setting; ``stages``: what the server does after the uploads arrive; ``upload``:
    what each client sends; ``server_needs``: what the server needs beyond the uploads;
    ``output``: what the server returns."""

    source: str
    data_free: bool
    rounds: int
    stages: str
    upload: str
    server_needs: str
    output: str


@dataclass(frozen=True)
class MethodSpec:
    """A server method, declared once.

    ``name``: the registry key, also the method name of every record it produces;
    ``config``: its config class (``for_preset(preset)`` gives the paper's defaults or the
    authors' code's); ``run(uploads, cfg, ctx) -> ServerResult``; ``kind``: its taxonomy row
    (``None`` for an ablation variant that is not a method of its own, e.g. FedCVAE Table 6's
    server variants); ``homogeneous``: it averages parameters, so every client must share one
    architecture (mixed-architecture tables skip it); ``client``: which client kind it
    distils, ``"classifier"`` or ``"decoder"`` (FedCVAE's CVAE decoders); ``recorded``: the
    keys of ``ServerResult.extras`` that its records keep as ``notes`` (a second model's
    accuracy, the deployed model's size), numbers or short strings; ``client_step``:
    what each client computes on its own data beyond its trained model before it uploads
    (FedLPA's curvature factors), ``client_step(uploads, dataset, partition, cfg, device) ->
    uploads``; the experiment applies it to the shared clients' uploads before ``run``, so the
    method still sees the same trained models as every other method of the table.
    """

    name: str
    config: type
    run: Callable[[list, Any, ServerContext], ServerResult]
    kind: MethodKind | None
    homogeneous: bool = False
    client: str = "classifier"
    client_step: Callable[..., list] | None = None
    recorded: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"a method name is one lower-case word (dashes allowed), "
                             f"got {self.name!r}")
        if not hasattr(self.config, "for_preset"):
            raise TypeError(f"{self.name}: config {self.config.__name__} needs a "
                            "for_preset(preset) classmethod")
        if self.client not in ("classifier", "decoder"):
            raise ValueError(f"{self.name}: client must be 'classifier' or 'decoder', "
                             f"got {self.client!r}")


__all__ = ["MODEL", "MethodKind", "MethodSpec"]
