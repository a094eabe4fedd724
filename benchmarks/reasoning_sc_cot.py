"""SC over CoT on the probe banks: the shipped composition and its peers, per file, with the probe
vote's (share, rounds) chosen leave-one-model-out.

Every dev probe bank (``../shared/data/probes``; MATH-500 idx >= 300 reserved, never read) is
replayed through ``certa bench tokens --program sc-cot``'s code (``bench_sc_cot``: the live
``sc_cot_program`` on each problem's recorded chains, in lock-step). Rows: full majority over
all chains, ``certa-default`` (each chain's own certaindex, the ended chains' vote settled),
the finished-only plurality rule, ESC on finished chains, and the plain probe vote over a
(share, rounds) grid; the probe vote's pick for a file is the one with the fewest tokens on the
*other* model's files that loses the fewest problems there (net), then
spends the fewest tokens. ``--thin 128`` also replays every bank with
its probes thinned to one every 128 tokens (a bank probed at another spacing); ``--thin-only``
limits that to files whose names contain it (the small AMC23/AIME24 banks: each MATH-500 bank
takes ~40 min on 2 shared cores). Each file's report is written as soon as it is done, and
``--reuse`` skips files already written.

Usage:
    python benchmarks/reasoning_sc_cot.py --out docs/results/reasoning_sc_cot [--jobs 2] [--thin 128]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _banks import add_banks_option, bank_dirs, bank_files  # sibling module: benchmarks/ is on sys.path

VOTES = ((2 / 3, 16), (1.0, 8), (1.0, 16))


def thinned(problems: list, every: int) -> list:
    """The bank with its probes kept only at multiples of ``every`` (and ``interval`` set to it)."""
    out = []
    for p in problems:
        samples = [s.model_copy(update={"probes": [q for q in s.probes if q.at % every == 0]}) for s in p.samples]
        out.append(p.model_copy(update={"samples": samples, "interval": every}))
    return out


def score(job: tuple[str, int | None]) -> dict:
    from certa.eval.bench_sc_cot import bench_sc_cot
    from certa.eval.traces import load_traces
    path, every = job
    problems = load_traces(path)
    if every:
        problems = thinned(problems, every)
    t0 = time.time()
    report = bench_sc_cot(problems, votes=VOTES, reps=1000)
    report["file"] = Path(path).name + (f"@{every}" if every else "")
    report["wall_s"] = round(time.time() - t0, 1)
    return report


def pick(reports: list[dict]) -> str | None:
    """The probe-vote row to show for a file, chosen on the *other* model's ``reports``: the fewest
    problems lost net (lost - gained, summed), then the fewest pooled tokens."""
    best = None
    for name in (n for n in reports[0]["methods"] if n.startswith("probe-vote")):
        net = sum(max(0, r["methods"][name]["lost"] - r["methods"][name]["gained"]) for r in reports)
        tokens = sum(r["methods"][name]["tokens"] * r["methods"][name]["n"] for r in reports)
        if best is None or (net, tokens) < best[1]:
            best = (name, (net, tokens))
    return best[0] if best else None


def table(reports: list[dict]) -> str:
    lines = ["| file | chains | full majority acc, tokens | certa-default | finished plurality | ESC finished | "
             "probe vote (LOMO pick) |", "|---|---|---|---|---|---|---|"]
    for r in reports:
        m = r["methods"]
        cell = lambda n: "—" if n is None or n not in m else (  # noqa: E731
            f"{m[n]['token_ratio']:.3f}× ({100 * m[n]['accuracy_delta']:+.1f} pt, lost {m[n]['lost']}, gained {m[n]['gained']})")
        pv = r.get("probe_vote_pick")
        lines.append(f"| {r['file']} | {'/'.join(map(str, r['chains_per_problem']))} | "
                     f"{m['baseline-even']['accuracy']:.3f}, {m['baseline-even']['tokens']:.0f} | {cell('certa-default')} | "
                     f"{cell('finished-plurality')} | {cell('esc-finished')} | {cell(pv)}{' ' + pv if pv else ''} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_banks_option(ap)
    ap.add_argument("--out", default="docs/results/reasoning_sc_cot")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--thin", type=int, default=None, help="also replay the banks thinned to a probe every N tokens")
    ap.add_argument("--thin-only", default=None, help="thin only files whose name contains this (e.g. 'a')")
    ap.add_argument("--reuse", action="store_true", help="keep reports already in --out")
    args = ap.parse_args(argv)
    banks, out = bank_dirs(args, "out")
    paths = bank_files(banks)
    thin = [p for p in paths if args.thin_only is None or args.thin_only in Path(p).name] if args.thin else []
    jobs = [(p, None) for p in paths] + [(p, args.thin) for p in thin]
    name = lambda job: out / (Path(job[0]).name.replace(".jsonl.gz", "") + (f"@{job[1]}" if job[1] else "") + ".json")  # noqa: E731
    todo = [j for j in jobs if not (args.reuse and name(j).exists())]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for job, rep in zip(todo, pool.map(score, todo)):
            rep.pop("idx", None)
            name(job).write_text(json.dumps(rep, indent=1), encoding="utf-8")
            print(f"{rep['file']}: {rep['problems']} problems in {rep['wall_s']} s", flush=True)
    reports = [json.loads(name(j).read_text()) for j in jobs if name(j).exists()]
    for r, j in zip(reports, [j for j in jobs if name(j).exists()]):
        model = r["file"].split("_")[0]
        others = [x for x in reports if x["file"].split("_")[0] != model and ("@" in x["file"]) == ("@" in r["file"])]
        r["probe_vote_pick"] = pick(others) if others else None
        name(j).write_text(json.dumps(r, indent=1), encoding="utf-8")
    text = table(reports)
    (out / "table.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
