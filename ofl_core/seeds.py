"""Every seed derivation of the library, in one place.

Each function maps an experiment seed (plus tags) to an independent, reproducible seed through
``numpy.random.SeedSequence``; none touches a global RNG. The numeric stream tags (10**6,
2·10**6, 3·10**6, 4·10**6, 7000 + tag) keep the streams apart and are part of the cached
clients' and the records' identity: changing one changes results.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _tag_int(tag: str) -> int:
    """A string tag as the little-endian integer of its first 8 bytes."""
    return int.from_bytes(tag.encode()[:8].ljust(8, b"\0"), "little")


def client_seed(seed: int, client_id: int) -> int:
    """Independent, reproducible seed for client ``client_id`` of an experiment seeded ``seed``
    (its data order and augmentation)."""
    return int(np.random.SeedSequence([int(seed), int(client_id)]).generate_state(1)[0])


def init_seed(seed: int, arch: str) -> int:
    """Seed of the initial weights: shared by every client of the same architecture.

    In FL the server sends one initial model to all clients (DENSE's code deep-copies the global
    model for each client); FedAvg's parameter average only makes sense from a common init.
    """
    return int(np.random.SeedSequence([int(seed), 10**6, _tag_int(arch)]).generate_state(1)[0])


def classifier_init_seed(seed: int, client_id: int, cfg: Any) -> int:
    """Seed of a classifier client's initial weights (``cfg``: a ``LocalTrainConfig``).

    ``cfg.shared_init`` (the default): :func:`init_seed`, one init per architecture for every
    client. Otherwise one init per client (⚑ FedCVAE's code's FedOneShot: each ``User`` builds
    its own ``Classifier`` from the global RNG seeded ``--seed``, ``users/user.py`` l. 17; ours
    come from independent per-client streams of ``seed``, the same distribution but not the
    code's numbers).
    """
    if cfg.shared_init:
        return init_seed(seed, cfg.arch)
    stream = [int(seed), 4 * 10**6, int(client_id)]
    return int(np.random.SeedSequence(stream).generate_state(1)[0])


def cvae_init_seed(seed: int, client_id: int, cfg: Any) -> int:
    """Seed of a FedCVAE client's initial CVAE weights (``cfg``: a ``CVAETrainConfig``): per
    client, or per variant with ``cfg.shared_init``."""
    stream = ([int(seed), 2 * 10**6, _tag_int(cfg.variant)] if cfg.shared_init
              else [int(seed), 3 * 10**6, int(client_id)])
    return int(np.random.SeedSequence(stream).generate_state(1)[0])


def fedcvae_server_seed(seed: int, tag: int) -> int:
    """Seed of FedCVAE's server stream ``tag`` (decoder sampling, classifier, distillation)."""
    return int(np.random.SeedSequence([int(seed), 7_000 + tag]).generate_state(1)[0])


def derive_seed(seed: int, *tags: int | str) -> int:
    """A reproducible 63-bit seed from an experiment seed and tags (e.g. a method name)."""
    ints = [int(seed)] + [t if isinstance(t, int) else _tag_int(t) for t in tags]
    return int(np.random.SeedSequence(ints).generate_state(2, dtype=np.uint64)[0] >> 1)


__all__ = ["classifier_init_seed", "client_seed", "cvae_init_seed", "derive_seed",
           "fedcvae_server_seed", "init_seed"]
