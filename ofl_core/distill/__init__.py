"""Shared machinery of the distillation server methods (DENSE, Fed-DAFL, Fed-ADI, FedDF,
FedHydra), one job per module: :mod:`~ofl_core.distill.teachers` (the frozen client models as
one batched teacher bank), :mod:`~ofl_core.distill.losses` (the papers' losses),
:mod:`~ofl_core.distill.generator` (the image generator), :mod:`~ofl_core.distill.pool` (the
synthetic image pool and augmentations), :mod:`~ofl_core.distill.kernels` (exact CPU kernels)
and :mod:`~ofl_core.distill.loop` (the loop scaffold every server shares)."""
