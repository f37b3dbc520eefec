"""Test-wide settings: no progress bars, a private client cache, a non-interactive backend;
the local-SLURM fixtures (``slurm_fixture.py``); the pytest-xdist groups and their order.

The suite runs on ``-n auto`` workers (pyproject's addopts): each test file is one unit of
work (its module fixtures are built once), except the groups named here; the client cache
folder is the controller's, so every worker and notebook kernel shares it."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
#: the client cache folder this process made (and removes at the end), if any
OWN_CACHE = None
if "OFL_CACHE_DIR" not in os.environ:  # set by the controller, before it starts the workers
    os.environ["OFL_CACHE_DIR"] = OWN_CACHE = tempfile.mkdtemp(prefix="ofl-test-cache-")

#: intra-op threads of this process: the cores shared among the xdist workers, at most 2
THREADS = max(1, min(2, (os.cpu_count() or 1)
                     // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
if "PYTEST_XDIST_WORKER" in os.environ:
    # and of the notebook kernels and child processes this worker starts
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(THREADS))

import pytest  # noqa: E402
import torch  # noqa: E402
from slurm_fixture import slurm, slurm_session  # noqa: E402, F401 - the SLURM test fixtures

torch.set_num_threads(THREADS)

#: test files that share a session fixture run on one worker, so it is built once
SHARED_GROUPS = {
    "tests/test_fedcvae_clients.py": "fedcvae_tiny", "tests/test_fedcvae_server.py": "fedcvae_tiny",
    "tests/test_fedhydra_readings.py": "bars", "tests/test_fedhydra_server.py": "bars",
    "tests/test_fedhydra_stratification.py": "bars",
}
#: files whose tests are spread over the workers one by one (they share no module fixture)
ONE_BY_ONE = {"tests/test_notebooks.py", "tests/test_batch_executors.py",
              "tests/test_batch_execute.py", "tests/test_notebook_outputs.py",
              "tests/test_models.py", "tests/test_grouped_training.py", "tests/test_clients.py"}
#: the longest groups, handed out first so that no worker starts one near the end; the SLURM
#: tests mostly wait on the scheduler while the other workers run the rest
FIRST = ("test_batch_slurm.py", "main_tables.ipynb", "test_notebooks.py",
         "test_batch_executors.py", "test_models.py", "test_grouped_training.py",
         "test_clients.py", "test_notebook_outputs.py", "test_batch_execute.py")


def xdist_group(nodeid: str) -> str:
    """The unit of work that ``nodeid`` belongs to: its test file, a shared group, or itself."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path in ONE_BY_ONE else SHARED_GROUPS.get(path, path)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hooks: a Python without it still runs
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core and one more, as the SLURM and subprocess tests spend
    most of their time waiting."""
    return (os.cpu_count() or 1) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (pyproject's addopts) refined by :func:`xdist_group`: xdist's own
    ``loadgroup`` cannot rename nodes under pytest 9, so the grouping is done here."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return GroupScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if OWN_CACHE is not None:
        shutil.rmtree(OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler hands out this order
        rank = {name: i for i, name in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable


@pytest.fixture
def tiny_dataset():
    """A 4-class 28×28 synthetic dataset that a small CNN learns in a few epochs."""
    from ofl_core.data.datasets import ImageDataset

    g = torch.Generator().manual_seed(0)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % 4
        x = torch.rand(n, 1, 28, 28, generator=g) * 60
        for c in range(4):  # class c = a bright square in quadrant c
            r, q = divmod(c, 2)
            x[y == c, :, r * 14 + 3 : r * 14 + 11, q * 14 + 3 : q * 14 + 11] += 180
        return x.clamp(0, 255).to(torch.uint8), y

    xtr, ytr = make(400)
    xte, yte = make(200)
    return ImageDataset("tiny", xtr, ytr, xte, yte, num_classes=4,
                        classes=("a", "b", "c", "d"))


def fedcvae_synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """4 classes, 32×32: class c = a bright 10×10 square in quadrant c (±2 px jitter) on a dark
    noisy image."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 4
    x = torch.rand(n, 1, 32, 32, generator=g) * 40
    corner = torch.tensor([(3, 3), (3, 19), (19, 3), (19, 19)])[y]
    corner = corner + torch.randint(-2, 3, (n, 2), generator=g)
    rows, cols = torch.arange(32).view(1, 32, 1), torch.arange(32).view(1, 1, 32)
    r0, c0 = corner[:, 0].view(n, 1, 1), corner[:, 1].view(n, 1, 1)
    mask = (rows >= r0) & (rows < r0 + 10) & (cols >= c0) & (cols < c0 + 10)
    bright = 200 + 55 * torch.rand(n, 1, 1, generator=g)
    x[:, 0] = torch.where(mask, bright, x[:, 0])
    return x.round().clamp(0, 255).to(torch.uint8), y


@pytest.fixture(scope="session")
def fedcvae_tiny() -> dict:
    """FedCVAE clients on :func:`fedcvae_synthetic` (4 clients, one class each: extreme label
    skew), trained once on one thread: the dataset, partition, CVAE config, decoder uploads, the
    test set and ``"context"``: ``fedcvae_tiny["context"](seed=0)`` is a server context whose
    only access to the test set is the evaluate callback."""
    from ofl_core.client_training import train_clients
    from ofl_core.data.datasets import ImageDataset
    from ofl_core.data.partition import make_partition
    from ofl_core.evaluate import accuracy
    from ofl_core.fedcvae.clients import CVAETrainConfig
    from ofl_core.server import ServerContext

    xtr, ytr = fedcvae_synthetic(240, 0)
    xte, yte = fedcvae_synthetic(200, 1)
    ds = ImageDataset("synthetic", xtr, ytr, xte, yte, 4)
    part = make_partition(ytr.numpy(), 4, "classes_per_client", classes_per_client=1, seed=0)
    cfg = CVAETrainConfig(latent_dim=4, epochs=8, batch_size=16, lr=3e-3)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        uploads = train_clients(ds, part, cfg, seed=0, workers=1, progress=False)
    finally:
        torch.set_num_threads(old)

    def context(seed: int = 0) -> ServerContext:
        return ServerContext(num_classes=4, in_channels=1, image_size=32, seed=seed,
                             evaluate=lambda model: accuracy(model, xte, yte), progress=False)

    return {"ds": ds, "part": part, "cfg": cfg, "uploads": uploads, "x_test": xte,
            "y_test": yte, "context": context}


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a test module (``pytestmark = pytest.mark.usefixtures(...)``):
    tiny models only lose time to threading on a shared CPU, and exact-equality checks need a
    fixed thread count."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: classes of the synthetic "bars" data set of the FedHydra tests
C6 = 6


def make_bars(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """6 classes of 28×28 grayscale images: a bright 9×7 bar at one of 2×3 positions (jittered
    by a few pixels) on a dim noisy background. uint8 (n, 1, 28, 28) and labels."""
    y = torch.randint(0, C6, (n,), generator=gen)
    r0 = 2 + (y // 3) * 13 + torch.randint(0, 4, (n,), generator=gen)
    c0 = 1 + (y % 3) * 9 + torch.randint(0, 3, (n,), generator=gen)
    idx = torch.arange(28)
    rows = (idx[None] >= r0[:, None]) & (idx[None] < r0[:, None] + 9)
    cols = (idx[None] >= c0[:, None]) & (idx[None] < c0[:, None] + 7)
    bar = (rows[:, :, None] & cols[:, None, :]).float()
    x = torch.rand(n, 28, 28, generator=gen) * 0.3 * (1 - bar) + 0.85 * bar
    return (x * 255).round().to(torch.uint8).unsqueeze(1), y


@pytest.fixture(scope="session")
def bars():
    """The 6-class bars data set (480 train, 300 test images)."""
    from ofl_core.data.datasets import ImageDataset

    g = torch.Generator().manual_seed(0)
    xtr, ytr = make_bars(480, g)
    xte, yte = make_bars(300, g)
    return ImageDataset("bars", xtr, ytr, xte, yte, num_classes=C6)


def bars_clients(data, scheme: str) -> tuple[list, object]:
    """Three cnn_mnist clients trained on ``data`` split by ``scheme``, and a server context
    that evaluates on its test set."""
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.partition import make_partition
    from ofl_core.evaluate import accuracy
    from ofl_core.server import ServerContext

    part = make_partition(data.y_train.numpy(), 3, scheme, seed=1, classes_per_client=2,
                          num_classes=C6)
    local = LocalTrainConfig(arch="cnn_mnist", epochs=3, batch_size=32)
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # the same clients whichever test file asks first
    try:
        uploads = train_clients(data, part, local, seed=1, workers=1, progress=False)
    finally:
        torch.set_num_threads(old)

    def evaluate(model: torch.nn.Module) -> float:
        return accuracy(model, data.x_test, data.y_test)

    ctx = ServerContext(num_classes=C6, in_channels=1, image_size=28, seed=3, evaluate=evaluate,
                        progress=False)
    return uploads, ctx


@pytest.fixture(scope="session")
def two_per_client(bars):
    """Three cnn_mnist clients on 2c/c (client k holds classes 2k, 2k+1)."""
    return bars_clients(bars, "classes_per_client")


@pytest.fixture(scope="session")
def iid_clients(bars):
    """Three cnn_mnist clients on an IID split (their mean ensemble is ≈ 100% accurate)."""
    return bars_clients(bars, "iid")


@pytest.fixture(scope="session")
def fmnist_subset():
    """The embedded FashionMNIST: 3 000 of its training images in 3 clients (Dirichlet α = 1,
    seed 1), evaluated on its first 1 000 test images; the server context (seed 2)."""
    from ofl_core.data.datasets import ImageDataset, load_dataset
    from ofl_core.data.partition import make_partition
    from ofl_core.evaluate import accuracy
    from ofl_core.server import ServerContext

    full = load_dataset("fmnist_embedded")
    ds = ImageDataset("fmnist_embedded", full.x_train, full.y_train, full.x_test[:1000],
                      full.y_test[:1000], num_classes=10)
    part = make_partition(ds.y_train.numpy(), 3, "dirichlet", alpha=1.0, seed=1, subset=0.3)

    def evaluate(model: torch.nn.Module) -> float:
        return accuracy(model, ds.x_test, ds.y_test)

    ctx = ServerContext(num_classes=10, in_channels=1, image_size=28, seed=2, evaluate=evaluate,
                        progress=False, dataset="fmnist_embedded")
    return ds, part, ctx


@pytest.fixture(scope="session")
def fmnist_cnn_clients(fmnist_subset):
    """``fmnist_subset``'s 3 clients as cnn_mnist models after one local epoch (batch 32)."""
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig

    ds, part, ctx = fmnist_subset
    local = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=32)
    return train_clients(ds, part, local, seed=1, workers=1, progress=False), ctx
