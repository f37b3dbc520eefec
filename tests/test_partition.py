"""Partitions: the SPEC's FashionMNIST vectors, determinism, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from ofl_core.data.datasets import DatasetNotFoundError, load_dataset
from ofl_core.data.partition import make_partition

# SPEC §1 test vectors: FMNIST train (file order), m=5, seed 1, DENSE scheme.
DENSE_VECTORS = {
    0.5: [[278, 188, 941, 1325, 27, 100, 255, 2869, 1, 3810],
          [2413, 2049, 871, 875, 2454, 505, 2, 90, 4385, 0],
          [184, 1069, 3042, 1099, 3339, 239, 3459, 0, 0, 0],
          [51, 410, 1144, 2700, 118, 4895, 1431, 261, 1093, 0],
          [3074, 2284, 2, 1, 62, 261, 853, 2780, 521, 2190]],
    0.1: [[0, 0, 109, 1, 0, 0, 0, 0, 7, 487],
          [1412, 2433, 77, 1151, 2259, 9, 0, 5999, 0, 0],
          [0, 227, 5559, 475, 3740, 0, 5574, 0, 0, 0],
          [0, 2, 255, 801, 0, 132, 426, 1, 5993, 5513],
          [4588, 3338, 0, 3572, 1, 5859, 0, 0, 0, 0]],
}
FEDCVAE_SIZES = [611, 3031, 5247, 2887, 3015, 3795, 5986, 1055, 3298, 1075]


@pytest.fixture(scope="module")
def fmnist_labels():
    try:
        return load_dataset("fmnist").y_train.numpy()
    except DatasetNotFoundError as e:
        pytest.skip(f"full FashionMNIST absent (apt-get install dataset-fashion-mnist): {e}")


@pytest.mark.fullfmnist
@pytest.mark.parametrize("alpha", [0.5, 0.1])
def test_dense_dirichlet_matches_spec_vectors(fmnist_labels, alpha):
    p = make_partition(fmnist_labels, 5, "dirichlet", alpha=alpha, seed=1)
    np.testing.assert_array_equal(p.counts, np.array(DENSE_VECTORS[alpha]))


@pytest.mark.fullfmnist
def test_fedcvae_dirichlet_matches_spec_sizes(fmnist_labels):
    p = make_partition(fmnist_labels, 10, "dirichlet_fedcvae", alpha=0.01, seed=1693, subset=0.5)
    assert p.sizes.tolist() == FEDCVAE_SIZES
    assert p.sizes.sum() == 30000


def _labels(n=2000, C=10, seed=0):
    return np.random.RandomState(seed).randint(0, C, n)


@pytest.mark.parametrize("scheme,kw", [
    ("dirichlet", {"alpha": 0.3}),
    ("dirichlet_fedcvae", {"alpha": 0.05, "subset": 0.5}),
    ("dirichlet_client", {"alpha": 0.1}),
    ("classes_per_client", {"classes_per_client": 2}),
    ("iid", {}),
])
def test_partition_is_deterministic_disjoint_and_counted(scheme, kw):
    y = _labels()
    a = make_partition(y, 5, scheme, seed=3, **kw)
    b = make_partition(y, 5, scheme, seed=3, **kw)
    c = make_partition(y, 5, scheme, seed=4, **kw)
    np.testing.assert_array_equal(a.counts, b.counts)
    pairs_ab = zip(a.client_indices, b.client_indices, strict=True)
    assert all(np.array_equal(i, j) for i, j in pairs_ab)
    if scheme != "classes_per_client":
        pairs_ac = zip(a.client_indices, c.client_indices, strict=True)
        assert not all(np.array_equal(i, j) for i, j in pairs_ac)
    allidx = np.concatenate(a.client_indices)
    assert len(allidx) == len(set(allidx.tolist()))  # disjoint
    for k, idx in enumerate(a.client_indices):
        np.testing.assert_array_equal(np.bincount(y[idx], minlength=10), a.counts[k])
    assert a.fingerprint() == b.fingerprint()


def test_dirichlet_every_client_has_min_samples_and_all_data():
    y = _labels(3000)
    p = make_partition(y, 10, "dirichlet", alpha=0.1, seed=0)
    assert p.sizes.min() >= 10
    assert p.sizes.sum() == 3000


def test_fedcvae_uses_the_subset_and_keeps_every_subset_sample():
    y = _labels(2000)
    p = make_partition(y, 4, "dirichlet_fedcvae", alpha=0.1, seed=1, subset=0.5)
    assert p.sizes.sum() == 1000


def test_fedcvae_tiny_alpha_gives_no_nan_and_keeps_all_samples():
    y = _labels(2000)
    p = make_partition(y, 10, "dirichlet_fedcvae", alpha=0.001, seed=1693)
    assert p.sizes.sum() == 2000
    assert np.isfinite(p.counts).all()


def coboosting_dir_reference(labels, m, alpha, seed):
    """Co-Boosting's ``partition_data(..., "dir")`` with sigma = 0, transcribed loop for loop
    (its global ``np.random`` replaced by a ``RandomState``): the reference for
    ``dirichlet_client``."""
    rng = np.random.RandomState(seed)
    n_cls = int(labels.max()) + 1
    sizes = rng.lognormal(mean=np.log(len(labels) / m), sigma=0.0, size=m)
    sizes = (sizes / np.sum(sizes) * len(labels)).astype(int)
    cum = np.cumsum(rng.dirichlet(alpha=[alpha] * n_cls, size=m), axis=1)
    idx_list = [np.where(labels == i)[0] for i in range(n_cls)]
    amount = [len(i) for i in idx_list]
    out = {j: [] for j in range(m)}
    while np.sum(sizes) != 0:
        k = rng.randint(m)
        if sizes[k] <= 0:
            continue
        sizes[k] -= 1
        while True:
            c = np.argmax(rng.uniform() <= cum[k])
            if amount[c] <= 0:
                continue
            amount[c] -= 1
            out[k].append(idx_list[c][amount[c]])
            break
    return [np.array(out[k]) for k in range(m)]


@pytest.mark.parametrize("alpha,seed", [(0.5, 2), (0.3, 0), (0.2, 5)])
def test_dirichlet_client_matches_the_authors_loop(alpha, seed):
    """Co-Boosting's scheme: the same index lists, in the same order, as its code's loop
    (cases with hundreds of class redraws, none of them near-hopeless); equal client sizes
    (⌊N/m⌋, or one less after float rounding); a per-client Dirichlet, unlike DENSE's
    per-class split."""
    y = _labels(600)
    p = make_partition(y, 5, "dirichlet_client", alpha=alpha, seed=seed)
    ref = coboosting_dir_reference(y, 5, alpha, seed)
    assert all(np.array_equal(a, b) for a, b in zip(p.client_indices, ref, strict=True))
    # equal sizes, truncated as the code does: exp(log(120)) = 119.99… gives 119 each
    assert p.sizes.tolist() == [119] * 5
    dense = make_partition(y, 5, "dirichlet", alpha=alpha, seed=seed)
    assert not np.array_equal(p.counts, dense.counts)


def test_dirichlet_client_keeps_equal_sizes_when_classes_run_out():
    """α = 0.01: every client wants one or two classes, which run out; the authors' redraw loop
    would practically never end (a hit has probability < 1e-6), so the class comes from the
    client's prior over the classes left; every client still gets exactly N/m samples."""
    y = _labels(1000)
    p = make_partition(y, 4, "dirichlet_client", alpha=0.01, seed=3)
    assert len(set(p.sizes.tolist())) == 1 and 996 <= p.sizes.sum() <= 1000


def test_classes_per_client_gives_disjoint_class_pairs():
    y = _labels()
    p = make_partition(y, 5, "classes_per_client", classes_per_client=2, seed=0)
    for k in range(5):
        assert set(np.nonzero(p.counts[k])[0].tolist()) == {2 * k, 2 * k + 1}


def test_iid_sizes_nearly_equal():
    p = make_partition(_labels(1003), 5, "iid", seed=0)
    assert p.sizes.max() - p.sizes.min() <= 1


@pytest.mark.parametrize("kw,msg", [
    ({"scheme": "dirichlet", "alpha": 0.0}, "alpha must be > 0"),
    ({"scheme": "dirichlet", "alpha": -1.0}, "alpha must be > 0"),
    ({"scheme": "dirichlet_fedcvae", "alpha": None}, "alpha must be > 0"),
    ({"scheme": "nope"}, "unknown partition scheme"),
    ({"scheme": "classes_per_client", "classes_per_client": 3}, "cannot cover"),
    ({"scheme": "iid", "subset": 0.0}, "subset must be"),
])
def test_bad_arguments_raise_clear_value_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make_partition(_labels(), 5, **kw)


def test_more_clients_than_samples_is_a_clear_error():
    with pytest.raises(ValueError, match="need at least .* samples"):
        make_partition(_labels(30), 50, "iid", seed=0)
    with pytest.raises(ValueError, match="use fewer clients"):
        make_partition(_labels(40), 5, "dirichlet", alpha=0.5, seed=0)


def test_dirichlet_schemes_side_by_side():
    from ofl_core.sections.partitions import dirichlet_schemes, side_by_side_counts

    y = _labels(600)
    parts = dirichlet_schemes(y, 5, [0.3, 1.0], seed=0)
    assert list(parts) == ["DENSE α=0.3", "Co-Boosting α=0.3", "DENSE α=1.0",
                           "Co-Boosting α=1.0"]
    assert parts["DENSE α=0.3"].scheme == "dirichlet"
    assert parts["Co-Boosting α=0.3"].scheme == "dirichlet_client"
    text = side_by_side_counts(parts)
    blocks = text.split("\n\n")
    assert len(blocks) == 2 and "DENSE α=0.3" in blocks[0] and "Co-Boosting α=0.3" in blocks[0]
    assert blocks[0].count("total") == 3  # two total columns, one total row
    assert " 600 " in blocks[0].splitlines()[-1] + " "


@pytest.mark.parametrize("kwargs, message", [
    ({"labels": []}, "labels is empty"),
    ({"labels": [0, -1, 2]}, r"labels must be class ids ≥ 0, got values from -1 to 2"),
    ({"labels": [0.5, 1.7]}, "labels must be whole-number class ids, got dtype float64"),
    ({"labels": list(range(10)), "num_classes": 3}, r"class ids in 0 … 2 \(num_classes=3\)"),
    ({"num_clients": True}, "num_clients must be a positive integer"),
    ({"seed": -1}, "seed must be an integer in 0 … 2\\*\\*32 - 1"),
    ({"seed": 2**40}, "seed must be an integer in 0 … 2\\*\\*32 - 1"),
])
def test_bad_labels_counts_and_seeds_are_named(kwargs, message):
    """Before: numpy's errors (an empty array's max, bincount's negative elements, the seed's
    range), or float labels silently truncated and labels beyond num_classes kept."""
    args = {"labels": np.repeat(np.arange(10), 20), "num_clients": 2, "scheme": "iid", **kwargs}
    with pytest.raises(ValueError, match=message):
        make_partition(**args)


def test_a_dirichlet_partition_that_keeps_redrawing_says_so_then_names_its_best_draw():
    """Fifty clients at α = 0.01 on 1,000 labels: a notice after REDRAW_NOTICE draws (the
    search is silent otherwise for up to 10,000 draws), then the error with the best draw."""
    y = np.repeat(np.arange(10), 100)
    with pytest.warns(UserWarning, match="200 draws so far .* still redrawing"), \
            pytest.raises(ValueError, match=r"in 10,000 draws \(the best draw's smallest client "
                                            r"had \d+\)"):
        make_partition(y, 50, "dirichlet", alpha=0.01)
