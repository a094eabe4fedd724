"""Label-free calibration on the command line: ``certa calibrate --risk`` and ``certa bench tokens --label-free/--online``.

:mod:`certa.cli.eval` mounts these on its commands (the options below are theirs); the work is
in :mod:`certa.eval.labelfree` and :mod:`certa.eval.labelfree_bench`.

Examples:
    certa calibrate --program sc --traces t.jsonl.gz --risk 0.05 --out policy.json
    certa calibrate --program cot --traces bank.jsonl.gz --risk 0.05 --reference consensus --out policy.json
    certa bench tokens --program cot --traces bank.jsonl.gz --label-free --online --risk 0.1 --json out.json
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from certa.cli.errors import fail
from certa.runtime.errors import CertaError, ConfigError

__all__ = ["DELTA", "LABEL_FREE", "ONLINE", "REFERENCE", "RISK", "bench_cmd", "calibrate_cmd"]

RISK = typer.Option(None, help="label-free (gold never read): certify that at most this share of answers "
                               "differs from full compute's, with probability >= 1 - --delta")
DELTA = typer.Option(0.1, help="label-free: the chance the certificate is wrong")
REFERENCE = typer.Option("final", help="label-free: final (answer change vs full compute) or consensus "
                                       "(cot: accuracy lost vs the other chains' answers)")
LABEL_FREE = typer.Option(False, "--label-free", help="row certa-labelfree: calibrated on one half ignoring "
                                                      "gold, scored on the other (and swapped); needs --risk")
ONLINE = typer.Option(False, "--online", help="row certa-online: problems streamed in 5 orders, exploration "
                                              "counted; needs --risk")


def _check(program: str, risk: Optional[float], reference: str) -> None:
    if program not in ("sc", "cot", "sc-cot"):
        raise ConfigError(f"--program must be sc, cot or sc-cot, not {program!r}")
    if risk is None:
        raise ConfigError("label-free calibration needs --risk R (e.g. 0.05)")
    if reference not in ("final", "consensus"):
        raise ConfigError(f"--reference must be final or consensus, not {reference!r}")


def calibrate_cmd(program: str, traces: str, out_path: str, *, risk: Optional[float], delta: float, reference: str,
                  orders: Optional[int], seed: int, dataset: Optional[str], debug: bool) -> None:
    """``certa calibrate ... --risk R``: write the certified policy (or the shipped default, said so)."""
    from certa.cli.eval import load_traces_arg, write_json
    try:
        _check(program, risk, reference)
        from certa.eval.labelfree import calibrate_labelfree
        result = calibrate_labelfree(load_traces_arg(traces), program, risk=risk, delta=delta, reference=reference,  # type: ignore[arg-type]
                                     orders=orders or 20, seed=seed, dataset=dataset)
        result["traces"] = str(traces)
        write_json(out_path, result)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    lf = result["labelfree"]
    head = f"label-free ({lf['reference']} reference, gold not read), {lf['problems']} problems, {lf['units']} runs each setting"
    typer.echo(head)
    for m in lf["members"]:
        mark = "certified" if m["certified"] else ""
        typer.echo(f"  {m['label']:26s} risk {m['risk']:.4f}  p {m['pvalue']:.4f}  tokens x{m['token_ratio']:.3f}  {mark}")
    if lf["certified"]:
        typer.echo(f"chosen: {lf['label']} (risk <= {risk:g} with probability >= {1 - delta:g}; measured "
                   f"{lf['empirical_risk']:.4f}, tokens x{lf['token_ratio']:.3f} of full compute)")
    else:
        typer.echo(f"FALLBACK: {lf['note']}")
    typer.echo(f"wrote {out_path}")


def bench_cmd(program: str, traces: str, json_out: str, *, label_free: bool, online: bool, risk: Optional[float],
              delta: float, reference: str, seed: int, orders: Optional[int], reps: int, dataset: Optional[str],
              chains: Optional[int], debug: bool) -> None:
    """``certa bench tokens ... --label-free/--online --risk R``: the peers' bench plus the label-free rows."""
    from certa.cli.eval import echo_rows, load_traces_arg, write_report
    try:
        _check(program, risk, reference)
        report, problems = _peers(program, load_traces_arg(traces), seed=seed, orders=orders or 20, reps=reps, dataset=dataset,
                                  chains=chains)
        from certa.eval.labelfree_bench import labelfree_rows
        rows = (["certa-labelfree"] if label_free else []) + (["certa-online"] if online else []) + ["hindsight-labels"]
        report["methods"] |= labelfree_rows(problems, program, risk=risk, delta=delta, reference=reference,  # type: ignore[arg-type]
                                            seed=seed, orders=orders or 20, reps=reps, dataset=dataset, rows=rows)
        write_report(report, traces, json_out, None, None)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    typer.echo(f"{program}: {report['problems']} problems ({', '.join(report['models'])}); label-free rows at "
               f"risk {risk:g}, delta {delta:g} ({reference}); gold read only to score")
    echo_rows(report["methods"])
    typer.echo(f"wrote {json_out}")


def _peers(program: str, problems: list, *, seed: int, orders: int, reps: int, dataset: Optional[str],
           chains: Optional[int]) -> tuple[dict[str, Any], list]:
    """The fixed default and its peers on the file (the rows the label-free ones sit beside), and
    the problems they were scored on."""
    from certa.eval.bench_chains import bench_chains, split_reserved
    if program == "sc":
        from certa.eval.bench_fixed import bench_fixed, shipped_policy
        return bench_fixed(problems, {"sc-default": shipped_policy("sc-default")}, orders=orders, seed=seed, dataset=dataset,
                           reps=reps), list(problems)
    dev, _ = split_reserved(problems, dataset)
    if program == "cot":
        return bench_chains(problems, seed=seed, reps=reps, dataset=dataset), dev
    from certa.eval.bench_sc_cot import bench_sc_cot
    if chains is not None:
        dev = [p.model_copy(update={"samples": p.samples[:chains]}) for p in dev if len(p.samples) >= chains]
    return bench_sc_cot(problems, chains=chains, seed=seed, reps=reps, dataset=dataset), dev
