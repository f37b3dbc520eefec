"""Speed of FedCVAE-Ens / FedCVAE-KD at the paper's FMNIST settings (Tables 3/4).

Full FashionMNIST resized to 32 px, 50 % subset, ``dirichlet_fedcvae`` partition, α = 0.01,
m = 10, seed 1693. Prints seconds per local CVAE epoch (d = 10 for Ens, d = 100 for KD) and the
time of every server stage. To stay within a few minutes it times a subset of the work and
extrapolates, saying so on each line:

- local training: ``--epochs`` epoch(s) of every client (or of ``--clients``); the whole client
  phase is extrapolated from the measured samples/s (Σ n_k · T_L samples, clients one after
  another on this device; divide by the number of worker processes for parallel training);
- server: sampling and one epoch of each training stage, run with freshly initialised decoders
  (speed does not depend on the weights); epochs are multiplied by T_D / T_C.

    python benchmarks/bench_fedcvae.py [--device cpu] [--threads 1] [--clients 1 7] [--epochs 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from ofl_core.data.datasets import load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.evaluate import accuracy
from ofl_core.fedcvae.classifier import distill_decoder, train_classifier
from ofl_core.fedcvae.clients import CVAETrainConfig, make_decoder_upload, train_cvae
from ofl_core.fedcvae.hparams import fedcvae_hparams
from ofl_core.fedcvae.sampling import allocate_samples, sample_client_decoders, truncated_sampler
from ofl_core.fedcvae.server import FedCVAEEnsConfig, FedCVAEKDConfig
from ofl_core.fedcvae.uploads import decoder_from_upload
from ofl_core.models.cvae import build_decoder, truncated_normal
from ofl_core.seeds import client_seed, cvae_init_seed
from ofl_core.server import ServerContext


def timed(fn: Callable[[], object], device: str) -> tuple[float, object]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--clients", type=int, nargs="+", default=None,
                    help="client ids whose local epochs are timed (default: all 10)")
    ap.add_argument("--epochs", type=int, default=1, help="local epochs timed per client")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = args.device
    hp = fedcvae_hparams("fmnist")

    t_load, ds = timed(lambda: load_dataset("fmnist").resized(32), dev)
    part = make_partition(ds.y_train.numpy(), 10, "dirichlet_fedcvae", alpha=0.01, seed=1693,
                          subset=0.5)
    total_n = int(part.sizes.sum())
    print(f"device={dev} threads={args.threads}  data load+resize {t_load:.1f}s  "
          f"client sizes {part.sizes.tolist()} (Σ {total_n})")
    print(f"{'stage':<44}{'measured':>12}{'full (extrapolated)':>22}")

    def row(name: str, measured: float, full: float | None, note: str = "") -> None:
        f = f"{full:10.1f}s" if full is not None else ""
        print(f"{name:<44}{measured:10.2f}s  {f:>18}  {note}")

    # ---- local CVAE training: seconds per epoch
    clients = list(range(10)) if args.clients is None else args.clients
    for which in ("ens", "kd"):
        cfg = CVAETrainConfig.for_dataset("fmnist", which, epochs=args.epochs)
        secs, seen = 0.0, 0
        for k in clients:
            idx = torch.as_tensor(part.client_indices[k])
            x, y = ds.x_train[idx], ds.y_train[idx]
            dt, _ = timed(lambda x=x, y=y, k=k, cfg=cfg: train_cvae(
                x, y, cfg, 10, client_seed(1693, k), cvae_init_seed(1693, k, cfg), dev,
                progress=False), dev)
            secs += dt
            seen += len(y) * args.epochs
        rate = seen / secs
        full = total_n * hp.cvae_local_epochs / rate
        row(f"{which.upper()}: CVAE epoch d={cfg.latent_dim}, {len(clients)} client(s)",
            secs / args.epochs, full,
            f"{rate:.0f} samples/s; full = Σn_k·{hp.cvae_local_epochs} epochs, sequential")
        row(f"{which.upper()}: CVAE epoch of a mean client (3000)", 3000 / rate, None)

    # ---- server stages with freshly initialised decoders
    ctx = ServerContext(10, 1, 32, seed=1693, device=dev, evaluate=None, progress=False)
    ens_cfg, kd_cfg = FedCVAEEnsConfig().resolved(), FedCVAEKDConfig().resolved()
    for which, d in (("ens", hp.ens_latent_dim), ("kd", hp.kd_latent_dim)):
        ccfg = CVAETrainConfig.for_dataset("fmnist", which)
        uploads = []
        for k in range(10):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(k)
                sd = build_decoder("cvae", 10, 1, 32, d).state_dict()
            uploads.append(make_decoder_upload(k, sd, part.counts[k], ccfg, 10, 1, 32, 1693))
        decs = [decoder_from_upload(u, dev) for u in uploads]
        gen = torch.Generator().manual_seed(0)
        n = ens_cfg.num_samples if which == "ens" else kd_cfg.kd_samples
        width = ens_cfg.trunc_width if which == "ens" else kd_cfg.kd_trunc_width
        per = allocate_samples([sum(u.label_counts or ()) for u in uploads], n, "equal")
        dt, (x, y, z) = timed(lambda decs=decs, uploads=uploads, per=per, width=width, gen=gen:
                              sample_client_decoders(decs, uploads, per,
                                                     truncated_sampler(width, None, dev), gen,
                                                     dev), dev)
        row(f"{which.upper()}: sample {n} from 10 client decoders", dt, dt)
        if which == "kd":
            server = build_decoder("cvae", 10, 1, 32, d).to(dev)
            dt, _ = timed(lambda server=server, x=x, y=y, z=z: distill_decoder(
                server, x, y, z, epochs=1, lr=kd_cfg.kd_lr, batch_size=32, seed=0,
                progress=False), dev)
            row("KD: server decoder epoch (n_D=5000)", dt, dt * hp.kd_decoder_epochs,
                f"× T_D={hp.kd_decoder_epochs}")
            server.eval()
            g2 = torch.Generator().manual_seed(1)

            def sample_server(server=server, g2=g2, d=d) -> tuple[torch.Tensor, torch.Tensor]:
                yy = torch.randint(0, 10, (kd_cfg.num_samples,), generator=g2).to(dev)
                zz = truncated_normal((kd_cfg.num_samples, d), kd_cfg.trunc_width, g2,
                                      device=dev)
                with torch.no_grad():
                    return torch.sigmoid(server(zz, yy)), yy

            dt, (x, y) = timed(sample_server, dev)
            row("KD: sample 5000 from the server decoder", dt, dt)
        epochs = hp.ens_classifier_epochs if which == "ens" else hp.kd_classifier_epochs
        dt, (clf, _) = timed(lambda x=x, y=y: train_classifier(
            x, y, arch="mcmahan_cnn", conv_relu=True, epochs=1, lr=1e-3, batch_size=32,
            ctx=ctx, seed=0), dev)
        row(f"{which.upper()}: classifier epoch (n_C=5000)", dt, dt * epochs, f"× T_C={epochs}")
    dt, _ = timed(lambda: accuracy(clf, ds.x_test, ds.y_test, device=dev), dev)
    row("evaluation on the 10,000 test images", dt, dt, "once per classifier epoch")


if __name__ == "__main__":
    main()
