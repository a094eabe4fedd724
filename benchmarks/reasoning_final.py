"""Issue 17: an answer-is-final classifier for text probes, chosen leave-one-model-out.

Per probe (every 32 tokens) of the imported reasoning traces (``data/traces/reasoning``), the
candidate is the trace's text-probe answer (the chain's committed answer there: what replay,
and the live program, answers on exit) and its features are
:func:`~certa.algorithms.signals.final.final_features`; the label is "the candidate equals
the chain's final answer". A logistic model (numpy, L2) is fitted on the GSM8K files of two
models; the rule "exit at the first probe with p >= tau" takes the tau with the lowest mean
token ratio within ``--tolerance`` of full chains on each training file, and is reported on
the left-out model's file. The same fit on all three GSM8K files, with its tau, is applied to
AIME and MATH-500 without tuning (``transfer``). Beside it: the shipped default
(``committed(conclude,2,150,800)``), the best tau of the LOO fit chosen on the left-out file
itself (an upper bound for the family), the hindsight oracles of the committed answer and of
the latest stated number, and why the first statement of the final value is hard to tell
from an intermediate one. Exit cost = the probe's position + the forced answer's decode
tokens (as ``forced_answer_run``; its 10 prefill tokens are reported apart). Not a timed test.

    python benchmarks/reasoning_final.py --traces data/traces/reasoning --out docs/results/reasoning/final_classifier.json
    python benchmarks/reasoning_final.py --candidate latest --out docs/results/reasoning/final_classifier_latest.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from certa.algorithms.answers.equivalence import grade, math_equal
from certa.algorithms.programs.cot_probe import text_signal
from certa.algorithms.signals import text as text_signals
from certa.algorithms.signals.final import FEATURES, final_features
from certa.eval.replay_backend import estimate_probe_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reasoning_cot import FILES, dev_problems  # noqa: E402

GSM8K = [stem for stem, _, _ in FILES if stem.endswith("gsm8k")]
TAUS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99)
_NUM = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
_STATED = re.compile(r"(?<![\w.^{_])-?\$?\d[\d,]*(?:\.\d+)?")
_CLAUSE_END = re.compile(r"(?:\s*(?:[A-Za-z']+\b|\\text\{[^{}]*\}|\\\)|\$|\*\*|\})){0,4}?\s*(?:[.;!\n]|,\s|$|\*\*)")


def stated_numbers(text: str) -> list[tuple[int, str]]:
    """Every number that closes a clause (a result, not an operand): (where its clause ends, value)."""
    out = []
    for m in _STATED.finditer(text):
        after = text[m.end():m.end() + 80]
        e = _CLAUSE_END.match(after)
        if e is not None and not text_signals.not_final(after[:e.end() + 1]):
            out.append((m.end() + e.end(), m.group(0).replace("$", "").replace(",", "")))
    return out


def chain_rows(path: Path) -> list[dict[str, Any]]:
    """Per chain: full-chain tokens/correctness and, per probe before the end, the candidate,
    its features, label, grade, exit cost, and whether the shipped default fires."""
    out = []
    for prob in dev_problems(path):
        extra = prob.model_extra or {}
        q, ds = str(extra.get("question") or ""), str(extra.get("dataset") or "math")
        smp = prob.samples[0]
        rule = text_signal().for_problem(q, ds)  # type: ignore[attr-defined]
        probes, numbers, latest_hit = [], stated_numbers(smp.text), None
        for p in smp.probes:
            if p.at >= smp.tokens:
                continue
            cand, sub = p.answer or "", smp.text[:p.chars]
            value = rule.committed(sub)
            latest = next((v for end, v in reversed(numbers) if end <= len(sub)), "")
            if latest_hit is None and latest and smp.pred and math_equal(latest, smp.pred):
                latest_hit = p.at + estimate_probe_tokens(latest)
            probes.append({"at": p.at, "cand": cand, "f": final_features(sub, q, ds)[1],
                           "label": bool(cand and smp.pred and math_equal(cand, smp.pred)),
                           "right": bool(cand and grade(cand, str(prob.gold), ds)),
                           "cost": p.at + estimate_probe_tokens(cand),
                           "default": value is not None and (not cand or text_signals.same_answer(cand, value))})
        mention = next((m.end() for m in _NUM.finditer(smp.text) if smp.pred and m.group(0).replace(",", "") ==
                        smp.pred.replace(",", "")), None)
        out.append({"tokens": smp.tokens, "correct": bool(smp.correct), "probes": probes, "latest_number_exit": latest_hit,
                    "first_mention": None if mention is None else mention / max(1, len(smp.text))})
    return out


_CONFIRM = re.compile(r"\b(?:yes|yep|correct|right|consistent|makes sense|matches|checks out|same)\b", re.IGNORECASE)
_MARK = re.compile(r"^\W*(?:so|therefore|thus|hence|that means|in total|altogether|overall|finally|total)\b",
                   re.IGNORECASE)


def latest_number_features(text: str, numbers: list[tuple[int, str]], q: str, ds: str,
                           qnums: set[str]) -> list[float]:
    """Features of the latest stated number as the candidate (``--candidate latest``)."""
    done, value = numbers[-1]
    same = [v == value for _, v in numbers]
    run = len(same) - next((i for i, s in enumerate(reversed(same)) if not s), len(same))
    first = same.index(True)
    tail = text[done:][-3000:]
    sentence = text[max(text.rfind("\n", 0, done - 1), text.rfind(". ", 0, done - 1)) + 1:done]
    stated = [st for st in text_signals.statements(text, dataset=ds, question=q) if st.value == value]
    log = math.log1p
    return [float(any(st.kind == "boxed" for st in stated)), float(any(st.kind == "answer" for st in stated)),
            float(any(st.kind == "conclude" for st in stated)), log(len(stated)), log(run), log(sum(same)),
            log(len(set(v for _, v in numbers))), sum(same[first:]) / len(same[first:]),
            log((len(text) - done) / 100), log((len(text) - numbers[first][0]) / 100),
            log(len(text_signals.DOUBT_RE.findall(tail))), float(bool(text_signals.DOUBT_RE.search(text[-200:]))),
            log(len(_CONFIRM.findall(tail))), float(value in qnums), float(text_signals.fits(value, ds, q)),
            float(bool(_MARK.search(sentence))), log(len(text) / 1000)]


def latest_rows(path: Path) -> list[dict[str, Any]]:
    """As :func:`chain_rows` with the latest stated number as the candidate: an upper-bound
    study only (replay and the live program answer with the committed statement, not this)."""
    out = []
    for prob in dev_problems(path):
        extra = prob.model_extra or {}
        q, ds = str(extra.get("question") or ""), str(extra.get("dataset") or "math")
        smp = prob.samples[0]
        numbers, qnums, probes = stated_numbers(smp.text), {n.replace(",", "") for n in _NUM.findall(q)}, []
        for p in smp.probes:
            sub = smp.text[:p.chars]
            seen = [(e, v) for e, v in numbers if e <= len(sub)]
            if p.at >= smp.tokens or not seen:
                continue
            cand = seen[-1][1]
            probes.append({"at": p.at, "cand": cand, "f": latest_number_features(sub, seen, q, ds, qnums),
                           "label": bool(smp.pred and math_equal(cand, smp.pred)),
                           "right": bool(grade(cand, str(prob.gold), ds)),
                           "cost": p.at + estimate_probe_tokens(cand), "default": False})
        out.append({"tokens": smp.tokens, "correct": bool(smp.correct), "probes": probes,
                    "latest_number_exit": None, "first_mention": None})
    return out


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (bias unpenalised)."""
    x1 = np.hstack([x, np.ones((len(x), 1))])
    w, pen = np.zeros(x1.shape[1]), np.r_[np.full(x.shape[1], l2), 0.0]
    for _ in range(60):
        p = 1.0 / (1.0 + np.exp(-np.clip(x1 @ w, -60, 60)))
        h = (x1 * (p * (1 - p))[:, None]).T @ x1 + np.diag(pen) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(h, x1.T @ (p - y) + pen * w)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w[:-1], float(w[-1])


def training_set(chains: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    rows = [(p["f"], float(p["label"])) for c in chains for p in c["probes"] if p["cand"]]
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def score(chains: list[dict], w: np.ndarray, b: float) -> None:
    for c in chains:
        for p in c["probes"]:
            p["p"] = 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, float(np.dot(w, p["f"])) + b)))) if p["cand"] else 0.0


def outcome(chains: list[dict], fires) -> np.ndarray:
    """Per chain (tokens, correct, full tokens, full correct) under the exit rule ``fires``."""
    rows = []
    for c in chains:
        t, ok = c["tokens"], c["correct"]
        hit = next((p for p in c["probes"] if fires(p)), None)
        if hit is not None:
            t, ok = hit["cost"], hit["right"]
        rows.append((t, float(ok), c["tokens"], float(c["correct"])))
    return np.array(rows, dtype=float)


def stats(a: np.ndarray, reps: int = 0, seed: int = 0) -> dict[str, Any]:
    """Token ratio (of means) and accuracy delta vs full chains, with bootstrap 95% CIs."""
    out: dict[str, Any] = {"token_ratio": round(a[:, 0].mean() / a[:, 2].mean(), 4),
                           "accuracy_delta": round(a[:, 1].mean() - a[:, 3].mean(), 4)}
    if reps:
        rng, n = np.random.default_rng(seed), len(a)
        idx = rng.integers(0, n, (reps, n))
        r = a[idx, 0].mean(1) / a[idx, 2].mean(1)
        d = a[idx, 1].mean(1) - a[idx, 3].mean(1)
        out["token_ratio_ci"] = [round(float(v), 4) for v in np.percentile(r, [2.5, 97.5])]
        out["accuracy_delta_ci"] = [round(float(v), 4) for v in np.percentile(d, [2.5, 97.5])]
    return out


def choose_tau(data: dict[str, list[dict]], train: list[str], tol: float) -> float | None:
    """The tau with the lowest mean token ratio within ``tol`` on every training file."""
    best, best_ratio = None, 1.0
    for tau in TAUS:
        res = [stats(outcome(data[f], lambda p: p["p"] >= tau)) for f in train]
        if all(r["accuracy_delta"] >= -tol - 1e-9 for r in res):
            ratio = float(np.mean([r["token_ratio"] for r in res]))
            if ratio < best_ratio - 1e-9:
                best, best_ratio = tau, ratio
    return best


def envelope(chains: list[dict], tol: float) -> dict[str, Any]:
    """The best token ratio of the scored rule over a fine tau grid within ``tol`` (upper bound:
    tau chosen on these chains)."""
    best = {"token_ratio": 1.0, "accuracy_delta": 0.0, "tau": None}
    for tau in np.r_[np.linspace(0.3, 0.95, 27), 0.96, 0.97, 0.98, 0.99, 0.995, 0.999]:
        s = stats(outcome(chains, lambda p: p["p"] >= tau))
        if s["accuracy_delta"] >= -tol - 1e-9 and s["token_ratio"] < best["token_ratio"]:
            best = s | {"tau": round(float(tau), 4)}
    return best


def diagnostics(chains: list[dict], tau: float | None) -> dict[str, Any]:
    """Why the first statement of the final value is hard to tell: how often the chain later
    commits to another value after first committing to its final one, and how often the rule
    scores that first statement below tau."""
    with_final = [c for c in chains if any(p["label"] for p in c["probes"])]
    reopened, low = 0, 0
    for c in with_final:
        i = next(i for i, p in enumerate(c["probes"]) if p["label"])
        reopened += any(p["cand"] and not p["label"] for p in c["probes"][i:])
        low += tau is None or c["probes"][i]["p"] < tau
    mentions = [c["first_mention"] for c in chains if c["first_mention"] is not None]
    n = max(1, len(with_final))
    return {"chains": len(chains), "chains_committing_to_final": len(with_final),
            "reopened_after_first_final_statement": round(reopened / n, 3),
            "first_final_statement_scored_below_tau": round(low / n, 3),
            "median_first_mention_of_final_value": round(float(np.median(mentions)), 3) if mentions else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="data/traces/reasoning")
    ap.add_argument("--out", default="docs/results/reasoning/final_classifier.json")
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--candidate", choices=("committed", "latest"), default="committed",
                    help="committed: the trace's text-probe answer (what replay and live answer on exit); "
                         "latest: the latest stated number (upper-bound study, not replayable)")
    args = ap.parse_args(argv)
    rows_of = chain_rows if args.candidate == "committed" else latest_rows
    data = {stem: rows_of(Path(args.traces) / f"{stem}.jsonl.gz") for stem, _, _ in FILES}
    report: dict[str, Any] = {"candidate": args.candidate, "tolerance": args.tolerance, "l2": args.l2,
                              "features": list(FEATURES) if args.candidate == "committed" else "latest_number_features",
                              "files": {}}
    fits = {}
    for test in GSM8K:
        fits[test] = fit(*training_set([c for f in GSM8K if f != test for c in data[f]]), args.l2)
    fits["all"] = fit(*training_set([c for f in GSM8K for c in data[f]]), args.l2)
    for f in GSM8K:
        score(data[f], *fits["all"])
    tau_all = choose_tau(data, GSM8K, args.tolerance)
    report["all_gsm8k"] = {"weights": [round(float(v), 4) for v in fits["all"][0]], "bias": round(fits["all"][1], 4),
                           "tau": tau_all}
    for stem, _, model in FILES:
        rows = data[stem]
        key = stem if stem in GSM8K else "all"
        if stem in GSM8K:
            train = [f for f in GSM8K if f != stem]
            for f in train:
                score(data[f], *fits[stem])
            tau = choose_tau(data, train, args.tolerance)
        else:
            tau = tau_all
        score(rows, *fits[key])
        rule = stats(outcome(rows, lambda p, t=tau: t is not None and p["p"] >= t), args.reps)
        report["files"][stem] = {
            "model": model, "full_accuracy": round(float(np.mean([c["correct"] for c in rows])), 4),
            "full_tokens": round(float(np.mean([c["tokens"] for c in rows])), 1),
            "fit": "leave-one-model-out" if stem in GSM8K else "all GSM8K files (transfer, no tuning)",
            "tau": tau, "classifier": rule,
            "shipped_default": stats(outcome(rows, lambda p: p["default"] and bool(p["cand"])), args.reps)
            if args.candidate == "committed" else None,
            "family_best_at_tolerance": envelope(rows, args.tolerance),
            "oracle_candidate": stats(outcome(rows, lambda p: p["label"])),
            "oracle_latest_number": round(sum(c["latest_number_exit"] or c["tokens"] for c in rows)
                                          / sum(c["tokens"] for c in rows), 4) if args.candidate == "committed" else None,
            "diagnostics": diagnostics(rows, tau),
        }
        _print(stem, report["files"][stem])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


def _ci(s: dict) -> str:
    r, d = s["token_ratio_ci"], s["accuracy_delta_ci"]
    return (f"{s['token_ratio']:.3f}x [{r[0]:.3f},{r[1]:.3f}] {100 * s['accuracy_delta']:+.1f} pt "
            f"[{100 * d[0]:+.1f},{100 * d[1]:+.1f}]")


def _print(stem: str, r: dict) -> None:
    e, o, d = r["family_best_at_tolerance"], r["oracle_candidate"], r["shipped_default"]
    print(f"{stem:38s} tau={r['tau']} classifier {_ci(r['classifier'])} | default {_ci(d) if d else '-'} | "
          f"family best {e['token_ratio']:.3f}x {100 * e['accuracy_delta']:+.1f} | oracle {o['token_ratio']:.3f}x "
          f"(latest number {r['oracle_latest_number'] or 0:.3f}x) | "
          f"{r['diagnostics']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
