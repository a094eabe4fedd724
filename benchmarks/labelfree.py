"""Label-free, risk-controlled calibration on every dev set: certa-labelfree and certa-online rows.

Sets (development rows only; MATH-500 idx >= 300 is never read):

* SC: the two dev trace sets of ``data/traces`` (Qwen2.5-Coder-1.5B; GSM8K 80 x 16, MATH-500
  81 x 8), ``--sc-risk`` (0.05, the issue's), 20 draw orders;
* CoT: the probe banks of ``shared/data/probes`` pooled per model (MATH-500 dev + AMC23 +
  AIME24), at each ``--cot-risk`` and reference (``final``: answer change; ``consensus``: loss vs
  the other chains' answers);
* online: each model's MATH-500 dev bank alone, problems streamed in 5 seeded orders (explore rate
  10%; also 25% and 50% until the first certificate, for comparison).

Every set's loss table (every setting of the family replayed on every problem with the labels
removed: :func:`certa.eval.outcomes.outcomes`) is computed once and cached in ``--cache``; the
rows (:func:`certa.eval.labelfree_bench.rows_from`) are scored with the labels. Cross-fitting:
``--folds`` (2 = the issue's halves; the JSON also holds 10 folds). Writes ``<out>/summary.json``
and ``<out>/table.md``.

Usage:
    python benchmarks/labelfree.py --out docs/results/labelfree [--reuse]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _banks import add_banks_option, bank_dirs  # sibling module: benchmarks/ is on sys.path

SC_SETS = {"sc:gsm8k-1.5b": "data/traces/gsm8k_dev_qwen2.5-coder-1.5b.jsonl.gz",
           "sc:math500-1.5b": "data/traces/math500_dev_qwen2.5-coder-1.5b.jsonl.gz"}
MODELS = ("Qwen3-8B", "R1-Distill-Llama-8B")
DATASETS = ("math500", "amc23", "aime24")
WARMUPS = (0.25, 0.5)
"""Explore rates before the first certificate compared with the default (10% throughout) on the online streams."""


def pooled_bank(banks: Path, model: str) -> list:
    """The model's dev problems of every bank, idx prefixed by the dataset (unique when pooled)."""
    from certa.eval.bench_chains import split_reserved
    from certa.eval.traces import load_traces
    out = []
    for ds in DATASETS:
        dev, _ = split_reserved(load_traces(banks / f"{model}_{ds}.jsonl.gz"))
        out += [p.model_copy(update={"idx": f"{ds}:{p.idx}"}) for p in dev]
    return out


def _dump(out) -> dict:
    return {"idx": out.idx, "values": list(out.values), "lower": out.lower, "units": [list(u) for u in out.units],
            **{k: getattr(out, k).tolist() for k in ("loss", "tokens", "full_tokens", "explore_tokens")}}


def _load(d: dict):
    import numpy as np
    from certa.eval.outcomes import Outcomes, Unit
    return Outcomes(d["idx"], tuple(d["values"]), *(np.array(d[k]) for k in ("loss", "tokens", "full_tokens",
                                                                              "explore_tokens")),
                    d["lower"], [Unit(*u) for u in d["units"]])


def table(name: str, problems: list, program: str, cache: Path, reuse: bool) -> dict:
    """The loss table of ``problems`` (both references for CoT) and its graded accuracies, cached (JSON)."""
    import numpy as np
    from certa.eval.families import family
    from certa.eval.labelfree_bench import graded
    from certa.eval.outcomes import outcomes, rescore
    path = cache / f"{name.replace(':', '_')}.json"
    refs = ("final", "consensus") if program == "cot" else ("final",)
    if reuse and path.exists():
        d = json.loads(path.read_text(encoding="utf-8"))
        return {**{r: _load(d[r]) for r in refs}, "acc": np.array(d["acc"]), "full_acc": np.array(d["full_acc"]),
                "idx": d["idx"]}
    t0 = time.time()
    fam = family(program)
    out = outcomes(problems, fam)
    acc, full_acc = graded(problems, out, program)
    got = {"final": out, "acc": acc, "full_acc": full_acc, "idx": out.idx}
    if program == "cot":
        got["consensus"] = rescore(out, problems, fam, "consensus")
    path.write_text(json.dumps({**{r: _dump(got[r]) for r in refs}, "acc": acc.tolist(), "full_acc": full_acc.tolist(),
                                "idx": out.idx}), encoding="utf-8")
    print(f"{name}: {len(problems)} problems, {time.time() - t0:.0f} s", flush=True)
    return got


def subset(t: dict, prefix: str) -> dict:
    """The rows of a cached table whose idx starts with ``prefix`` (one dataset of a pooled bank)."""
    rows = [i for i, x in enumerate(t["idx"]) if str(x).startswith(prefix)]
    out = {k: t[k].subset(rows) for k in ("final", "consensus") if k in t}
    return {**out, "acc": t["acc"][rows], "full_acc": t["full_acc"][rows], "idx": [t["idx"][i] for i in rows]}


def brief(row: dict) -> dict:
    """What the summary keeps of a bench row."""
    keep = ("token_ratio", "accuracy_delta", "accuracy", "tokens", "baseline_tokens", "correct", "n", "ci95", "label",
            "folds", "streams", "oracle")
    return {k: row[k] for k in keep if k in row}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_banks_option(ap)
    ap.add_argument("--out", default="docs/results/labelfree")
    ap.add_argument("--cache", default="out/labelfree")
    ap.add_argument("--reuse", action="store_true", help="read cached loss tables")
    ap.add_argument("--sc-risk", type=float, default=0.05)
    ap.add_argument("--cot-risk", type=float, nargs="+", default=[0.05, 0.1])
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--sc-cot", action="store_true", help="also SC over CoT on each model's AMC23 + AIME24 banks "
                                                         "(slow: every setting runs the lock-step program)")
    args = ap.parse_args(argv)
    from certa.eval.labelfree_bench import rows_from
    from certa.selfcal import ExploreRate
    from certa.eval.traces import load_traces
    banks, out_dir, cache = bank_dirs(args, "out", "cache")
    summary: dict = {"delta": args.delta, "sets": {}}
    kw = {"delta": args.delta, "reps": args.reps}
    for name, path in SC_SETS.items():
        t = table(name, load_traces(ROOT / path), "sc", cache, args.reuse)
        rows = rows_from(t["final"], t["acc"], t["full_acc"], "sc", risk=args.sc_risk, **kw)
        rows["certa-labelfree-10fold"] = rows_from(t["final"], t["acc"], t["full_acc"], "sc", risk=args.sc_risk,
                                                   folds=10, rows=("certa-labelfree",), **kw)["certa-labelfree"]
        summary["sets"][name] = {"program": "sc", "problems": len(t["idx"]), "risk": args.sc_risk,
                                 "rows": {k: brief(v) for k, v in rows.items()}}
    for model in MODELS:
        t = table(f"cot:{model}", pooled_bank(banks, model), "cot", cache, args.reuse)
        for ref in ("final", "consensus"):
            for risk in args.cot_risk:
                rows = rows_from(t[ref], t["acc"], t["full_acc"], "cot", risk=risk, **kw,
                                 rows=("fixed-default", "certa-labelfree", "hindsight-labels"))
                rows["certa-labelfree-10fold"] = rows_from(t[ref], t["acc"], t["full_acc"], "cot", risk=risk, folds=10,
                                                           rows=("certa-labelfree",), **kw)["certa-labelfree"]
                summary["sets"][f"cot:{model}:{ref}:{risk:g}"] = {
                    "program": "cot", "problems": len(t["idx"]), "risk": risk, "reference": ref,
                    "rows": {k: brief(v) for k, v in rows.items()}}
                m = subset(t, "math500:")
                online = rows_from(m[ref], m["acc"], m["full_acc"], "cot", risk=risk, **kw,
                                   rows=("fixed-default", "certa-online", "hindsight-labels"))
                for warmup in WARMUPS:  # exploring more until the first certificate: what it costs and saves
                    online[f"certa-online-warmup{warmup:g}"] = rows_from(
                        m[ref], m["acc"], m["full_acc"], "cot", risk=risk, explore=ExploreRate(0.1, warmup),
                        rows=("certa-online",), **kw)["certa-online"]
                summary["sets"][f"online:{model}_math500:{ref}:{risk:g}"] = {
                    "program": "cot", "problems": len(m["idx"]), "risk": risk, "reference": ref,
                    "rows": {k: brief(v) for k, v in online.items()}}
    for model in MODELS if args.sc_cot else ():
        probs = [p for p in pooled_bank(banks, model) if not str(p.idx).startswith("math500:")]
        t = table(f"sc-cot:{model}", probs, "sc-cot", cache, args.reuse)
        rows = rows_from(t["final"], t["acc"], t["full_acc"], "sc-cot", risk=max(args.cot_risk), **kw,
                         rows=("fixed-default", "certa-labelfree", "hindsight-labels"))
        summary["sets"][f"sc-cot:{model}_amc23+aime24"] = {"program": "sc-cot", "problems": len(t["idx"]),
                                                           "risk": max(args.cot_risk),
                                                           "rows": {k: brief(v) for k, v in rows.items()}}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n", encoding="utf-8")
    lines = ["| set | problems | risk | row | x full compute [95% CI] | accuracy delta, pt |", "|---|---|---|---|---|---|"]
    for name, s in summary["sets"].items():
        for row, r in s["rows"].items():
            ci = r["ci95"]["token_ratio"]
            lines.append(f"| {name} | {s['problems']} | {s['risk']:g} | {row} | {r['token_ratio']:.3f} "
                         f"[{ci[0]:.3f}, {ci[1]:.3f}] | {100 * r['accuracy_delta']:+.2f} |")
    (out_dir / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
