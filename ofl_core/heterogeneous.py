"""Heterogeneous client models (DENSE Table 2; FedHydra Tables 3, 6, 7): naming and records.

Clients get one architecture each (``ExperimentConfig(archs=...)``); server methods distil into
a ``student_arch`` (the papers use ResNet-18). The tables print every client's own test
accuracy as a ``local-<arch>`` row and the server methods under the setting
``models=heterogeneous;server=resnet18``. This module maps our architecture names to the
papers' and turns a setup's client accuracies into :class:`~ofl_core.results.ResultRecord` s.
"""

from __future__ import annotations

from .results import ResultRecord

#: our architecture name → the name in paper_results.csv (``local-<name>`` rows)
PAPER_ARCH_NAMES: dict[str, str] = {
    "resnet18": "resnet18",
    "cnn1": "cnn1",
    "cnn_cifar": "cnn2",
    "wrn16_1": "wrn16-1",
    "wrn40_1": "wrn40-1",
    "googlenet": "googlenet",
    "lenet": "lenet",
}


def paper_arch_name(arch: str) -> str:
    """The papers' name of an architecture (``cnn_cifar`` → ``cnn2``, ``wrn16_1`` →
    ``wrn16-1``); architectures the tables do not use keep their name with ``_`` → ``-``."""
    return PAPER_ARCH_NAMES.get(arch, arch.replace("_", "-"))


def local_method_name(arch: str) -> str:
    """Method name of a client's own accuracy row, e.g. ``local-cnn2`` for ``cnn_cifar``."""
    return f"local-{paper_arch_name(arch)}"


def heterogeneous_settings(server_arch: str) -> tuple[str, str]:
    """(setting of the ``local-*`` rows, setting of the server-method rows) as in
    paper_results.csv: ``models=heterogeneous`` and ``models=heterogeneous;server=<arch>``."""
    return "models=heterogeneous", f"models=heterogeneous;server={paper_arch_name(server_arch)}"


def client_records(setup, setting: str | None = None) -> list[ResultRecord]:
    """One record per client of ``setup`` (an :class:`ofl_core.experiment.Setup`): its own
    test accuracy as method ``local-<arch>`` (last = best), labelled like the server records
    of the same experiment; ``setting`` replaces the experiment's setting (the tables' local
    rows use ``models=heterogeneous`` without ``server=``). Two clients of one architecture
    give two rows of the same method (tables then show their mean)."""
    locals_ = setup.cfg.client_configs()
    if not isinstance(locals_, list):
        locals_ = [locals_] * len(setup.uploads)
    return [setup.record(local_method_name(up.arch), lcfg, acc, acc, setting=setting)
            for up, acc, lcfg in zip(setup.uploads, setup.client_accs, locals_, strict=True)]


__all__ = ["PAPER_ARCH_NAMES", "client_records", "heterogeneous_settings", "local_method_name",
           "paper_arch_name"]
