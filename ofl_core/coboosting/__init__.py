"""Co-Boosting (Dai et al., ICLR 2024) on the shared distillation machinery:
:mod:`~ofl_core.coboosting.losses` (its losses, ensemble-weight step and input perturbation)
and :mod:`~ofl_core.coboosting.server` (its config and server loop)."""
