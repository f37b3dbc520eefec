"""FedCVAE (Heinbaugh et al., ICLR 2023): client and server side, one job per module.

- :mod:`~ofl_core.fedcvae.hparams`: Tables 3/4 (per-dataset settings).
- :mod:`~ofl_core.fedcvae.clients`: local CVAE training (Alg. 3, Eq. 1) and decoder uploads.
- :mod:`~ofl_core.fedcvae.uploads`: the server's checks of decoder uploads.
- :mod:`~ofl_core.fedcvae.sampling`: synthetic samples from decoders (Alg. 1 lines 3–4, Alg. 2).
- :mod:`~ofl_core.fedcvae.classifier`: server classifier and server-decoder KD (Eq. 2).
- :mod:`~ofl_core.fedcvae.server`: FedCVAE-Ens/-KD and decoder averaging (Alg. 1/2, Table 6).
- :mod:`~ofl_core.fedcvae.security`: the security shift (§3.3, Fig. 5).

The server methods are declared in :mod:`~ofl_core.fedcvae.server` (``SPECS``) and collected
in :data:`ofl_core.registry.METHODS`; the notebooks' FedCVAE runs are built by
:mod:`ofl_core.sections.fedcvae_runs`.
"""
