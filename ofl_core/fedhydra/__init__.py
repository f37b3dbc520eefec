"""FedHydra (Bai et al.; SPEC §4 "FedHydra"), one module per part of the method:
:mod:`~ofl_core.distill.stratification` (model stratification, Alg. 2, Eqs. 1–7),
:mod:`~ofl_core.distill.stratified_aggregation` (stratified aggregation, Eqs. 8–12, Alg. 3) and
:mod:`~ofl_core.fedhydra.server` (the server method, Alg. 1, Eqs. 13–19)."""
