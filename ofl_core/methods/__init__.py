"""The baselines' server methods, one module each: FedAvg, FedOneShot, the teacher ensemble,
FedDF, Fed-DAFL, Fed-ADI and OT fusion. Each module holds its ``<Name>Config`` (paper defaults
and ``preset``), its ``run(uploads, cfg, ctx) -> ServerResult`` and its declaration ``SPEC``.
The papers' own methods have rooms of their own (:mod:`ofl_core.dense`,
:mod:`ofl_core.fedhydra`, :mod:`ofl_core.fedcvae`, :mod:`ofl_core.coboosting`); the registry of
every method is :mod:`ofl_core.registry`."""
