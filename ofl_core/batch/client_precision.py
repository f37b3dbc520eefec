"""Whether a grid task left to run would train other clients than the shipped runs it pairs with.

Local training's ``amp="auto"`` resolves per machine (bfloat16 where it is native, float32
elsewhere) and the client cache keys each client on the resolved value, so the same grid task
trains other clients on another machine kind (docs/decisions/clients.md#precision). A task
that finishes a column beside shipped runs — same notebook, same client settings, an
overlapping seed — is only comparable with them if its clients train at their precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..hardware import this_cpu
from ..precision import native_bf16
from .tasks import Task, effective_parameters

#: parameters that choose what the server does, not which clients it gets
SERVER_PARAMETERS = frozenset({"methods", "server", "fedcvae_methods"})
#: list parameters two tasks share clients on when they have a value in common (a preset may
#: choose the local training: DENSE's and FedCVAE's ``authors_code`` train other clients)
SHARED_LIST_PARAMETERS = frozenset({"seeds", "alphas", "presets"})


def _values(key: str, value: list) -> set:
    # a reading ("paper+kd_data=pool") trains its preset's clients
    return {str(v).partition("+")[0] for v in value} if key == "presets" else set(value)


def _shares_clients(a: dict, b: dict) -> bool:
    for key in (set(a) | set(b)) - SERVER_PARAMETERS:
        va, vb = a.get(key), b.get(key)
        if key in SHARED_LIST_PARAMETERS and isinstance(va, list) and isinstance(vb, list):
            if va and vb and not _values(key, va) & _values(key, vb):
                return False
        elif va != vb:
            return False
    return True


def local_precision_here(parameters: dict) -> str:
    """``bf16`` or ``fp32``: what this machine trains a task's classifier clients in."""
    amp = (parameters.get("local_options") or {}).get("amp", "auto")
    if amp != "auto":
        return "bf16" if amp else "fp32"
    device = str(parameters.get("device", "cpu"))
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "bf16" if native_bf16(device) else "fp32"


def _local_precisions(run: dict) -> set[str]:
    out = set()
    for r in run.get("records", []):
        for part in str(r.get("precision") or "").split(";"):
            if part.startswith("local="):
                out.add(part.removeprefix("local="))
    return out


def precision_warnings(left: Sequence[Task], shipped: Sequence[dict]) -> list[str]:
    """Lines to print when tasks of ``left`` would train their clients here at another
    precision than a shipped run (``shipped``: sidecars, as :func:`~.report.shipped_runs` reads
    them) with the same notebook and client settings and an overlapping seed; none if no task
    would."""
    found = []
    for t in left:
        params = effective_parameters(t)
        here = local_precision_here(params)
        clash = {run["shipped"]: theirs for run in shipped
                 if run.get("notebook") == t.notebook
                 and (theirs := _local_precisions(run) - {here})
                 and _shares_clients(params, effective_parameters(
                     Task(t.notebook, run.get("parameters", {}))))}
        if clash:
            first, *rest = sorted(clash)
            theirs = "/".join(sorted(set().union(*clash.values())))
            found.append(f"    {t.notebook} {t.run_id()}: {here} here, {theirs} in {first}"
                         + (f" and {len(rest)} more" if rest else ""))
    if not found:
        return []
    cpu = this_cpu()
    return [f"warning: {len(found)} of the {len(left)} tasks left would train their clients at "
            f"another precision here ({cpu['cpu']}; {cpu['cpu_features'] or 'no AVX'}) than "
            "shipped runs with the same clients, so their records would sit on other clients:",
            *found,
            "  Run them where the shipped runs' precision is native (bf16: a CPU with "
            "avx512_bf16 or amx_bf16, or a CUDA GPU), or re-make the column on one machine "
            "kind (docs/decisions/clients.md#precision)."]
