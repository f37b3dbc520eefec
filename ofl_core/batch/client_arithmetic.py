"""Whether a grid task left to run would train other clients than the shipped runs it pairs with.

A client is bit-identical only where its arithmetic is: local training's ``amp="auto"``
resolves per machine (bfloat16 where it is native, float32 elsewhere), PyTorch picks its CPU
kernels by the instruction set (AVX2, AVX-512), and a GPU rounds otherwise again; the client
cache keys the resolved precision only. So a task that finishes a column beside shipped runs —
same notebook, same client settings, an overlapping seed and preset — gives records on other
clients when its machine computes otherwise than theirs (docs/decisions/clients.md#precision).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..hardware import this_cpu
from .tasks import Task, effective_parameters, parameters_agree

#: parameters that choose what the server does (or where it runs), not which clients it gets
NOT_CLIENT_PARAMETERS = frozenset({"methods", "server", "fedcvae_methods", "device"})


def _overlap(a: list, b: list) -> bool:
    return not a or not b or bool(set(a) & set(b))


def _same_preset(a: list, b: list) -> bool:
    # a reading ("paper+kd_data=pool") trains its preset's clients
    return _overlap([str(v).partition("+")[0] for v in a], [str(v).partition("+")[0] for v in b])


#: how two tasks' list parameters share clients: a value in common (presets: a base preset,
#: since a preset may choose the local training — DENSE's and FedCVAE's ``authors_code``
#: train other clients)
SHARED_LISTS = {"seeds": _overlap, "alphas": _overlap, "presets": _same_preset}


def native_bf16(device: str) -> bool:
    """:func:`ofl_core.precision.native_bf16`, imported when asked: run_all starts without
    torch."""
    from ..precision import native_bf16 as native

    return native(device)


def _device_here(parameters: dict) -> str:
    device = str(parameters.get("device", "cpu"))
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device.startswith("cuda") else "cpu"


def local_precision_here(parameters: dict) -> str:
    """``bf16`` or ``fp32``: what this machine trains a task's classifier clients in."""
    amp = (parameters.get("local_options") or {}).get("amp", "auto")
    if amp != "auto":
        return "bf16" if amp else "fp32"
    return "bf16" if native_bf16(_device_here(parameters)) else "fp32"


def _arithmetic_here(parameters: dict) -> dict[str, str]:
    device = _device_here(parameters)
    out = {"precision": local_precision_here(parameters), "device": device}
    if device == "cpu":
        out["cpu_features"] = this_cpu()["cpu_features"]
    return out


def _arithmetic_of(run: dict, parameters: dict) -> dict[str, set[str]]:
    """What a shipped run's clients were computed with, as far as its sidecar (and its
    effective ``parameters``) say."""
    precisions = {part.removeprefix("local=") for r in run.get("records", [])
                  for part in str(r.get("precision") or "").split(";")
                  if part.startswith("local=")}
    device = str(parameters.get("device", "cpu"))
    machine = run.get("machine") or {}
    if device == "auto":
        device = "cuda" if machine.get("gpus") else "cpu"
    out = {"precision": precisions, "device": {"cuda" if device.startswith("cuda") else "cpu"}}
    if out["device"] == {"cpu"} and isinstance(machine.get("cpu_features"), str):
        out["cpu_features"] = {machine["cpu_features"]}
    return out


def _differences(here: dict[str, str], theirs: dict[str, set[str]]) -> list[str]:
    return [f"{key} {here[key] or 'none'} here, {'/'.join(sorted(v or 'none' for v in vals))}"
            for key, vals in theirs.items()
            if key in here and vals and vals != {here[key]}]


def arithmetic_warnings(left: Sequence[Task], shipped: Sequence[dict]) -> list[str]:
    """Lines to print when tasks of ``left`` would train their clients here with other
    arithmetic (precision, device, CPU instruction set) than a shipped run (``shipped``:
    sidecars, as :func:`~.report.shipped_runs` reads them) with the same notebook and client
    settings and an overlapping seed and preset; none if no task would."""
    notebooks = {t.notebook for t in left}
    mine = [r for r in shipped if r.get("notebook") in notebooks]
    effective = [effective_parameters(Task(r["notebook"], r.get("parameters", {})))
                 for r in mine]
    theirs = [(r, eff, _arithmetic_of(r, eff)) for r, eff in zip(mine, effective, strict=True)]
    found = []
    for t in left:
        params = effective_parameters(t)
        here = _arithmetic_here(params)
        clash = {}
        for run, eff, arith in theirs:
            if run["notebook"] != t.notebook or not parameters_agree(
                    params, eff, SHARED_LISTS, NOT_CLIENT_PARAMETERS):
                continue
            if diff := _differences(here, arith):
                clash[run["shipped"]] = diff
        if clash:
            first, *rest = sorted(clash)
            found.append(f"    {t.notebook} {t.run_id()}: {'; '.join(clash[first])} in {first}"
                         + (f" and {len(rest)} more" if rest else ""))
    if not found:
        return []
    return [f"warning: {len(found)} of the {len(left)} tasks left would train their clients "
            f"with other arithmetic here ({this_cpu()['cpu']}) than shipped runs with the same "
            "clients, so their records would sit on other clients:",
            *found,
            "  Run them on the shipped runs' machine kind (bf16 is native on a CPU with "
            "avx512_bf16 or amx_bf16, and on a CUDA GPU), or re-make the column on one "
            "machine kind (docs/decisions/clients.md#precision)."]
