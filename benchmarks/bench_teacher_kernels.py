"""CPU kernels behind the frozen teachers' part of a generator step, each against what it
replaces.

Float32, measured alternately in the same run (median of ``--reps``), batch 256:

- the input gradient of a first convolution (few input channels), from a channels-last
  gradient: ATen's ``convolution_backward`` (oneDNN) vs
  :func:`ofl_core.distill.kernels.narrow_input_conv_grad` (a 1×1 convolution to the tap maps
  + fold),
  for the first layers of the zoo and a few that lose, with the choice
  ``TeacherBank`` makes (:func:`ofl_core.distill.kernels.narrow_input_convs`);
- forward + backward of one BN layer's L_BN term on channels-last inputs: plain autograd
  through the shifted-moment formula (previous) vs
  :func:`ofl_core.distill.losses.bn_statistics_term` (the same forward, a one-pass fused backward);
- 5 teachers' forward + input backward + L_BN (what a DENSE generator step asks of them):
  a ``TeacherBank`` with its first convolutions left stock vs the bank as built.

    python benchmarks/bench_teacher_kernels.py [--threads 1] [--reps 5]
"""

from __future__ import annotations

import torch
from bench_dense import make_teachers, median_alternating  # same folder: run as a script
from bench_generator_kernels import fwd_bwd, parse_args, report

from ofl_core.cpu_memory import large_blocks_from_heap
from ofl_core.distill.kernels import NarrowInputConv2d, narrow_input_conv_grad, narrow_input_pays
from ofl_core.distill.losses import bn_statistics_term
from ofl_core.distill.teachers import TeacherBank

# (C_in, C_out, kernel, padding, size): cnn_cifar, cnn_mnist, resnet18 (CIFAR stem), lenet,
# then layers where the rewrite loses and is not used.
FIRST_CONVS = ((3, 128, 3, 0, 32), (1, 16, 5, 2, 28), (3, 64, 3, 1, 32), (1, 6, 5, 0, 28),
               (1, 32, 3, 1, 28), (3, 32, 3, 1, 32), (3, 16, 5, 2, 32), (3, 6, 5, 0, 32))


def autograd_bn_term(x: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor) -> torch.Tensor:
    """The previous implementation: the same shifted moments, differentiated by autograd."""
    n = x.numel() // x.shape[1]
    xs = x - rm.view(1, -1, 1, 1)
    m1 = xs.sum((0, 2, 3)) / n
    var = ((xs * xs).sum((0, 2, 3)) / n - m1 * m1).clamp_min(0.0)
    return torch.linalg.vector_norm(m1) + torch.linalg.vector_norm(var - rv)


def stock_first_convs(bank: TeacherBank) -> None:
    """Turn the bank's :class:`NarrowInputConv2d` modules back into plain ``nn.Conv2d``."""
    for mdl in bank.models:
        for mod in mdl.modules():
            if isinstance(mod, NarrowInputConv2d):
                mod.__class__ = torch.nn.Conv2d


def main() -> None:
    args = parse_args(__doc__)
    cl = torch.channels_last
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, median of {args.reps}, batch 256, "
          "inside large_blocks_from_heap (as run_method)")
    with large_blocks_from_heap():
        for c_in, c_out, k, pad, size in FIRST_CONVS:
            conv = torch.nn.Conv2d(c_in, c_out, k, padding=pad)
            x = torch.rand(256, c_in, size, size).contiguous(memory_format=cl)
            w = conv.weight.detach().contiguous(memory_format=cl)
            out = size + 2 * pad - k + 1
            gy = torch.randn(256, c_out, out, out).contiguous(memory_format=cl)
            t = median_alternating({
                "convolution_backward (oneDNN)": lambda gy=gy, x=x, w=w, pad=pad: (
                    torch.ops.aten.convolution_backward(
                        gy, x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1,
                        [True, False, False])),
                "narrow_input_conv_grad": lambda gy=gy, w=w, size=size, pad=pad: (
                    narrow_input_conv_grad(gy, w, (size, size), (pad, pad))),
            }, args.reps)
            used = "used" if narrow_input_pays(conv) else "not used"
            report(f"input gradient of conv {c_in} -> {c_out} {k}x{k} pad {pad}, {size} px "
                   f"(TeacherBank: {used}):", t, "convolution_backward (oneDNN)")
        for shape in ((256, 16, 28, 28), (256, 32, 14, 14)):
            x = (torch.randn(*shape) * 1.5 + 0.7).contiguous(memory_format=cl)
            rm, rv = torch.randn(shape[1]) * 0.3, torch.rand(shape[1]) + 0.5
            t = median_alternating({
                "autograd of the formula (previous)": fwd_bwd(
                    lambda a, rm=rm, rv=rv: autograd_bn_term(a, rm, rv), x),
                "bn_statistics_term (fused backward)": fwd_bwd(
                    lambda a, rm=rm, rv=rv: bn_statistics_term(a, rm, rv), x),
            }, args.reps)
            report(f"L_BN term of one BN layer, input {'x'.join(map(str, shape))} "
                   "(channels-last), forward + backward:", t, "autograd of the formula (previous)")
        for arch, c, size in (("cnn_mnist", 1, 28), ("cnn_cifar", 3, 32)):
            stock = TeacherBank(make_teachers(arch, 5, c, size))
            stock_first_convs(stock)
            ours = TeacherBank(make_teachers(arch, 5, c, size))
            x0 = torch.rand(256, c, size, size).contiguous(memory_format=cl)

            def step(bank: TeacherBank, x0: torch.Tensor = x0) -> None:
                x = x0.detach().requires_grad_()
                out = bank.forward(x, bn=bank.has_bn)
                loss = out.logits.square().mean()
                (loss + out.bn_loss if out.bn_loss is not None else loss).backward()

            t = median_alternating({"stock first convolutions": lambda b=stock: step(b),
                                    "TeacherBank as built": lambda b=ours: step(b)}, args.reps)
            report(f"5 {arch} teachers, forward + input backward + L_BN:", t,
                   "stock first convolutions")


if __name__ == "__main__":
    main()
