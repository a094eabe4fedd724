"""Evaluation commands: ``certa calibrate``, ``certa bench tokens``, ``certa traces collect``.

``certa.cli`` mounts them (``calibrate`` as a command, ``bench_app``/``traces_app`` as
groups); ``app`` holds all three for standalone use. Errors print one line with the error's
code (plus a hint line), exit status 2, like every certa command.

Examples:
    certa traces collect --dataset gsm8k --idx 0:80 --samples 16 --probe-interval 32 --probe-samples 4 --out t.jsonl
    certa traces import --format reasoning-gsm8k outputs.jsonl.gz t.jsonl.gz
    certa calibrate --program sc --traces t.jsonl --cal-fraction 0.5 --seed 0 --out policy.json
    certa bench tokens --program sc --traces t.jsonl --json sc.json --png sc.png
    certa run sc --dataset gsm8k --idx 0:10 --policy policy.json
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from certa.cli.errors import error_line, fail
from certa.cli.labelfree import DELTA, LABEL_FREE, ONLINE, REFERENCE, RISK, bench_cmd, calibrate_cmd
from certa.runtime.errors import CertaError, ConfigError

console = Console(stderr=True)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Trace collection, calibration and token benchmarks.")
BENCH_HELP = ("Benchmarks on recorded traces.\n\n"
              "Example: certa bench tokens --program sc --traces t.jsonl --json sc.json --png sc.png")
TRACES_HELP = ("Collect reasoning traces with a real engine.\n\n"
               "Example: certa traces collect --dataset gsm8k --idx 0:80 --out t.jsonl")
bench_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help=BENCH_HELP)
traces_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help=TRACES_HELP)

_PROGRAM = typer.Option(..., "--program", help="sc, cot or sc-cot (SC over CoT chains: probe banks)")
_TRACES = typer.Option(..., "--traces", help="trace file (JSONL, the documented trace format)")




def _program(name: str, allowed: tuple[str, ...] = ("sc", "cot")) -> str:
    if name not in allowed:
        raise ConfigError(f"--program must be {' or '.join(allowed)}, not {name!r}")
    return name


def load_traces_arg(path: str):
    """The trace file a command names (its errors are coded: CT303/CT304)."""
    from certa.eval.traces import load_traces
    return load_traces(path)


def write_json(path: str, data: Any) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def write_report(report: dict[str, Any], traces: str, json_out: str, png: Optional[str], plot: Any) -> None:
    """Write a bench report (with its trace path) as JSON and, given ``png``, ``plot(report, png)``."""
    report["traces"] = str(traces)
    write_json(json_out, report)
    if png:
        try:
            plot(report, png)
        except ImportError as exc:
            raise ConfigError(f"--png needs matplotlib: {exc}", hint="pip install 'certa[plot]'") from None


@app.command("calibrate")
def calibrate(
    program: str = _PROGRAM,
    traces: str = _TRACES,
    cal_fraction: float = typer.Option(0.5, help="share of problems used for calibration (the rest is held out)"),
    seed: int = typer.Option(0, help="seed of the split, the SC draw orders and the bootstrap"),
    out_path: str = typer.Option(..., "--out", help="policy file to write (loads with certa run --policy)"),
    method: Optional[str] = typer.Option(None, help="sc: threshold (default), pareto, esc, adaptive-consistency; "
                                                    "cot: certa (default), probe (Dynasor's rule), grounded, "
                                                    "confident, progress, settled"),
    orders: Optional[int] = typer.Option(None, help="SC: draw orders replayed per problem (default 1; label-free 20)"),
    dataset: Optional[str] = typer.Option(None, help="grading rules and reserved-split guard (default: the "
                                                     "traces' dataset field, else math)"),
    reps: int = typer.Option(1000, help="bootstrap resamples"),
    risk: Optional[float] = RISK, delta: float = DELTA, reference: str = REFERENCE,
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Choose a policy on a calibration split of the traces; report it on the held-out split (--risk: label-free).

    Example: certa calibrate --program sc --traces t.jsonl --cal-fraction 0.5 --seed 0 --out policy.json
    """
    if risk is not None:
        return calibrate_cmd(program, traces, out_path, risk=risk, delta=delta, reference=reference, orders=orders,
                             seed=seed, dataset=dataset, debug=debug)
    try:
        from certa.eval.calibration import calibrate_split
        result = calibrate_split(load_traces_arg(traces), _program(program), cal_fraction=cal_fraction, seed=seed,
                                 method=method, orders=orders or 1, dataset=dataset, reps=reps)
        result["traces"] = str(traces)
        write_json(out_path, result)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    c, h = result["calibration"], result["heldout"]
    typer.echo(f"policy {json.dumps(result['policy'])} program {json.dumps(result['program'])}")
    typer.echo(f"calibration ({c['problems']} problems): accuracy {c['accuracy']:.3f} "
               f"(baseline {c['baseline_accuracy']:.3f}), "
              f"tokens x{c['token_ratio']:.3f}")
    ci = h["ci95"]
    typer.echo(f"held-out ({h['bootstrap']['problems']} problems): accuracy {h['accuracy']:.3f} "
              f"({100 * h['accuracy_delta']:+.1f} pt, 95% CI {_pt(ci['accuracy_delta'])}), "
              f"tokens x{h['token_ratio']:.3f} "
              f"(95% CI {_x(ci['token_ratio'])}), at matched accuracy x{_f(h['iso_token_ratio'])}")
    for name, alt in result.get("alternatives", {}).items():
        a = alt["heldout"]
        typer.echo(f"alternative {name} {json.dumps(alt['policy'])}: held-out accuracy {a['accuracy']:.3f} "
                   f"({100 * a['accuracy_delta']:+.1f} pt), tokens x{a['token_ratio']:.3f} "
                   f"(95% CI {_x(a['ci95']['token_ratio'])})")
    typer.echo(f"wrote {out_path}")


def _f(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _x(ci: list) -> str:
    return f"[{_f(ci[0])}, {_f(ci[1])}]"


def _pt(ci: list) -> str:
    return "[n/a]" if ci[0] is None else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] pt"


@bench_app.command("tokens")
def bench_tokens(
    program: str = _PROGRAM,
    traces: str = _TRACES,
    json_out: str = typer.Option(..., "--json", help="report JSON to write"),
    png: Optional[str] = typer.Option(None, help="also plot accuracy vs tokens here (needs matplotlib)"),
    cal_fraction: float = typer.Option(0.5, help="share of problems used for calibration (the rest is held out)"),
    seed: int = typer.Option(0, help="seed of the split, the SC draw orders and the bootstrap"),
    orders: Optional[int] = typer.Option(None, help="SC: seeded draw orders replayed per problem (default 20)"),
    dataset: Optional[str] = typer.Option(None, help="grading rules and reserved-split guard"),
    reps: int = typer.Option(1000, help="bootstrap resamples"),
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="SC: score this fixed policy file on the "
                                               "whole trace file, no calibration (repeatable)"),
    shipped: Optional[list[str]] = typer.Option(None, "--shipped", "--preset", help="SC: score a shipped policy by "
                                                "name (sc-default, weighted-vote, esc, adaptive-consistency, "
                                                "certa-threshold; repeatable; --preset: its old name)"),
    final: bool = typer.Option(False, "--final", help="score every row, reserved ones too (SC: with "
                                                      "--policy/--shipped; probe banks: cot, sc-cot): a final report"),
    chains: Optional[int] = typer.Option(None, help="sc-cot: chains per problem (default: all of each problem's)"),
    label_free: bool = LABEL_FREE, online: bool = ONLINE, risk: Optional[float] = RISK, delta: float = DELTA,
    reference: str = REFERENCE,
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Token-vs-accuracy curves and iso-accuracy savings of every method on the held-out split;
    with --policy/--shipped (SC), fixed policies scored on the whole file beside the baselines;
    on a probe bank (cot, sc-cot), the fixed defaults and their peers on every chain.

    Example: certa bench tokens --program sc --traces t.jsonl --json sc.json --png sc.png
    Example: certa bench tokens --program sc --traces t.jsonl --shipped sc-default --policy p.json --json f.json
    Example: certa bench tokens --program cot --traces Qwen3-8B_amc23.jsonl.gz --json cot.json
    Example: certa bench tokens --program sc --traces t.jsonl --label-free --online --risk 0.05 --json lf.json
    """
    if label_free or online:  # certa.cli.labelfree: the peers' rows and the label-free ones
        return bench_cmd(program, traces, json_out, label_free=label_free, online=online, risk=risk, delta=delta,
                         reference=reference, seed=seed, orders=orders, reps=reps, dataset=dataset, chains=chains, debug=debug)
    orders = orders if orders is not None else 20 if program == "sc" else 1
    if program in ("cot", "sc-cot") and not (policy or shipped):
        if _bench_bank(program, traces, json_out, final=final, chains=chains, seed=seed, reps=reps, dataset=dataset,
                       debug=debug):
            return
    if policy or shipped or final:
        _bench_fixed(program, traces, json_out, png, policy or [], shipped or [], final, seed=seed, orders=orders,
                     dataset=dataset, reps=reps, debug=debug)
        return
    try:
        from certa.eval.bench_tokens import bench_tokens as run_bench, plot
        report = run_bench(load_traces_arg(traces), _program(program), cal_fraction=cal_fraction, seed=seed, orders=orders,
                           dataset=dataset, reps=reps)
        write_report(report, traces, json_out, png, plot)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    typer.echo(f"{report['program']}: {report['heldout_problems']} held-out of {report['problems']} problems "
              f"({', '.join(report['models'])})")
    for name, m in report["methods"].items():
        if "tokens" not in m:
            typer.echo(f"  {name:22s} skipped: {m.get('skipped')}")
            continue
        typer.echo(f"  {name:22s} acc {m['accuracy']:.3f} ({100 * m['accuracy_delta']:+5.1f} pt)  "
                   f"tokens {m['tokens']:9.1f}  "
                  f"x{m['token_ratio']:.3f} {_x(m['ci95']['token_ratio'])}  iso x{_f(m['iso_token_ratio'])}  "
                  f"{m.get('label', '')}")
    t = report["targets"]
    typer.echo(f"target <= {t['token_ratio']}x within {100 * t['accuracy_drop']:.1f} pt: "
              f"{'met by ' + ', '.join(t['met_by']) if t['met'] else 'not met'}")
    typer.echo(f"wrote {json_out}" + (f" and {png}" if png else ""))


def _bench_fixed(program: str, traces: str, json_out: str, png: Optional[str], files: list[str], shipped: list[str],
                 final: bool, **kw: Any) -> None:
    """``certa bench tokens --policy/--shipped``: fixed SC policies on the whole file (no calibration)."""
    debug = kw.pop("debug")
    try:
        if _program(program) != "sc":
            raise ConfigError("--policy/--shipped/--final score fixed SC policies", hint="use --program sc")
        if not files and not shipped:
            raise ConfigError("--final scores fixed policies only", hint="add --policy FILE or --shipped NAME")
        from certa.eval.bench_fixed import bench_fixed, load_policy, plot_fixed, shipped_policy
        chosen = {name: shipped_policy(name) for name in shipped}
        chosen |= {Path(f).stem if Path(f).stem not in chosen else f: load_policy(f) for f in files}
        report = bench_fixed(load_traces_arg(traces), chosen, final=final, **kw)
        write_report(report, traces, json_out, png, plot_fixed)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    if final:
        typer.echo("FINAL REPORT: fixed policies on every row of the file, reserved rows allowed; "
                   "nothing was tuned here")
    typer.echo(f"sc (fixed policies, no calibration): {report['problems']} problems x {report['samples_per_problem']} "
               f"samples, {report['orders']} draw orders ({', '.join(report['models'])})")
    echo_rows(report["methods"])
    typer.echo(f"wrote {json_out}" + (f" and {png}" if png else ""))


def echo_rows(methods: dict[str, Any]) -> None:
    for name, m in methods.items():
        lost = f" lost {m['lost']}" if "lost" in m else ""
        typer.echo(f"  {name:22s} acc {m['accuracy']:.3f} ({100 * m['accuracy_delta']:+5.1f} "
                   f"{_pt(m['ci95']['accuracy_delta'])}{lost})  tokens {m['tokens']:9.1f}  "
                   f"x{m['token_ratio']:.3f} {_x(m['ci95']['token_ratio'])}  iso x{_f(m['iso_token_ratio'])}  "
                   f"{m.get('label', '')}")


def _bench_bank(program: str, traces: str, json_out: str, *, final: bool, chains: Optional[int], debug: bool,
                **kw: Any) -> bool:
    """``certa bench tokens --program cot|sc-cot`` on a probe bank (fixed rules on every chain);
    False when the file is not a probe bank (cot then runs the calibrate/held-out benchmark)."""
    try:
        from certa.eval.bench_chains import bench_chains, is_probe_bank
        problems = load_traces_arg(traces)
        if not is_probe_bank(problems):
            if program == "sc-cot":
                raise ConfigError("--program sc-cot replays probe banks (chains with probe_tokens)",
                                  hint="see shared/data/probes, or collect with `certa traces collect`")
            return False
        if program == "sc-cot":
            from certa.eval.bench_sc_cot import bench_sc_cot
            report = bench_sc_cot(problems, chains=chains, final=final, **kw)
        else:
            report = bench_chains(problems, final=final, **kw)
        write_report(report, traces, json_out, None, None)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    head = "FINAL REPORT: every row, reserved ones too; nothing was tuned on this file. " if final else \
        (f"{report['reserved_skipped']} reserved rows skipped (--final scores them). " if report["reserved_skipped"] else "")
    typer.echo(f"{head}{program} on a probe bank: {report['problems']} problems ({', '.join(report['models'])}); "
               f"fixed rules, no calibration")
    echo_rows(report["methods"])
    typer.echo(f"wrote {json_out}")
    return True


@traces_app.command("collect")
def collect(
    dataset: str = typer.Option("gsm8k", help="gsm8k, math500, ... or a .jsonl path"),
    idx: str = typer.Option(..., help="problem indices, e.g. 0:80 (reserved splits are refused)"),
    samples: int = typer.Option(16, help="samples per problem"),
    probe_interval: int = typer.Option(32, help="tokens between probes"),
    probe_samples: int = typer.Option(4, help="how many of the samples are probed"),
    out_path: str = typer.Option(..., "--out", help="trace file (appended; a rerun resumes)"),
    model: Optional[str] = typer.Option(None, help="GGUF path or known name (default: certa's default model)"),
    max_tokens: int = typer.Option(512, help="decode budget per sample"),
    seed: int = typer.Option(0, help="sample i uses seed * 100000 + i, as certa run sc does"),
    threads: Optional[int] = typer.Option(None, help="CPU threads for the engine (default: all cores)"),
    backend: str = typer.Option("llamacpp", help="llamacpp, or scripted (a fake, for demos and tests)"),
    levels: Optional[str] = typer.Option(None, help="keep only these difficulty levels, e.g. 1,2,3 "
                                                    "(datasets with a 'level' field, as MATH-500)"),
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Collect SC samples and CoT probe answers per problem into a resumable trace file.

    Example: certa traces collect --dataset gsm8k --idx 0:80 --samples 16 --probe-samples 4 --out t.jsonl
    """
    try:
        from certa.eval.collect import CollectConfig, collect_traces
        from certa.eval.datasets import load_dataset
        cfg = CollectConfig(samples=samples, probe_samples=probe_samples, interval=probe_interval,
                            max_tokens=max_tokens, seed=seed)
        problems = _at_levels(load_dataset(dataset, idx=idx), levels)
        factory = _factory(backend, model, cfg, threads)
        console.print(f"collecting {len(problems)} {dataset} problems x {samples} samples into {out_path}")
        report = asyncio.run(collect_traces(problems, out_path, factory, cfg, on_problem=_progress))
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/yellow]: {out_path} keeps every finished problem (rerun to resume)")
        raise typer.Exit(130) from None
    typer.echo(f"wrote {report.written} problems ({report.skipped} already in {out_path}) in {report.wall_s:.0f}s")


@traces_app.command("import")
def import_cmd(
    src: str = typer.Argument(..., help="JSONL (or .jsonl.gz) of reasoning-model outputs"),
    out_path: str = typer.Argument(..., help="trace file to write (.jsonl, or .jsonl.gz compressed)"),
    fmt: str = typer.Option("auto", "--format", help="reasoning-gsm8k, reasoning-aime, reasoning-math500, vllm, "
                                                     "sglang, openai, or auto (by the rows' fields)"),
    interval: int = typer.Option(32, help="tokens between text probes"),
    dataset: Optional[str] = typer.Option(None, help="grading rules (default: from the format, the rows or the "
                                                     "file name; else math)"),
    model: Optional[str] = typer.Option(None, help="model name to record (default: from the file name)"),
    tokenizer: Optional[str] = typer.Option(None, help="GGUF path or known name whose vocab counts tokens "
                                                       "(default: certa's small model, vocab only)"),
    keep_reserved: bool = typer.Option(False, help="also import reserved rows (GSM8K idx >= 800, MATH-500 "
                                                   "idx >= 300; skipped by default)"),
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Import reasoning-model outputs (<think> chains) as traces with text probes every --interval tokens.

    Example: certa traces import --format reasoning-gsm8k Qwen3-0.6B_gsm8k.jsonl.gz qwen3.jsonl.gz
    """
    try:
        from certa.eval.importers import Tokenizer, import_traces
        report = import_traces(src, out_path, fmt=fmt, interval=interval, dataset=dataset, model=model,
                               tokenizer=Tokenizer.default(tokenizer) if tokenizer else None,
                               keep_reserved=keep_reserved)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    for line, why in report.skipped:
        console.print(f"skipped {Path(src).name}:{line}: {why}")
    typer.echo(f"wrote {report.written} problems ({report.samples} chains) to {out_path}; "
               f"{len(report.skipped)} rows skipped; tokens counted with {report.tokenizer}")


@traces_app.command("headroom")
def headroom_cmd(
    traces: str = _TRACES,
    json_out: Optional[str] = typer.Option(None, "--json", help="also write the bounds as JSON"),
    final: bool = typer.Option(False, "--final", help="include reserved rows"),
    debug: bool = typer.Option(False, help="show full tracebacks"),
) -> None:
    """Hindsight bounds of CoT early exit on a probe bank: exit where the chain's probes have settled
    on its final answer for good, or at its first correct probe (ORACLE: they read the answer).

    Example: certa traces headroom --traces Qwen3-8B_amc23.jsonl.gz
    """
    try:
        from certa.eval.bench_chains import headroom
        report = headroom(load_traces_arg(traces), final=final)
        if json_out:
            write_json(json_out, report)
    except (CertaError, OSError) as exc:
        fail(exc, debug)
    typer.echo(f"{report['problems']} problems, {report['chains']} chains ({', '.join(report['models'])}): full chains "
               f"accuracy {report['accuracy']:.3f}, {report['tokens']:.0f} tokens a chain")
    for name, m in report["bounds"].items():
        typer.echo(f"  {name:22s} x{m['token_ratio']:.3f} ({100 * m['accuracy_delta']:+.1f} pt)  {m['label']}")


def _at_levels(problems: list, levels: Optional[str]) -> list:
    """The problems whose ``level`` (an int, or text like "Level 2") is in ``levels`` ("1,2,3")."""
    if not levels:
        return problems
    try:
        wanted = {int(x) for x in levels.split(",") if x.strip()}
    except ValueError:
        raise ConfigError(f"--levels takes integers like 1,2,3, got {levels!r}") from None
    if not any("level" in p.meta for p in problems):
        raise ConfigError("--levels: this dataset has no 'level' field")

    def level(p: Any) -> int | None:
        digits = "".join(ch for ch in str(p.meta.get("level", "")) if ch.isdigit())
        return int(digits) if digits else None
    kept = [p for p in problems if level(p) in wanted]
    if not kept:
        raise ConfigError(f"no problem at levels {sorted(wanted)} among the {len(problems)} selected")
    return kept


def _progress(row: dict) -> None:
    right = sum(bool(s["correct"]) for s in row["samples"])
    console.print(f"  idx {row['idx']}: {right}/{len(row['samples'])} correct, {row['wall_s']:.0f}s")


def _factory(backend: str, model: Optional[str], cfg: Any, threads: Optional[int]):
    if backend == "scripted":
        from certa.runtime.backends.testing.scripted import ScriptedBackend
        return lambda: ScriptedBackend(probe=lambda text, suffix: "1} \\]")
    if backend != "llamacpp":
        raise ConfigError(f"traces collect runs on llamacpp (or the scripted fake), not {backend!r}")
    from certa.runtime.backends.llamacpp.backend import LlamaCppBackend
    n_ctx = cfg.samples * (cfg.max_tokens + cfg.probe_tokens + 64) + 2048
    return lambda: LlamaCppBackend(model, n_seq=cfg.samples, n_ctx=n_ctx, n_threads=threads, seed=cfg.seed)


app.add_typer(bench_app, name="bench", help=BENCH_HELP)
app.add_typer(traces_app, name="traces", help=TRACES_HELP)
