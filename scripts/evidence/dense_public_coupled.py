"""Coupled check of DENSE's server loop: DENSE's public code and ofl's
``authors_code`` DENSE fed the SAME random draws -- the student's initial weights, and per epoch
z, the labels and the generator's re-initialisation -- with augmentation off on both sides and
a KD batch that holds the whole pool (so the shuffle order cannot matter). If the two loops are
the same function, the pools and the students agree up to float rounding; ``--f64`` runs both
in float64 so that rounding cannot hide a difference (float32 rounding alone is amplified by
Adam's first steps into visible differences within a few generator steps).

Needs a local copy of zj-jayzhang/DENSE prepared as in
docs/decisions/authors-code.md#dense-public-code (``code/``, ``stubs/``,
``teachers/fmnist_b<beta>.pkl``); never commit that copy. Results:
docs/decisions/authors-code.md#dense-coupled-check.

usage: PYTHONPATH=. python scripts/evidence/dense_public_coupled.py --public-dir D --epochs 3 --f64
       [--fast]  (ofl's fast kernels instead of the stock arithmetic)
"""

import argparse
import collections.abc
import copy
import glob
import json
import os
import sys
import tempfile
import types

import numpy as np
import torch
from PIL import Image
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--public-dir", required=True, help="the prepared local copy of DENSE's code")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--beta", default="0.5")
p.add_argument("--fast", action="store_true", help="ofl's fast kernels (default: stock arithmetic)")
p.add_argument("--seed", type=int, default=7)
p.add_argument("--f64", action="store_true")
args = p.parse_args()
if args.f64:
    torch.set_default_dtype(torch.float64)
    torch.Tensor.float = lambda self, *a, **k: self.to(
        torch.float64
    )  # ofl casts to float32 in places
torch.set_num_threads(1)
B, NZ, E = 128, 256, args.epochs
KD = B * E  # pool fits one KD batch in every epoch

# ---- the public code, imported from the scratch copy (stubs as in run_public.py)
HERE = os.path.abspath(args.public_dir)
torch.Tensor.cuda = lambda self, *a, **k: self
nn.Module.cuda = lambda self, *a, **k: self
six = types.ModuleType("torch._six")
six.container_abcs = collections.abc
sys.modules["torch._six"] = six
sys.path[:0] = [f"{HERE}/stubs", f"{HERE}/code"]
os.environ["DENSE_NUM_WORKERS"] = "0"
import helpers.synthesizers as S  # noqa: E402
from helpers.utils import KLDiv  # noqa: E402
from models.generator import Generator as PubGen  # noqa: E402
from models.nets import CNNMnist  # noqa: E402

sys.argv = ["loop_df_fl.py"]
import importlib.util  # noqa: E402

spec = importlib.util.spec_from_file_location("pub_loop", f"{HERE}/code/loop_df_fl.py")
L = importlib.util.module_from_spec(spec)
spec.loader.exec_module(L)

import ofl_core.dense.server as D  # noqa: E402
from ofl_core.data.datasets import load_dataset  # noqa: E402
from ofl_core.dense.server import DenseConfig  # noqa: E402
from ofl_core.models.generator import init_generator_weights  # noqa: E402
from ofl_core.server import ServerContext  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_dense_public as C  # noqa: E402

ds = load_dataset("fmnist")
states = C.load_public_states(f"{HERE}/teachers/fmnist_b{args.beta}.pkl")
xt, yt = ds.x_test, ds.y_test


def seed_of(e):  # the draws of epoch e
    return 1000 * args.seed + e


@torch.no_grad()
def acc_of(m):  # not ofl_core.evaluate.accuracy: that one casts to float32
    m.eval()
    return (
        100.0
        * (
            torch.cat(
                [
                    m(xt[i : i + 1000].to(torch.get_default_dtype()) / 255)
                    for i in range(0, len(xt), 1000)
                ]
            ).argmax(1)
            == yt
        )
        .float()
        .mean()
        .item()
    )


# ---- public side
torch.manual_seed(args.seed)
student0 = CNNMnist()
S0 = copy.deepcopy(student0.state_dict())
models = []
for s in states:
    m = CNNMnist()
    m.load_state_dict(s)
    m.eval()
    models.append(m)
ens = L.Ensemble(models)
pool_dir = tempfile.mkdtemp(prefix="coupled_pool_")
os.chdir(tempfile.mkdtemp(prefix="coupled_cwd_"))  # the code writes 1.png to its folder
gen = PubGen(nz=NZ, ngf=64, img_size=28, nc=1)
pub_out = []
gen.register_forward_hook(
    lambda m, i, o: pub_out.append((i[0].detach().clone(), o.detach().clone()))
)
syn = S.AdvSynthesizer(
    ens,
    models,
    student0,
    gen,
    nz=NZ,
    num_classes=10,
    img_size=(1, 28, 28),
    iterations=args.steps,
    lr_g=1e-3,
    synthesis_batch_size=B,
    sample_batch_size=KD,
    adv=1.0,
    bn=1.0,
    oh=1.0,
    save_dir=pool_dir,
    dataset="fmnist",
)
syn.aug = lambda x: (x, x)  # augmentation off (both sides)
from torchvision import transforms  # noqa: E402

syn.transform = transforms.Compose(
    [transforms.ToTensor(), transforms.ConvertImageDtype(torch.get_default_dtype())]
)
pub_g0 = []
_orig_reset = S.reset_model


def reset_and_record(model):
    _orig_reset(model)
    pub_g0.append({k: v.clone() for k, v in model.state_dict().items()})


S.reset_model = reset_and_record
opt = torch.optim.SGD(student0.parameters(), lr=0.005, momentum=0.9)
crit = KLDiv(T=20)
student0.train()
pub_acc, pub_states, pub_pools = [], [], []
for e in range(E):
    torch.manual_seed(seed_of(e))
    syn.gen_data(e)
    L.kd_train(syn, [student0, ens], crit, opt)
    pub_acc.append(acc_of(student0))  # eval mode afterwards, as the code's test()
    pub_states.append({k: v.clone() for k, v in student0.state_dict().items()})
    files = sorted(glob.glob(f"{pool_dir}/{e}-*.png"), key=lambda f: int(f.rsplit("-", 1)[1][:-4]))
    pub_pools.append(np.stack([np.array(Image.open(f)) for f in files]))
print("public acc", [round(a, 2) for a in pub_acc])


# ---- ofl side, fed the same draws
counter = {"e": 0}
holder = {}
_build = D.build_generator


def build_and_hold(*a, **k):
    g = _build(*a, **k)
    holder["g"] = g
    g.register_forward_hook(
        lambda m, i, o: ofl_out.append((i[0].detach().clone(), o.detach().clone()))
    )
    return g


ofl_out = []


def coupled_latents(cfg, num_classes, rng, dev):
    e = counter["e"]
    counter["e"] += 1
    g = torch.Generator().manual_seed(seed_of(e))
    z = torch.randn(cfg.batch_size, cfg.nz, generator=g)
    y = torch.randint(0, num_classes, (cfg.batch_size,), generator=g).sort().values
    init_generator_weights(holder["g"], g)  # after z, y: the public order
    ours = holder["g"].state_dict()
    pub = [v for k, v in pub_g0[e].items() if "running" not in k and "num_batches" not in k]
    mine = [v for k, v in ours.items() if "running" not in k and "num_batches" not in k]
    assert len(pub) == len(mine)
    for u, v in zip(mine, pub, strict=False):
        assert u.shape == v.shape and torch.equal(u, v), "G init differs"
    return z.to(dev), y.to(dev)


D.build_generator = build_and_hold
D.sample_latents = coupled_latents
ofl_pools = []
_add = D.ImagePool.add


def add_and_record(self, x):
    _add(self, x)
    ofl_pools.append(self.stored()[-x.shape[0] :].clone())


D.ImagePool.add = add_and_record
_tf = D.ImagePool._to_float
D.ImagePool._to_float = lambda self, x: _tf(self, x).to(torch.get_default_dtype())
speed = {} if args.fast else dict(fast_generator=False, channels_last=False, batched_teachers=False)
cfg = DenseConfig.for_preset(
    "authors_code",
    epochs=E,
    steps_per_epoch=args.steps,
    batch_size=B,
    kd_batch_size=KD,
    amp=False,
    augment=False,
    pool_augment="none",
    **speed,
)
dt = torch.get_default_dtype()
uploads = C.uploads_from_states(
    [{k: (v.to(dt) if v.dtype.is_floating_point else v) for k, v in s.items()} for s in states],
    [1] * len(states),
)
ctx = ServerContext(
    num_classes=10,
    in_channels=1,
    image_size=28,
    seed=1,
    evaluate=lambda m: acc_of(m),
    progress=False,
)
res = D.run_dense(
    uploads,
    cfg,
    ctx,
    student_state={
        k: (v.to(dt) if v.dtype.is_floating_point else v) for k, v in C.map_public_state(S0).items()
    },
)
print("ofl    acc", [round(a, 2) for a in res.curve])
final = res.model.state_dict()
for e in range(E):
    a = pub_pools[e].astype(int).reshape(B, -1)
    b = ofl_pools[e].cpu().numpy().astype(int).reshape(B, -1)
    print(
        f"epoch {e}: pool pixels differing {np.mean(a != b) * 100:.3f}%",
        f"(max |d| {np.abs(a - b).max()})",
    )
for j, ((zp, xp), (zo, xo)) in enumerate(zip(pub_out, ofl_out, strict=False)):
    print(
        f"G call {j}: |dz| {(zp - zo).abs().max().item():.3g}",
        f"|dx| {(xp - xo).abs().max().item():.3g}",
    )
mapped = C.map_public_state(pub_states[-1])
worst = max(
    ((final[k].float() - v.float()).abs().max().item() / (v.float().abs().max().item() + 1e-12), k)
    for k, v in mapped.items()
    if v.dtype.is_floating_point
)
print("final student: worst relative max |d|", worst)
print(json.dumps({"public": pub_acc, "ofl": res.curve}))
