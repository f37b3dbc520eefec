"""DENSE (Zhang et al., NeurIPS 2022; arXiv: FedSyn): :mod:`~ofl_core.dense.server` holds its
config, its synthesizer (L_gen, Eq. 5) and the server loop (Alg. 1). The machinery it shares
with its generator baselines and with FedHydra and Co-Boosting — the teacher bank, the
generator, the losses (L_BN, L_div: Eqs. 3–4), the image pool and the distillation loop — is in
:mod:`ofl_core.distill`."""
