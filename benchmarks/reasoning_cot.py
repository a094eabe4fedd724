"""CoT early exit on real reasoning-model traces: text probes, Dynasor's rule, every certa signal.

Imports the six files of ``../shared/data/reasoning/`` (``certa traces import``, text probes
every 32 tokens, Qwen2.5 BPE counts), then per file:

1. ``certa bench tokens --program cot`` on the file (calibrated on one half, reported on the
   other, bootstrap CIs): full chains, Dynasor's presets with text probes, every certa signal
   (``text`` = :class:`~certa.algorithms.signals.text.Committed`), the hindsight oracle, and
   ``certa-text``, the shipped fixed default (``cot_program("text")``);
2. on all of the file's dev problems: every candidate of the text grid and Dynasor's rule with
   text probes (k x T), for the leave-one-model-out choice of one fixed default: for each
   model, the rule with the lowest mean token ratio whose accuracy is within ``--tolerance``
   of full chains on every file of the *other* models, reported on the left-out model's
   files; the fixed default is the same choice over all files. Beside it, Dynasor's rule with
   text probes at equal accuracy (the tokens its k x T curve needs for the default's accuracy).

MATH-500 rows idx >= 300 are reserved: only idx < 300 are used. Writes
``docs/results/reasoning/<file>.json`` + ``.png`` and ``summary.json``. Not a timed test.

    python benchmarks/reasoning_cot.py --src ../shared/data/reasoning --traces data/traces/reasoning \\
        --out-dir docs/results/reasoning
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from certa.algorithms.programs.cot_probe import TEXT_DEFAULT, TEXT_INTERVAL, text_signal
from certa.eval.bench_tokens import bench_tokens, candidate_label, plot
from certa.eval.calibration import Candidate
from certa.eval.cot_grid import TEXT_GRID, forced_answer_oracle, forced_answer_run
from certa.eval.importers import import_traces
from certa.eval.replay_eval import Replayer
from certa.eval.traces import TraceProblem, load_traces
from certa.runtime.policy import Threshold

FILES: tuple[tuple[str, str, str], ...] = (  # (file stem, format, model)
    ("Qwen3-0.6B_gsm8k", "reasoning-gsm8k", "Qwen3-0.6B"),
    ("Phi-4-mini-reasoning_gsm8k", "reasoning-gsm8k", "Phi-4-mini-reasoning"),
    ("DeepSeek-R1-Distill-Llama-8B_gsm8k", "reasoning-gsm8k", "DeepSeek-R1-Distill-Llama-8B"),
    ("DeepSeek-R1-Distill-Llama-8B_aime", "reasoning-aime", "DeepSeek-R1-Distill-Llama-8B"),
    ("AceReason-Nemotron-7B_aime", "reasoning-aime", "AceReason-Nemotron-7B"),
    ("DeepSeek-R1-Distill-Qwen-32B_math500", "reasoning-math500", "DeepSeek-R1-Distill-Qwen-32B"),
)
RESERVED = {"math500": 300, "gsm8k": 800}
FIRST = Threshold(1.0, detect_at=1, every=1)


def dev_problems(path: Path) -> list[TraceProblem]:
    """The file's problems outside the reserved split."""
    probs = load_traces(path)
    ds = (probs[0].model_extra or {}).get("dataset", "")
    cut = RESERVED.get(str(ds))
    return [p for p in probs if cut is None or not isinstance(p.idx, int) or p.idx < cut]


def rule_grid(interval: int) -> dict[str, Candidate]:
    """Every fixed rule considered: the text grid and Dynasor's rule on text probes."""
    out: dict[str, Candidate] = {}
    for sig in TEXT_GRID:
        c = Candidate("text", FIRST, k=1, interval=interval, signal=sig)
        out[candidate_label(c)] = c
    for k in (2, 3, 5, 8, 16, 32):
        for t in (interval, 2 * interval) if k <= 8 else (2 * interval,):
            out[f"dynasor k={k} T={t}"] = Candidate("probe", FIRST, k=k, interval=t)
    return out


def evaluate(problems: list[TraceProblem], grid: dict[str, Candidate]) -> dict[str, Any]:
    """Token ratio and accuracy delta vs full chains of every rule, on all ``problems``."""
    rep = Replayer(problems, "cot")
    full = forced_answer_run(rep, None, k=1, interval=rep.interval)
    rows = {"full-chain": {"tokens": full.mean_tokens, "accuracy": full.accuracy}}
    oracle = forced_answer_oracle(rep)
    rows["oracle"] = {"tokens": oracle.mean_tokens, "accuracy": oracle.accuracy}
    for label, c in grid.items():
        s = forced_answer_run(rep, c.policy, k=c.k, interval=c.interval, signal=c.signal)
        rows[label] = {"tokens": s.mean_tokens, "accuracy": s.accuracy}
    for r in rows.values():
        r["token_ratio"] = round(r["tokens"] / full.mean_tokens, 4)
        r["accuracy_delta"] = round(r["accuracy"] - full.accuracy, 4)
        r["tokens"], r["accuracy"] = round(r["tokens"], 1), round(r["accuracy"], 4)
    return rows


def choose(results: dict[str, dict[str, Any]], files: list[str], labels: list[str], tolerance: float) -> str:
    """The rule with the lowest mean token ratio within ``tolerance`` on every file (ties: the earlier)."""
    best, best_ratio = "full-chain", 1.0
    for label in labels:
        rows = [results[f][label] for f in files]
        if any(r["accuracy_delta"] < -tolerance - 1e-9 for r in rows):
            continue
        ratio = statistics.fmean(r["token_ratio"] for r in rows)
        if ratio < best_ratio - 1e-9:
            best, best_ratio = label, ratio
    return best


def dynasor_iso(rows: dict[str, Any], accuracy: float) -> float | None:
    """Tokens Dynasor's rule with text probes needs for ``accuracy`` (linear on the monotone
    envelope of its k x T points and full chains); None if it never reaches it."""
    pts = sorted((r["tokens"], r["accuracy"]) for k, r in rows.items() if k.startswith("dynasor") or k == "full-chain")
    env: list[tuple[float, float]] = []
    for t, a in pts:
        if not env or a > env[-1][1]:
            env.append((t, a))
    if accuracy <= env[0][1]:
        return env[0][0]
    for (t0, a0), (t1, a1) in zip(env, env[1:]):
        if a0 <= accuracy <= a1:
            return t0 + (t1 - t0) * (accuracy - a0) / max(1e-12, a1 - a0)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="../shared/data/reasoning")
    ap.add_argument("--traces", default="data/traces/reasoning", help="where the imported traces go (and are read from with --reuse)")
    ap.add_argument("--out-dir", default="docs/results/reasoning")
    ap.add_argument("--interval", type=int, default=TEXT_INTERVAL)
    ap.add_argument("--tolerance", type=float, default=0.01, help="accuracy loss allowed (0.01 = 1 pt)")
    ap.add_argument("--reps", type=int, default=1000, help="bootstrap resamples of bench tokens")
    ap.add_argument("--reuse", action="store_true", help="keep traces already imported")
    ap.add_argument("--no-bench", action="store_true", help="skip the per-file bench tokens reports")
    args = ap.parse_args(argv)
    src, tdir, out = Path(args.src), Path(args.traces), Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    paths = {}
    for stem, fmt, model in FILES:
        path = tdir / f"{stem}.jsonl.gz"
        if not (args.reuse and path.is_file()):
            rep = import_traces(src / f"{stem}.jsonl.gz", path, fmt=fmt, interval=args.interval, model=model)
            print(f"imported {stem}: {rep.written} problems, {len(rep.skipped)} skipped, {rep.tokenizer}", flush=True)
        paths[stem] = path
    grid = rule_grid(args.interval)
    results = {}
    for stem, _, _ in FILES:
        results[stem] = evaluate(dev_problems(paths[stem]), grid)
        print(f"grid {stem}: {time.time() - t0:.0f}s", flush=True)
    text_labels = [k for k in grid if not k.startswith("dynasor")]
    models = sorted({m for _, _, m in FILES})
    loo = {}
    for m in models:
        train = [s for s, _, mm in FILES if mm != m]
        pick = choose(results, train, text_labels, args.tolerance)
        loo[m] = {"choice": pick, "heldout": {s: results[s][pick] for s, _, mm in FILES if mm == m}}
    default = choose(results, [s for s, _, _ in FILES], text_labels, args.tolerance)
    shipped = candidate_label(Candidate("text", FIRST, k=1, interval=TEXT_INTERVAL, signal=text_signal()))
    table = []
    for stem, _, model in FILES:
        rows = results[stem]
        d = rows[shipped]
        iso = dynasor_iso(rows, d["accuracy"])
        table.append({"file": stem, "model": model, "full_chain": rows["full-chain"], "oracle": rows["oracle"],
                      "default": d, "loo": rows[loo[model]["choice"]], "loo_choice": loo[model]["choice"],
                      "dynasor_tokens_at_default_accuracy": None if iso is None else round(iso, 1),
                      "beats_dynasor": iso is None or d["tokens"] < iso - 1e-9})
    summary = {"interval": args.interval, "tolerance": args.tolerance, "default_by_all_files": default,
               "shipped_default": shipped, "shipped_params": TEXT_DEFAULT, "loo": loo, "table": table,
               "grid": results}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    _print(table, default, shipped, loo)
    if not args.no_bench:
        for stem, _, _ in FILES:
            report = bench_tokens(dev_problems(paths[stem]), "cot", reps=args.reps)
            report["traces"] = f"{stem} (certa traces import, T={args.interval})"
            (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
            plot(report, out / f"{stem}.png")
            print(f"bench {stem}: {time.time() - t0:.0f}s", flush=True)
    return 0


def _print(table: list[dict], default: str, shipped: str, loo: dict) -> None:
    print(f"fixed default chosen on all files: {default}; shipped: {shipped}")
    for m, v in loo.items():
        print(f"  LOO {m}: {v['choice']}")
    print(f"{'file':40s} {'full acc':>8s} {'tokens':>7s} | {'default x':>9s} {'d pt':>6s} | "
          f"{'LOO x':>6s} {'d pt':>6s} |"
          f" {'oracle x':>8s} | dynasor@acc")
    for r in table:
        f, d, lo, o = r["full_chain"], r["default"], r["loo"], r["oracle"]
        dyn = r["dynasor_tokens_at_default_accuracy"]
        print(f"{r['file']:40s} {f['accuracy']:8.3f} {f['tokens']:7.0f} | {d['token_ratio']:9.3f} "
              f"{100 * d['accuracy_delta']:+6.1f} | {lo['token_ratio']:6.3f} {100 * lo['accuracy_delta']:+6.1f} | "
              f"{o['token_ratio']:8.3f} | {'n/a' if dyn is None else format(dyn / f['tokens'], '.3f') + 'x'}"
              f" {'beats' if r['beats_dynasor'] else 'LOSES'}")


if __name__ == "__main__":
    sys.exit(main())
