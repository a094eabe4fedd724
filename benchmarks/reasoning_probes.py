"""Choose and score the CoT certaindex default on the probe banks, leave-one-model/dataset-out.

For every dev probe bank (``../shared/data/probes``: two reasoning models x MATH-500 / AMC23 /
AIME24, several chains per problem, the model's own sampled probes every 64 tokens; MATH-500
idx >= 300 is reserved and never read here), every candidate rule is replayed through the
real replay code (``Replayer`` -> ``ReplayCoT`` -> ``read_chunk``, the function ``cot_program``
runs live) on every chain:

* ``certa`` candidates: ``reasoning_signal(span, share, every, conclude_span)`` — the shipped
  family: exit on a box in the thinking, or once the text's latest statement and a ``share`` of
  the probes of the last ``span`` tokens (``conclude_span`` after a mere conclusion) agree;
* ``dynasor`` candidates: Dynasor's rule, the last k probes agree and none hesitates.

A rule is chosen on training files only: the fewest pooled tokens (problems pooled over the
files) whose pooled accuracy is within ``--pooled-tol`` of full chains and whose every file is
within ``--file-tol``. Folds: leave-one-model-out (train on the other model's three files),
leave-one-dataset-out (train on the other two benchmarks of both models), and all dev files
(the shipped default). Each fold's choice is scored on its held-out files; the per-file table
puts full chains, the shipped default, the LOO choice, Dynasor at its LOO k and at the
default's accuracy, and the hindsight bounds side by side.

Usage:
    python benchmarks/reasoning_probes.py --out docs/results/reasoning_probes [--reuse] [--jobs 2]

Writes ``<cache>/scores_<file>.json`` (per-problem tokens/correct of every candidate: what
``--reuse`` reads; not committed), ``<out>/summary.json``, ``<out>/table.md`` and ``<out>/pareto.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _banks import add_banks_option, bank_dirs, bank_files  # sibling module: benchmarks/ is on sys.path

SPANS, CONCLUDE_SPANS, SHARES, EVERY = (256, 512, 768), (1024, 1536, 2048, 3072), (0.75, 1.0), (64, 128)
KS = (4, 8, 12, 16, 24, 32, 48, 64)


def candidates() -> dict[str, dict]:
    out = {f"certa:{s}:{c}:{q}:{e}": {"family": "certa", "span": s, "conclude_span": c, "share": q, "every": e}
           for s, c, q, e in itertools.product(SPANS, CONCLUDE_SPANS, SHARES, EVERY)}
    out |= {f"dynasor:{k}": {"family": "dynasor", "k": k} for k in KS}
    return out


def score_file(path: str) -> dict:
    """Every candidate's per-problem tokens and correctness on one bank's dev rows."""
    from certa.algorithms.signals.cot import ProbeAgreement
    from certa.algorithms.signals.reasoning import reasoning_signal
    from certa.eval.bench_chains import PROBE_BUDGET, oracle_chains, split_reserved
    from certa.eval.calibration import even_ladder
    from certa.eval.replay_eval import Replayer
    from certa.eval.traces import load_traces
    from certa.runtime.policy import Threshold

    dev, reserved = split_reserved(load_traces(path))
    rep = Replayer(dev, "cot", probe_tokens=PROBE_BUDGET)
    first = Threshold(1.0, detect_at=1, every=1)
    full = even_ladder(rep)[-1].run(rep)
    rows = {"full": full, "oracle-settled": oracle_chains(rep, "settled"),
            "oracle-first-correct": oracle_chains(rep, "first-correct")}
    for name, c in candidates().items():
        sig = reasoning_signal(c["span"], c["share"], c["every"], c["conclude_span"]) if c["family"] == "certa" \
            else ProbeAgreement(c["k"])
        rows[name] = rep.run(first, k=sig.window, interval=64, signal=sig)
    return {"file": Path(path).name, "idx": list(rep.idx), "reserved_skipped": len(reserved),
            "scores": {n: {"tokens": [round(float(x), 3) for x in s.tokens],
                           "correct": [round(float(x), 6) for x in s.correct]} for n, s in rows.items()}}


def pooled(files: list[dict], name: str) -> tuple[float, float]:
    """(token ratio, accuracy delta in points) of candidate ``name`` pooled over ``files``' problems."""
    tok = sum(sum(f["scores"][name]["tokens"]) for f in files)
    base = sum(sum(f["scores"]["full"]["tokens"]) for f in files)
    cor = sum(sum(f["scores"][name]["correct"]) for f in files)
    bc = sum(sum(f["scores"]["full"]["correct"]) for f in files)
    n = sum(len(f["idx"]) for f in files)
    return tok / base, 100.0 * (cor - bc) / n


def choose(files: list[dict], family: str, pooled_tol: float, file_tol: float) -> str | None:
    """The candidate of ``family`` with the fewest pooled tokens within the accuracy tolerances."""
    best = None
    for name in (n for n in files[0]["scores"] if n.startswith(family + ":")):
        ratio, delta = pooled(files, name)
        if delta < -pooled_tol or any(pooled([f], name)[1] < -file_tol for f in files):
            continue
        if best is None or ratio < best[1]:
            best = (name, ratio)
    return best[0] if best else None


def iso_dynasor(f: list[dict], accuracy_delta: float) -> float | None:
    """Tokens ratio Dynasor's k-curve needs to reach ``accuracy_delta`` (linear between ks)."""
    pts = sorted(pooled(f, f"dynasor:{k}") for k in KS)
    best = -1e9
    prev = None
    for ratio, delta in pts:
        delta = max(delta, best)
        if delta >= accuracy_delta - 1e-9:
            if prev is None or delta <= prev[1]:
                return ratio
            return prev[0] + (ratio - prev[0]) * (accuracy_delta - prev[1]) / (delta - prev[1])
        best, prev = delta, (ratio, delta)
    return None


def model_of(f: dict) -> str:
    return f["file"].split("_")[0]


def dataset_of(f: dict) -> str:
    return f["file"].split("_")[1].split(".")[0]


def folds(files: list[dict]) -> dict[str, tuple[list[dict], list[dict]]]:
    out = {}
    for m in sorted({model_of(f) for f in files}):
        out[f"LOMO:{m}"] = ([f for f in files if model_of(f) != m], [f for f in files if model_of(f) == m])
    for d in sorted({dataset_of(f) for f in files}):
        out[f"LODO:{d}"] = ([f for f in files if dataset_of(f) != d], [f for f in files if dataset_of(f) == d])
    return out


def summarize(files: list[dict], pooled_tol: float, file_tol: float) -> dict:
    default = choose(files, "certa", pooled_tol, file_tol)
    out: dict = {"criterion": {"pooled_tol_pt": pooled_tol, "file_tol_pt": file_tol},
                 "default": default, "default_dynasor_k": choose(files, "dynasor", pooled_tol, file_tol), "folds": {}}
    loo: dict[str, dict[str, str | None]] = {}
    for fold, (train, test) in folds(files).items():
        c, d = choose(train, "certa", pooled_tol, file_tol), choose(train, "dynasor", pooled_tol, file_tol)
        out["folds"][fold] = {"certa": c, "dynasor": d, "test": {f["file"]: {
            "certa": pooled([f], c) if c else None, "dynasor": pooled([f], d) if d else None} for f in test},
            "test_pooled": {"certa": pooled(test, c) if c else None, "dynasor": pooled(test, d) if d else None}}
        for f in test:
            loo.setdefault(f["file"], {}).update({fold.split(":")[0]: {"certa": c, "dynasor": d}})
    table = {}
    for f in files:
        base_acc = float(np.mean(f["scores"]["full"]["correct"]))
        row = {"problems": len(f["idx"]), "full_accuracy": round(base_acc, 4),
               "full_tokens": round(float(np.mean(f["scores"]["full"]["tokens"])), 1)}
        for key in ("oracle-settled", "oracle-first-correct"):
            row[key] = pooled([f], key)
        if default:
            row["certa-default"] = pooled([f], default)
            row["dynasor_at_default_accuracy"] = iso_dynasor([f], row["certa-default"][1])
        for kind, picks in loo[f["file"]].items():
            row[f"{kind}-certa"] = pooled([f], picks["certa"]) if picks["certa"] else None
            row[f"{kind}-dynasor"] = pooled([f], picks["dynasor"]) if picks["dynasor"] else None
            row[f"{kind}-picks"] = picks
        table[f["file"]] = row
    out["files"] = table
    out["pooled_by_model"] = {}
    for m in sorted({model_of(f) for f in files}):
        mine = [f for f in files if model_of(f) == m]
        lomo = out["folds"][f"LOMO:{m}"]
        entry = {"oracle-settled": pooled(mine, "oracle-settled"), "LOMO-certa": lomo["test_pooled"]["certa"],
                 "LOMO-dynasor": lomo["test_pooled"]["dynasor"]}
        if default:
            entry["certa-default"] = pooled(mine, default)
            entry["dynasor_at_default_accuracy"] = iso_dynasor(mine, entry["certa-default"][1])
        out["pooled_by_model"][m] = entry
    return out


def fmt(x) -> str:
    return "—" if x is None else f"{x[0]:.3f}× ({x[1]:+.1f} pt)" if isinstance(x, (list, tuple)) else f"{x:.3f}×"


def write_table(summary: dict, path: Path) -> None:
    lines = [f"Default chosen on all dev files: `{summary['default']}` (criterion: pooled within "
             f"{summary['criterion']['pooled_tol_pt']} pt, every file within {summary['criterion']['file_tol_pt']} pt)", "",
             "| file | full chain acc, tokens | certa-default | certa LOMO | certa LODO | Dynasor LOMO k | "
             "Dynasor at default's acc | ORACLE settled | ORACLE first correct |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in summary["files"].items():
        lines.append(f"| {name} | {r['full_accuracy']:.3f}, {r['full_tokens']:.0f} | {fmt(r.get('certa-default'))} | "
                     f"{fmt(r.get('LOMO-certa'))} | {fmt(r.get('LODO-certa'))} | {fmt(r.get('LOMO-dynasor'))} | "
                     f"{fmt(r.get('dynasor_at_default_accuracy'))} | {fmt(r['oracle-settled'])} | "
                     f"{fmt(r['oracle-first-correct'])} |")
    lines += ["", "| model (pooled) | certa-default | certa LOMO | Dynasor LOMO | Dynasor at default's acc | ORACLE settled |",
              "|---|---|---|---|---|---|"]
    for m, e in summary["pooled_by_model"].items():
        lines.append(f"| {m} | {fmt(e.get('certa-default'))} | {fmt(e['LOMO-certa'])} | {fmt(e['LOMO-dynasor'])} | "
                     f"{fmt(e.get('dynasor_at_default_accuracy'))} | {fmt(e['oracle-settled'])} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot(files: list[dict], summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, m in zip(axes, sorted({model_of(f) for f in files})):
        mine = [f for f in files if model_of(f) == m]
        for fam, color in (("certa", "tab:blue"), ("dynasor", "tab:orange")):
            pts = [pooled(mine, n) for n in mine[0]["scores"] if n.startswith(fam + ":")]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.5, color=color, label=f"{fam} grid")
        if summary["default"]:
            d = pooled(mine, summary["default"])
            ax.scatter([d[0]], [d[1]], marker="*", s=200, color="tab:blue", edgecolor="k", label="certa-default")
        s = pooled(mine, "oracle-settled")
        ax.scatter([s[0]], [s[1]], marker="x", s=80, color="k", label="ORACLE settled")
        ax.axhline(-1.0, color="r", lw=0.8, ls="--")
        ax.set_xlim(0.4, 1.05)
        ax.set_ylim(-12, 3)
        ax.set_title(f"{m}: MATH-500 dev + AMC23 + AIME24, pooled", fontsize=9)
        ax.set_xlabel("tokens / full chains (probe decode counted)")
        ax.set_ylabel("accuracy delta (pt)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_banks_option(ap)
    ap.add_argument("--out", default="docs/results/reasoning_probes", help="summary.json, table.md, pareto.png")
    ap.add_argument("--cache", default="out/reasoning_probes", help="per-problem scores of every candidate")
    ap.add_argument("--reuse", action="store_true", help="read the cache's scores_<file>.json of an earlier run")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--pooled-tol", type=float, default=0.25, help="pooled accuracy tolerance, points")
    ap.add_argument("--file-tol", type=float, default=1.5, help="per-file accuracy tolerance, points (1.5: one "
                                                                     "chain of a 30-problem x 3-chain file)")
    args = ap.parse_args(argv)
    banks, out, cache = bank_dirs(args, "out", "cache")
    paths = bank_files(banks)
    todo = [p for p in paths if not (args.reuse and (cache / f"scores_{Path(p).name}.json").exists())]
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for res in pool.map(score_file, todo):
            (cache / f"scores_{res['file']}.json").write_text(json.dumps(res), encoding="utf-8")
            print(f"scored {res['file']} ({len(res['idx'])} problems, {time.time() - t0:.0f} s)", flush=True)
    files = [json.loads((cache / f"scores_{Path(p).name}.json").read_text()) for p in paths]
    summary = summarize(files, args.pooled_tol, args.file_tol)
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    write_table(summary, out / "table.md")
    plot(files, summary, out / "pareto.png")
    print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
