"""Client partitions of a labelled training set (SPEC §1).

Every scheme is deterministic given its seed: it uses its own ``numpy.random.RandomState(seed)``,
which draws exactly the numbers numpy's legacy global RNG draws after ``np.random.seed(seed)``
(the authors' codes use the global RNG; we reproduce their call order without global state).

Schemes:
- ``dirichlet``: DENSE's (NIID-Bench) label-skew scheme, also used by FedHydra.
- ``dirichlet_fedcvae``: FedCVAE's scheme (client rows over classes, then column-normalised).
- ``dirichlet_client``: Co-Boosting's code (``utils_fl.partition_data``, ``"dir"``): a class
  prior p_k ~ Dir(α·1_C) per client and equal client sizes, filled one sample at a time.
- ``classes_per_client``: FedHydra's "2c/c": k disjoint classes per client, equal sizes.
- ``iid``: a seeded permutation split into m nearly equal parts.
A ``subset`` fraction < 1 first keeps a seeded random subset of the training set (FedCVAE uses
50% of MNIST/FMNIST; its Table 7 varies it).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass

import numpy as np

from ..validation import SEED

SCHEMES = ("dirichlet", "dirichlet_fedcvae", "dirichlet_client", "classes_per_client",
           "iid")
DIRICHLET_SCHEMES = ("dirichlet", "dirichlet_fedcvae", "dirichlet_client")


@dataclass(frozen=True, eq=False)
class Partition:
    """Per-client index arrays into the training set and the client×class count matrix."""

    client_indices: tuple[np.ndarray, ...]
    counts: np.ndarray
    scheme: str
    seed: int
    alpha: float | None = None
    subset: float = 1.0
    classes_per_client: int | None = None

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def sizes(self) -> np.ndarray:
        return self.counts.sum(axis=1)

    def describe(self) -> dict:
        """Plain-JSON description of the scheme (what produced this partition)."""
        return {
            "scheme": self.scheme, "seed": self.seed, "alpha": self.alpha,
            "subset": self.subset, "classes_per_client": self.classes_per_client,
            "num_clients": self.num_clients,
        }

    def fingerprint(self) -> str:
        """Hash of the exact index lists (part of the client cache key)."""
        h = hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode())
        for idx in self.client_indices:
            h.update(np.asarray(idx, dtype=np.int64).tobytes())
            h.update(b"|")
        return h.hexdigest()[:16]


#: after this many draws without a valid DENSE Dirichlet partition, say that it is redrawing
REDRAW_NOTICE = 200

def _class_ids(labels: np.ndarray, num_classes: int | None) -> np.ndarray:
    """``labels`` as a flat int64 array of class ids, or a clear error: empty, not whole
    numbers, negative, or (with ``num_classes``) beyond the last class."""
    arr = np.asarray(labels).ravel()
    if arr.size == 0:
        raise ValueError("labels is empty: give the training labels (one class id per sample)")
    if not (np.issubdtype(arr.dtype, np.integer)
            or (np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0))):
        raise ValueError(f"labels must be whole-number class ids, got dtype {arr.dtype} "
                         f"(e.g. {arr.flat[0].item()!r})")
    arr = arr.astype(np.int64)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or (num_classes is not None and hi >= num_classes):
        ids = ("≥ 0" if num_classes is None
               else f"in 0 … {num_classes - 1} (num_classes={num_classes})")
        raise ValueError(f"labels must be class ids {ids}, got values from {lo} to {hi}")
    return arr


def make_partition(
    labels: np.ndarray,
    num_clients: int,
    scheme: str = "dirichlet",
    *,
    alpha: float | None = None,
    seed: int = 1,
    classes_per_client: int = 2,
    subset: float = 1.0,
    num_classes: int | None = None,
    min_size: int = 10,
) -> Partition:
    """Split ``labels`` (the training labels, file order) among ``num_clients`` clients.

    Raises ``ValueError`` with the field to change for bad arguments: an unknown scheme,
    alpha <= 0, fewer samples than clients, k·m > C for disjoint classes, a subset outside (0, 1].
    """
    labels = _class_ids(labels, num_classes)
    C = int(num_classes if num_classes is not None else labels.max() + 1)
    if scheme not in SCHEMES:
        raise ValueError(
            f"unknown partition scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}"
        )
    if (not isinstance(num_clients, (int, np.integer)) or isinstance(num_clients, bool)
            or num_clients < 1):
        raise ValueError(f"num_clients must be a positive integer (got {num_clients!r})")
    if (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)
            or not SEED.holds(seed)):
        raise ValueError(f"seed must be an integer in 0 … 2**32 - 1, NumPy's range (got "
                         f"{seed!r})")
    if not 0.0 < subset <= 1.0:
        raise ValueError(f"subset must be a fraction in (0, 1] (got {subset})")
    if scheme in DIRICHLET_SCHEMES:
        if alpha is None or not np.isfinite(alpha) or alpha <= 0:
            raise ValueError(
                f"alpha must be > 0 for the {scheme!r} partition (got {alpha}); "
                "smaller alpha = more skewed, e.g. 0.1, 0.3, 0.5"
            )
    rng = np.random.RandomState(seed)
    base = np.arange(len(labels))
    if subset < 1.0:
        # FedCVAE: int(n·ratio) of np.random.permutation(n), taken before partitioning.
        base = rng.permutation(len(labels))[: int(len(labels) * subset)]
    n = len(base)
    min_needed = num_clients * (min_size if scheme == "dirichlet" else 1)
    if n < min_needed:
        raise ValueError(
            f"{num_clients} clients need at least {min_needed} training samples but only {n} are "
            f"available (subset={subset}); use fewer clients or more data"
        )
    sub_labels = labels[base]
    if scheme == "dirichlet":
        local = _dirichlet_dense(sub_labels, num_clients, float(alpha), C, rng, min_size)
    elif scheme == "dirichlet_fedcvae":
        local = _dirichlet_fedcvae(sub_labels, num_clients, float(alpha), C, rng)
    elif scheme == "dirichlet_client":
        local = _dirichlet_client(sub_labels, num_clients, float(alpha), C, rng)
    elif scheme == "classes_per_client":
        local = _classes_per_client(sub_labels, num_clients, classes_per_client, C, rng)
    else:
        local = [np.sort(p) for p in np.array_split(rng.permutation(n), num_clients)]
    client_indices = tuple(base[np.asarray(ix, dtype=np.int64)] for ix in local)
    counts = np.stack([np.bincount(labels[ix], minlength=C) for ix in client_indices])
    check_no_empty_client(counts.sum(axis=1), scheme, alpha, seed, subset)
    return Partition(
        client_indices=client_indices,
        counts=counts,
        scheme=scheme,
        seed=seed,
        alpha=None if alpha is None else float(alpha),
        subset=subset,
        classes_per_client=classes_per_client if scheme == "classes_per_client" else None,
    )


def check_no_empty_client(sizes: np.ndarray, scheme: str, alpha: float | None, seed: int,
                          subset: float = 1.0) -> None:
    """Refuse a partition that leaves a client without samples (it would train nothing and
    upload an untrained model), naming the client and what to change. DENSE's scheme redraws
    until every client has ``min_size`` samples (the authors' loop), so this only meets
    FedCVAE's scheme (its code does not redraw; redrawing would change the partitions that work)
    and disjoint classes missing from the data."""
    empty = np.flatnonzero(np.asarray(sizes) == 0)
    if not len(empty):
        return
    which = f"client {int(empty[0])}" + (f" (and {len(empty) - 1} more)" if len(empty) > 1 else "")
    setting = f"scheme={scheme!r}, " + (f"alpha={alpha}, " if scheme.startswith("dirichlet")
                                        else "") + f"seed={seed}, subset={subset}"
    fix = ("a larger alpha, fewer clients, more data (a larger subset) or another seed"
           if scheme.startswith("dirichlet") else
           "fewer clients or data that has every class")
    raise ValueError(f"partition: {which} of {len(sizes)} gets 0 samples ({setting}); every "
                     f"client needs data: use {fix}")


def _dirichlet_dense(
    labels: np.ndarray, m: int, alpha: float, C: int, rng: np.random.RandomState, min_size: int
) -> list[np.ndarray]:
    """DENSE / NIID-Bench Dirichlet label skew (SPEC §1), in the authors' RNG call order.

    For each class: shuffle its indices, p ~ Dir(α·1_m), zero clients already holding ≥ N/m,
    renormalise, split at floor(cumsum(p)·n_c). Redraw everything until each client has
    ≥ ``min_size`` samples; finally shuffle each client's list.
    """
    N = len(labels)
    best = -1
    for attempt in range(10_000):
        if attempt == REDRAW_NOTICE:
            warnings.warn(f"partition: {attempt} draws so far have left some of the {m} clients "
                          f"below {min_size} samples (alpha={alpha}; the best draw's smallest "
                          f"client had {best}); still redrawing, up to 10,000 draws: a larger "
                          "alpha or fewer clients draws at once", stacklevel=3)
        batches: list[list[int]] = [[] for _ in range(m)]
        for c in range(C):
            idx_c = np.where(labels == c)[0]
            rng.shuffle(idx_c)
            p = rng.dirichlet(np.repeat(alpha, m))
            p = np.array([pj * (len(b) < N / m) for pj, b in zip(p, batches, strict=True)])
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            batches = [b + part.tolist() for b, part in zip(batches, np.split(idx_c, cuts),
                                                            strict=True)]
        smallest = min(len(b) for b in batches)
        if smallest >= min_size:
            break
        best = max(best, smallest)
    else:
        raise ValueError(
            f"could not give every one of {m} clients ≥ {min_size} samples with alpha={alpha} "
            f"in 10,000 draws (the best draw's smallest client had {best}); use a larger alpha "
            "or fewer clients"
        )
    out = []
    for b in batches:
        arr = np.array(b, dtype=np.int64)
        rng.shuffle(arr)
        out.append(arr)
    return out


def _dirichlet_fedcvae(
    labels: np.ndarray, m: int, alpha: float, C: int, rng: np.random.RandomState
) -> list[np.ndarray]:
    """FedCVAE's Dirichlet scheme (SPEC §1), in the authors' RNG call order.

    Per class shuffle; client rows p_k ~ Dir(α·1_C); normalise each class column over clients;
    client k gets floor(share·n_c) of class c as consecutive slices; each leftover sample goes to
    a uniformly random client.

    At very small α (e.g. 0.001) numpy's legacy Dirichlet sampler can return NaN rows (all
    gamma draws underflow to 0, then 0/0). We replace such a row by a one-hot on a uniformly
    drawn class (the α → 0 limit of Dir(α·1)); and a class column that sums to zero over clients
    gives all of its samples to the leftover rule. Documented in docs/decisions/data.md.
    """
    class_idx = []
    for c in range(C):
        idx = np.nonzero(labels == c)[0]
        rng.shuffle(idx)
        class_idx.append(idx)
    props = []
    for _ in range(m):
        with np.errstate(invalid="ignore", divide="ignore"):
            p = rng.dirichlet(np.repeat(alpha, C))
        if not np.all(np.isfinite(p)):
            p = np.zeros(C)
            p[rng.randint(C)] = 1.0
        props.append(p)
    props = np.array(props)
    col = props.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(col > 0, props / np.where(col > 0, col, 1.0), 0.0)
    user_idx: list[list[int]] = [[] for _ in range(m)]
    for c in range(C):
        n_pts = (scaled[:, c] * len(class_idx[c])).astype(int)
        ends = np.cumsum(n_pts)
        start = 0
        for k in range(m):
            user_idx[k].extend(class_idx[c][start : ends[k]].tolist())
            start = ends[k]
        for idx in class_idx[c][ends[-1]:]:
            user_idx[int(rng.choice(m, size=1)[0])].append(int(idx))
    return [np.array(u, dtype=np.int64) for u in user_idx]


def _dirichlet_priors(rng: np.random.RandomState, alpha: float, C: int, m: int) -> np.ndarray:
    """m class priors p_k ~ Dir(α·1_C) as one ``dirichlet(size=m)`` draw (Co-Boosting's call).
    A NaN row (numpy's legacy sampler at tiny α, where every gamma draw underflows) becomes a
    one-hot on a uniformly drawn class, as in :func:`_dirichlet_fedcvae`."""
    with np.errstate(invalid="ignore", divide="ignore"):
        priors = rng.dirichlet(np.repeat(alpha, C), size=m)
    for k in range(m):
        if not np.all(np.isfinite(priors[k])):
            priors[k] = np.zeros(C)
            priors[k][rng.randint(C)] = 1.0
    return priors


#: below this chance that one draw hits a class with samples left, a class is drawn directly
#: from the prior restricted to those classes (the law of the authors' redraw loop's result)
MIN_ACCEPT = 1e-6


def _draw_class(rng: np.random.RandomState, prior: np.ndarray, cum: np.ndarray,
                left: np.ndarray) -> int:
    """Co-Boosting's class draw for one sample: ``argmax(uniform() <= cumsum(p_k))``, redrawn
    while the class has no samples left — the same random stream as the authors' loop.

    After 16 misses the redraws are drawn in chunks (``uniform(size=K)`` gives the same numbers
    as K scalar draws); on a hit the RNG is rewound and advanced by exactly the draws the loop
    would make.
    Where a hit has probability < :data:`MIN_ACCEPT` (the authors' loop would need millions of
    redraws, or never end), the class comes from p_k restricted to the classes left, with one
    uniform draw."""
    for _ in range(16):  # the authors' loop as written, while redraws are likely to hit
        c = int(np.argmax(rng.uniform() <= cum))
        if left[c] > 0:
            return c
    avail = left > 0
    width = np.diff(cum, prepend=0.0)
    width[0] += max(0.0, 1.0 - cum[-1])  # u above cumsum's last entry: argmax of all-False = 0
    accept = float(width[avail].sum())
    if accept < MIN_ACCEPT:
        classes = np.nonzero(avail)[0]
        w = prior[classes]
        w = w / w.sum() if w.sum() > 0 else np.full(len(classes), 1.0 / len(classes))
        j = int(np.searchsorted(np.cumsum(w), rng.uniform()))
        return int(classes[min(j, len(classes) - 1)])
    chunk = int(min(1 << 20, max(64, 4 / accept)))
    while True:
        state = rng.get_state()
        cls = np.argmax(rng.uniform(size=chunk)[:, None] <= cum[None, :], axis=1)
        hit = avail[cls]
        if hit.any():
            j = int(np.argmax(hit))
            rng.set_state(state)
            rng.uniform(size=j + 1)
            return int(cls[j])


def _dirichlet_client(
    labels: np.ndarray, m: int, alpha: float, C: int, rng: np.random.RandomState
) -> list[np.ndarray]:
    """Co-Boosting's Dirichlet scheme (its code's ``partition_data(..., "dir")`` with
    ``sigma = 0``), in the authors' RNG call order.

    Client sizes: ``lognormal(log(N/m), σ=0)`` normalised to N and truncated to integers (equal
    sizes; the truncation can leave a few samples unassigned). Class priors p_k ~ Dir(α·1_C),
    one per client. Then, while some client has room: draw a client uniformly (redrawn when it
    is full), draw a class from its prior (redrawn while the class is used up, see
    :func:`_draw_class`) and give the client that class's last unassigned sample (classes are
    used from the end of their file-order index list, not shuffled). Every client gets exactly
    its size; a client's class mix follows its own prior only until the classes it wants run
    out."""
    n = len(labels)
    sizes = rng.lognormal(mean=np.log(n / m), sigma=0.0, size=m)
    sizes = (sizes / np.sum(sizes) * n).astype(int)
    priors = _dirichlet_priors(rng, alpha, C, m)
    cums = np.cumsum(priors, axis=1)
    idx_list = [np.where(labels == c)[0] for c in range(C)]
    left = np.array([len(i) for i in idx_list])
    out: list[list[int]] = [[] for _ in range(m)]
    remaining = int(sizes.sum())
    while remaining:
        k = rng.randint(m)
        if sizes[k] <= 0:
            continue
        sizes[k] -= 1
        remaining -= 1
        c = _draw_class(rng, priors[k], cums[k], left)
        left[c] -= 1
        out[k].append(int(idx_list[c][left[c]]))
    return [np.array(u, dtype=np.int64) for u in out]


def _classes_per_client(
    labels: np.ndarray, m: int, k: int, C: int, rng: np.random.RandomState
) -> list[np.ndarray]:
    """FedHydra's "2c/c": client i gets classes i·k … i·k+k−1 (disjoint), all their samples.

    Generalised to any k and m with k·m ≤ C; the classes' samples are shuffled per client.
    """
    if k < 1:
        raise ValueError(f"classes_per_client must be ≥ 1 (got {k})")
    if k > C:
        raise ValueError(f"classes_per_client={k} is more than the dataset's {C} classes")
    if k * m > C:
        raise ValueError(
            f"classes_per_client={k} × num_clients={m} = {k * m} > {C} classes: disjoint classes "
            f"cannot cover that many clients; use ≤ {C // k} clients or fewer classes per client"
        )
    out = []
    for i in range(m):
        cls = np.arange(i * k, (i + 1) * k)
        idx = np.nonzero(np.isin(labels, cls))[0]
        rng.shuffle(idx)
        out.append(idx)
    return out
