"""Shared scaffolding of the benchmarks over the probe banks of ``shared/data/probes``
(``labelfree.py``, ``reasoning_probes.py``, ``reasoning_sc_cot.py``): the ``--banks`` option
and the folders a run reads and writes.

Imported as a sibling module, so the benchmarks still run as ``python benchmarks/x.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_banks_option(ap: argparse.ArgumentParser) -> None:
    """``--banks``: the folder of probe banks (default: the shared data's ``probes``)."""
    ap.add_argument("--banks", default=None, help="folder of probe banks (default: shared/data/probes)")


def bank_dirs(args: argparse.Namespace, *outputs: str) -> tuple[Path, ...]:
    """The probe-bank folder of ``args.banks``, then the folders named by the options ``outputs``
    (``"out"``, ``"cache"``), created if missing."""
    from certa.eval.datasets import data_dir
    made = [Path(getattr(args, name)) for name in outputs]
    for folder in made:
        folder.mkdir(parents=True, exist_ok=True)
    return (Path(args.banks) if args.banks else data_dir() / "probes", *made)


def bank_files(banks: Path) -> list[str]:
    """The probe banks (``*.jsonl.gz``) in ``banks``, sorted."""
    return sorted(str(p) for p in banks.glob("*.jsonl.gz"))
