r"""Can a model game certaindex into a premature (wrong) early exit? Measured on the scripted fake.

Every scripted "model" here ends its full chain (CoT) or most of its samples (SC) with the
right answer, so every early exit with a wrong answer is one the adversary caused. We
measure how often that happens and what the guards cost:

* **CoT probe-in-the-middle** (``cot_program``): the guards are the window ``k`` (the last
  ``k`` probed answers must agree) and the hesitation filter (no ``wait``/``hmm``/... in the
  probe text). Models:

  - ``honest``: no answer early, then noisy answers, then the right one;
  - ``confident_wrong``: the same wrong answer with no hesitation until a per-problem onset
    (20-90% of the chain), then the right one — the attack the guards cannot see;
  - ``hedging_wrong``: the same, but every wrong probe hedges ("... Wait, let me check");
  - ``flip_flop``: alternates between two wrong answers until the onset.

  The CoT program runs end to end on the scripted backend for the library's rule (filter
  on); exits for other ``k`` and for the filter switched off are replayed from the same
  probe sequences with the same ``probe_consistency`` function (the script checks that
  replay and end-to-end runs agree).

* **Self-Consistency** (``sc_program``, 4 lanes, cap 16): the guard is the policy's
  ``min_samples`` (and the threshold ``tau``). Models: ``honest`` (70% right, wrong answers
  spread over 3 values), ``early_wrong_attractor`` (the first 2-5 samples agree on one wrong
  answer, then honest), ``always_wrong`` (every sample agrees on one wrong answer: a model
  that is simply wrong; no guard helps and none should be expected to).

    python benchmarks/adversarial_exit.py --json adversarial_exit.json [--n 100]

Writes ``{"cot": [...rows], "sc": [...rows], "checks": {...}, "config": {...}}``; each row has
``premature_wrong_exit_rate`` (exited early with a wrong answer), ``accuracy``,
``early_exit_rate`` and mean tokens. Not a timed test: numbers are counts, so they are
exact for a given ``--seed``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
from typing import Any

import certa as ct
from certa.algorithms.answers import extract_answer
from certa.algorithms.programs.cot_probe import cot_program
from certa.algorithms.programs.self_consistency import sc_program
from certa.algorithms.signals import HESITATION_WORDS, probe_consistency
from certa.runtime.policy import Even

CHAIN = 640  # CoT chain length in (scripted) tokens
INTERVAL = 64  # tokens between probes
PROBE_TOKENS = 20
COT_MODELS = ("honest", "confident_wrong", "hedging_wrong", "flip_flop")
SC_MODELS = ("honest", "early_wrong_attractor", "always_wrong")
KS = (1, 2, 3, 5, 8)
SC_GUARDS = [(tau, m) for tau in (0.55, 0.9) for m in (4, 8, 12)]  # (tau, min_samples); detect_at 4, every 4
_HEADER = re.compile(r"\[p=(\d+) G=(-?\d+) W=(-?\d+) V=(-?\d+) on=([\d.]+) m=(\w+)\]")


# ---- scripted models -------------------------------------------------------------------------
def problems(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        gold = a + b
        out.append({"i": i, "question": f"Problem {i}: what is {a} + {b}?", "gold": str(gold),
                    "wrong": str(gold + rng.choice([-10, -1, 1, 10])), "wrong2": str(gold + rng.choice([2, 3, 7])),
                    "onset": round(rng.uniform(0.2, 0.9), 3), "attractor": rng.randint(2, 5)})
    return out


def cot_chain(p: dict[str, Any], model: str) -> str:
    """The full chain: a header the probe reads back, filler, and the right boxed answer."""
    header = f"[p={p['i']} G={p['gold']} W={p['wrong']} V={p['wrong2']} on={p['onset']} m={model}]"
    filler = " ".join(f"s{j}" for j in range(CHAIN - 16))  # the whole chain fits in CHAIN tokens
    return f"{header} {filler} so the final answer is \\boxed{{{p['gold']}}} ."


def cot_probe(text: str, suffix: str) -> str:
    """What the model says when probed after ``text``: ``answer} ...`` or no answer yet."""
    m = _HEADER.search(text)
    if m is None:
        return "Let me"
    _, gold, wrong, wrong2, onset, model = m.groups()
    frac = len(text.split()) / CHAIN
    chunk = len(text.split()) // INTERVAL
    if frac >= float(onset):
        return f"{gold}}} \\]"
    if model == "honest":
        return "Let me keep going" if frac < float(onset) / 2 else f"{(wrong, wrong2)[chunk % 2]}}} \\]"
    if model == "confident_wrong":
        return f"{wrong}}} \\]"
    if model == "hedging_wrong":
        return f"{wrong}}} \\] Wait, let me double-check that."
    return f"{(wrong, wrong2)[chunk % 2]}}} \\]"  # flip_flop


def sc_answer(p: dict[str, Any], model: str, branch: int) -> str:
    rng = random.Random(f"{p['i']}|{model}|{branch}")
    if model == "always_wrong" or (model == "early_wrong_attractor" and branch < p["attractor"]):
        return p["wrong"]
    if rng.random() < 0.7:
        return p["gold"]
    return rng.choice([p["wrong"], p["wrong2"], str(int(p["gold"]) + 100)])


# ---- CoT -------------------------------------------------------------------------------------
def replay_exit(probes: list, k: int, words: tuple[str, ...]) -> int | None:
    """Index of the probe at which the CoT rule would exit, or None."""
    for i in range(len(probes)):
        if probe_consistency(probes[: i + 1], k, words=words) == 1.0:
            return i
    return None


async def run_cot(ps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, mismatches, e2e_runs = [], 0, 0
    for model in COT_MODELS:
        backend = ct.ScriptedBackend(responses=lambda req: CHAIN_TEXT[req.prompt], probe=cot_probe)
        rt = ct.Runtime(backend)
        CHAIN_TEXT.clear()
        items = []
        for p in ps:
            from certa.algorithms.prompts import prompt
            CHAIN_TEXT[prompt("math_cot", question=p["question"])] = cot_chain(p, model)
            items.append(p)
        full_prog = cot_program("crazy", k=1, interval=INTERVAL, max_tokens=CHAIN, probe_tokens=PROBE_TOKENS, chat=False,
                                policy=Even(10**6))  # never stops early: record every probe
        full = await rt.run_many([(full_prog, {"question": p["question"]}) for p in ps])
        traces = [r.state.probes for r in full]
        for k in KS:
            e2e_prog = cot_program("crazy", k=k, interval=INTERVAL, max_tokens=CHAIN, probe_tokens=PROBE_TOKENS, chat=False)
            e2e = await rt.run_many([(e2e_prog, {"question": p["question"]}) for p in ps])
            for filt in (True, False):
                words = HESITATION_WORDS if filt else ()
                early = wrong_early = correct = 0
                main, probe_tok = [], []
                for p, probes, full_r, e in zip(ps, traces, full, e2e):
                    i = replay_exit(probes, k, words)
                    if i is not None:
                        answer, tokens, n_probes = probes[i].answer, probes[i].at, i + 1
                    else:
                        answer = extract_answer(full_r.state.text, "math")
                        tokens, n_probes = full_r.tokens.main, len(probes)
                    early += i is not None
                    wrong_early += i is not None and answer != p["gold"]
                    correct += answer == p["gold"]
                    main.append(tokens)
                    probe_tok.append(n_probes * PROBE_TOKENS)
                    if filt:
                        e2e_runs += 1
                        e2e_early = e.exit_reason == "certaindex"
                        if e2e_early != (i is not None) or e.answer != answer or e.tokens.main != tokens:
                            mismatches += 1
                            if DEBUG:
                                print(model, k, p["i"], e.exit_reason, e.answer, e.tokens.main, "| replay", i, answer,
                                      tokens, [(o.at, o.answer) for o in probes])
                n = len(ps)
                rows.append({"model": model, "k": k, "hesitation_filter": filt, "n": n,
                             "early_exit_rate": round(early / n, 4),
                             "premature_wrong_exit_rate": round(wrong_early / n, 4),
                             "accuracy": round(correct / n, 4),
                             "mean_main_tokens": round(statistics.fmean(main), 1),
                             "mean_probe_tokens": round(statistics.fmean(probe_tok), 1),
                             "main_tokens_saved_vs_full": round(1 - statistics.fmean(main) / CHAIN, 4)})
        await rt.close()
    return rows, {"cot_end_to_end_runs": e2e_runs, "cot_replay_mismatches": mismatches}


CHAIN_TEXT: dict[str, str] = {}
DEBUG = False


# ---- SC --------------------------------------------------------------------------------------
async def run_sc(ps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_question = {p["question"]: p for p in ps}
    rows = []
    for model in SC_MODELS:
        def respond(req, model=model):
            p = by_question[next(q for q in by_question if q in req.prompt)]
            return f"Adding the numbers step by step, so \\boxed{{{sc_answer(p, model, req.seed % 100_000)}}}."

        rt = ct.Runtime(ct.ScriptedBackend(responses=respond))
        for tau, m in SC_GUARDS:
            prog = sc_program(branches_per_round=4, cap=16, chat=False,
                              policy=ct.Threshold(tau, detect_at=4, every=4, min_samples=m))
            results = await rt.run_many([(prog, {"question": p["question"]}) for p in ps])
            n = len(ps)
            early = [r.exit_reason == "certaindex" for r in results]
            right = [r.answer == p["gold"] for r, p in zip(results, ps)]
            rows.append({"model": model, "tau": tau, "min_samples": m, "n": n,
                         "early_exit_rate": round(sum(early) / n, 4),
                         "premature_wrong_exit_rate": round(sum(e and not c for e, c in zip(early, right)) / n, 4),
                         "accuracy": round(sum(right) / n, 4),
                         "mean_branches": round(statistics.fmean(r.knob_used for r in results), 2)})
        await rt.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="adversarial_exit.json", help="where to write the results")
    ap.add_argument("--n", type=int, default=100, help="problems per model")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ps = problems(args.n, args.seed)
    cot_rows, checks = asyncio.run(run_cot(ps))
    sc_rows = asyncio.run(run_sc(ps))
    out = {"config": {"n": args.n, "seed": args.seed, "cot_chain_tokens": CHAIN, "cot_interval": INTERVAL,
                      "cot_probe_tokens": PROBE_TOKENS, "hesitation_words": list(HESITATION_WORDS),
                      "sc": "4 lanes, cap 16, Threshold(tau, detect_at=4, every=4, min_samples)",
                      "backend": "scripted (fake)"},
           "cot": cot_rows, "sc": sc_rows, "checks": checks}
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(f"{'cot model':<16} {'k':>2} {'filter':>6} {'wrong-exit':>10} {'acc':>5} {'main tok':>8}")
    for r in cot_rows:
        print(f"{r['model']:<16} {r['k']:>2} {str(r['hesitation_filter']):>6} {r['premature_wrong_exit_rate']:>10.2f} "
              f"{r['accuracy']:>5.2f} {r['mean_main_tokens']:>8.0f}")
    print(f"{'sc model':<22} {'tau':>4} {'min':>3} {'wrong-exit':>10} {'acc':>5} {'branches':>8}")
    for r in sc_rows:
        print(f"{r['model']:<22} {r['tau']:>4} {r['min_samples']:>3} {r['premature_wrong_exit_rate']:>10.2f} "
              f"{r['accuracy']:>5.2f} {r['mean_branches']:>8.2f}")
    print(json.dumps(checks))


if __name__ == "__main__":
    main()
