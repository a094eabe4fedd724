"""Regenerate the PNGs under docs/img/ (drawings and plots shown in README and docs).

    python docs/make_images.py            # needs matplotlib: pip install 'certa[plot]'

Everything here runs on the scripted FAKE backend, on SYNTHETIC traces or in the serving
SIMULATOR, so the images are the same on every machine and every run. The figures
illustrate the tools; they are not measurements.
"""

from __future__ import annotations

import pathlib
import re
import sys
import time

import certa as ct
from certa.eval.bench_tokens import bench_tokens
from certa.algorithms.programs.library import PROGRAMS, build
from certa.algorithms.programs.mcts import mcts_program
from certa.algorithms.programs.rebase import rebase_program
from certa.viz.drawing import draw_png, draw_tree
from certa.viz.plots import plot_certaindex, plot_slo, plot_tokens_accuracy
from certa.simulation.sweep import SweepSpec, run_sweep
from certa.simulation.synth import synth_traces

OUT = pathlib.Path(__file__).resolve().parent / "img"

STEPS = {1: ["Split 24 into 20 + 4.", "Round 17 up to 20 and correct later."],
         2: ["17 * 20 = 340 and 17 * 4 = 68.", "20 * 24 = 480; subtract 3 * 24 = 72."]}
REWARD = {"20 + 4": 0.8, "Round": 0.45, "340": 0.85, "480": 0.6, "408": 0.95, "398": 0.5}


def fake_steps(req: ct.GenRequest) -> str:
    """FAKE model for tree search: a step per depth; seeds ending in 1 conclude 398."""
    k = int(re.findall(r"Step (\d+):\s*$", req.prompt)[-1])
    seed = req.seed or 0
    if k >= 3:
        return f"So the product is \\boxed{{{398 if seed % 10 == 1 else 408}}}."
    return STEPS[k][seed % 2]


def fake_reward(req) -> dict[str, float]:
    """FAKE self-evaluation: P(Yes) by what the proposed step says."""
    step = req.prompt.split("Proposed next step:")[-1]
    p = next((v for k, v in REWARD.items() if k in step), 0.3)
    return {"Yes": p, "No": 1 - p}


def tree_backend() -> ct.ScriptedBackend:
    return ct.ScriptedBackend(responses=fake_steps, scores=fake_reward)


def main() -> list[pathlib.Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    made = [draw_png(build(name), OUT / f"program_{name}.png") for name in sorted(PROGRAMS)]

    never = ct.Threshold(1.0, detect_at=10_000)
    mcts = ct.Runtime(tree_backend()).run_sync(mcts_program(iterations=6, width=2, depth=3, policy=never),
                                              question="What is 17 * 24?")
    draw_tree(mcts, OUT / "tree_mcts.png", title="MCTS, 6 iterations (fake model): rewards, visits, chosen path")
    rebase = ct.Runtime(tree_backend()).run_sync(rebase_program(width=4, depth=3, policy=never),
                                                question="What is 17 * 24?")
    draw_tree(rebase, OUT / "tree_rebase.png", title="REBASE, width 4 (fake model)")
    made += [OUT / "tree_mcts.png", OUT / "tree_rebase.png"]

    outputs = ["17 * 20 + 17 * 4 = 408. \\boxed{408}", "about 400, so \\boxed{398}", "\\boxed{408}",
               "\\boxed{412}", "\\boxed{408}", "\\boxed{408}", "\\boxed{408}", "\\boxed{408}"]
    sc = ct.Runtime(ct.ScriptedBackend(responses=outputs)).run_sync(
        build("sc", cap=16, policy=ct.Threshold(0.55, detect_at=4, every=4)), question="What is 17 * 24?")
    plot_certaindex(sc, OUT / "certaindex_sc.png", threshold=0.55,
                    title="SC (fake model): certaindex per branch; checked every 4, stops at 8 of 16")
    mcts2 = ct.Runtime(tree_backend()).run_sync(
        mcts_program(iterations=8, width=2, depth=3, agreement=True, policy=ct.Threshold(0.75, detect_at=3)),
        question="What is 17 * 24?")
    plot_certaindex(mcts2, OUT / "certaindex_mcts.png", threshold=0.75,
                    title="MCTS (fake model): reward AND answer agreement")
    made += [OUT / "certaindex_sc.png", OUT / "certaindex_mcts.png"]

    traces = synth_traces(80, seed=0, samples=16, probed=4)
    plot_tokens_accuracy(bench_tokens(traces, "sc", seed=0, reps=300), OUT / "tokens_accuracy_sc_synthetic.png",
                         title="SC on SYNTHETIC traces: tokens vs accuracy (held-out half)")
    sweep = run_sweep(synth_traces(40, seed=0, samples=16, probed=4),
                      SweepSpec(policies=["fcfs", "app-fifo", "certa-nocd", "certa"], n_programs=60, rate_scales=[],
                                slo_scales=[1.0, 1.5, 2.0, 3.0, 4.0, 6.0], refine=0, seed=0))
    plot_slo(sweep, OUT / "slo_simulated.png")
    made += [OUT / "tokens_accuracy_sc_synthetic.png", OUT / "slo_simulated.png"]
    return made


if __name__ == "__main__":
    t0 = time.perf_counter()
    for path in main():
        print(path.relative_to(OUT.parent.parent), f"{path.stat().st_size // 1024} KiB")
    print(f"done in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
