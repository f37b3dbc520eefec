"""No host sync per step in the inner training loops, counted (tests/host_sync.py).

Each loop is run twice with the same work but for the number of inner steps (2 and 4 local
batches, or 2 and 4 server steps per epoch); a call that hands a tensor value back to Python
(``.item()``, ``.cpu()``, ``.tolist()``, ``bool(t)``, ...) inside the inner loop would make
the second count larger. On a GPU every such call waits for the device, so a count taken here on
the CPU is the same check as on CUDA (tests/test_cuda.py repeats it there, where PyTorch's
sync debug mode also counts the syncs the CUDA runtime sees).
"""

from __future__ import annotations

import host_sync
import pytest
import torch
from host_sync import count_host_syncs, per_step_syncs

from ofl_core.clients import LocalTrainConfig, train_local
from ofl_core.fedcvae.clients import CVAETrainConfig, train_cvae
from ofl_core.grouped_training import train_grouped
from ofl_core.registry import method_config, run_method

pytestmark = pytest.mark.usefixtures("one_thread")

BS = 16
#: server settings of the per-step count: every distillation server, one epoch
SERVERS = {
    "dense": dict(epochs=1, batch_size=8, kd_batch_size=8, nz=8, ngf=4),
    "fedhydra": dict(epochs=1, batch_size=8, kd_batch_size=8, nz=8, ngf=4, strat_steps=1,
                     strat_batch_size=4),
    "fed-dafl": dict(epochs=1, batch_size=8, nz=8, ngf=4),
    "fed-adi": dict(epochs=1, batch_size=8, kd_batch_size=8),
    "feddf": dict(epochs=1, batch_size=8),
    "coboosting": dict(epochs=1, batch_size=8, kd_batch_size=8, nz=8, ngf=4),
    "intactofl": dict(epochs=1, batch_size=8, kd_batch_size=8, nz=8, ngf=4),
}


def images(n: int, size: int = 28, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return (torch.randint(0, 256, (n, 1, size, size), generator=g, dtype=torch.uint8),
            torch.arange(n) % classes)


#: local training settings whose loops differ: plain, and LDAM with DENSE's code's BN-eval
#: after the first epoch (two epochs)
LOCAL = {"ce": dict(epochs=1), "ldam-bn-eval": dict(epochs=2, loss="ldam",
                                                    bn_eval_after_first_epoch=True)}


def local_run(device: str = "cpu", amp: bool = False, kind: str = "ce") -> callable:
    """``run(s)``: one client, epochs of ``s`` batches."""
    cfg = LocalTrainConfig(arch="cnn_mnist", batch_size=BS, amp=amp, **LOCAL[kind])

    def run(s: int) -> None:
        x, y = images(s * BS)
        train_local(x, y, cfg, 4, seed=0, device=device, progress=False)
    return run


def grouped_run(device: str = "cpu", kind: str = "ce") -> callable:
    """``run(s)``: two clients trained as one grouped network, epochs of ``s`` batches."""
    cfg = LocalTrainConfig(arch="cnn_mnist", batch_size=BS, amp=False, **LOCAL[kind])

    def run(s: int) -> None:
        data = [(*images(s * BS + k), k) for k in range(2)]
        data = [(x[: s * BS], y[: s * BS], seed) for x, y, seed in data]
        train_grouped(data, cfg, 4, device)
    return run


def cvae_run(device: str = "cpu") -> callable:
    """``run(s)``: one CVAE client, one epoch of ``s`` batches."""
    cfg = CVAETrainConfig(latent_dim=4, epochs=1, batch_size=BS, lr=1e-3)

    def run(s: int) -> None:
        x, y = images(s * BS, size=32)
        train_cvae(x, y, cfg, 4, seed=0, init_seed=0, device=device, progress=False)
    return run


def server_run(name: str, uploads: list, ctx) -> callable:
    """``run(s)``: server ``name``, one epoch of ``s`` steps."""
    def run(s: int) -> None:
        run_method(name, uploads, method_config(name, steps_per_epoch=s, **SERVERS[name]), ctx)
    return run


CLIENT_LOOPS = {"local": local_run, "local-ldam-bn-eval": lambda: local_run(kind="ldam-bn-eval"),
                "grouped": grouped_run,
                "grouped-ldam-bn-eval": lambda: grouped_run(kind="ldam-bn-eval"),
                "cvae": cvae_run}


@pytest.mark.parametrize("loop", list(CLIENT_LOOPS))
def test_client_training_makes_no_host_sync_per_step(loop: str) -> None:
    run = CLIENT_LOOPS[loop]()
    two, four = per_step_syncs(run)
    assert two == four, f"{loop}: host syncs grow with the steps: {dict(two)} → {dict(four)}"


@pytest.mark.parametrize("name", list(SERVERS))
def test_server_epochs_make_no_host_sync_per_step(two_per_client, name: str) -> None:
    uploads, ctx = two_per_client
    two, four = per_step_syncs(server_run(name, uploads, ctx))
    assert two == four, f"{name}: host syncs grow with the steps: {dict(two)} → {dict(four)}"


def test_the_counter_sees_each_kind_of_sync(monkeypatch) -> None:
    """Each kind once, made by library code (here: a function compiled as if it were in
    ofl_core); the same calls from elsewhere are not counted."""
    src = ("def calls(t):\n"
           "    t.sum().item(), t.tolist(), t.cpu(), bool(t[0]), float(t[0]), int(t[0])\n"
           "    t.to('cpu'), t.to(torch.float64)  # on the CPU: no copy back from a device\n")
    scope = {"torch": torch}
    exec(compile(src, f"{host_sync.LIBRARY}/fake.py", "exec"), scope)
    t = torch.ones(3)
    with count_host_syncs() as counts:
        scope["calls"](t)
        t.sum().item()  # not the library's
    # t.to("cpu") of a CPU tensor counts as the copy to a device it stands for on CUDA
    assert counts == {"item": 1, "tolist": 1, "cpu": 1, "__bool__": 1, "__float__": 1,
                      "__int__": 1, "to_device": 1}
    assert torch.Tensor.item is not None and torch.ones(1).item() == 1.0  # restored
