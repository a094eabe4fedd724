"""Drawings without a browser: every library program to PNG/SVG, trees, certaindex plots."""

from __future__ import annotations

import re

import pytest

import certa as ct
from certa.algorithms.programs.library import PROGRAMS, build
from certa.algorithms.programs.mcts import mcts_program
from certa.algorithms.programs.rebase import rebase_program
from certa.algorithms.programs.tree import Node, grow

pytest.importorskip("matplotlib", reason="drawings need matplotlib (pip install 'certa[plot]')")

from certa.viz.drawing import chosen_path, draw_graph, draw_png, draw_svg, draw_tree, graph_layout, tree_layout  # noqa: E402
from certa.viz.plots import plot_certaindex  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
NEVER = ct.Threshold(1.0, detect_at=10_000)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_library_program_draws_to_png(name, tmp_path):
    program = build(name)
    out = draw_png(program, tmp_path / f"{name}.png")
    data = out.read_bytes()
    assert data.startswith(PNG) and len(data) > 5_000
    assert program.draw().startswith("flowchart TD"), "the Mermaid drawing still works"


def test_a_running_program_and_svg_draw_too(tmp_path):
    prog = build("sc").new(question="q")  # a GraphProgram, as in Runtime.active_programs
    out = draw_svg(prog, tmp_path / "sc")
    assert out.suffix == ".svg" and out.read_text().lstrip().startswith("<?xml")
    assert "sample" in out.read_text()


def test_png_output_is_reproducible(tmp_path):
    a, b = draw_png(build("mcts"), tmp_path / "a.png"), draw_png(build("mcts"), tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()


def test_layout_routes_loops_back_edges_and_skips():
    lay = graph_layout(build("mcts"))
    routes = {(e.src, e.dst): e.route for e in lay.edges}
    assert routes[("backprop", "select")] == "right", "the iteration loop goes back up the right side"
    assert routes[("select", "backprop")] == "left", "a terminal leaf skips expand and simulate"
    assert routes[("select", "expand")] == "straight"
    assert lay.nodes["backprop"].kind == "knob" and "iterations ≤ 8" in lay.nodes["backprop"].label
    layers = {n: lay.nodes[n].layer for n in ("select", "expand", "simulate", "backprop")}
    assert layers == {"select": 1, "expand": 2, "simulate": 3, "backprop": 4}
    sc_program = build("sc")
    sc = graph_layout(sc_program)
    assert {(e.src, e.dst): e.route for e in sc.edges}[("sample", "sample")] == "self"
    assert type(sc_program.policy).__name__ in sc.nodes["__certaindex__"].label
    x0, x1, _, _ = lay.extent
    assert all(x0 < -e.offset for e in lay.edges if e.route == "left")
    assert all(e.offset < x1 for e in lay.edges if e.route == "right")


def test_a_hand_written_program_cannot_be_drawn_with_a_clear_error():
    class Handmade(ct.Program):
        async def execute(self, ctx):
            return False

    with pytest.raises(ct.CertaError, match="has no graph") as info:
        draw_graph(Handmade())
    assert info.value.hint and "compile" in info.value.hint


def _steps(req):
    if "Is this step correct?" in req.prompt:
        return "Yes"
    k = int(re.findall(r"Step (\d+):\s*$", req.prompt)[-1])
    return f"so \\boxed{{{req.seed % 2 + 3}}}" if k >= 2 else f"step {k}: half of {req.seed % 5}"


def test_draw_tree_of_an_executed_mcts_run_highlights_the_answer(tmp_path):
    r = ct.Runtime(ct.ScriptedBackend(responses=_steps)).run_sync(
        mcts_program(iterations=4, width=2, depth=3, policy=NEVER), question="q")
    assert r.ok, r.error
    path = chosen_path(r.state.nodes, r.answer)
    assert path[0] == 0 and r.state.nodes[path[-1]].answer == r.answer
    out = tmp_path / "tree.png"
    fig = draw_tree(r, out)
    assert out.read_bytes().startswith(PNG)
    assert r.answer in fig.texts[0].get_text()
    draw_tree([n.model_dump() for n in r.state.nodes], tmp_path / "dicts.svg")  # plain data works too


def test_draw_tree_of_rebase_and_layout_is_tidy(tmp_path):
    r = ct.Runtime(ct.ScriptedBackend(responses=_steps)).run_sync(rebase_program(width=3, depth=3, policy=NEVER),
                                                                  question="q")
    draw_tree(r.state, tmp_path / "rebase.png")
    pos = tree_layout(r.state.nodes)
    assert len(pos) == len(r.state.nodes)
    for n in r.state.nodes[1:]:
        assert pos[n.id][1] == -n.depth
    leaves = sorted(pos[n.id][0] for n in r.state.nodes if not n.children)
    assert leaves == [float(i) for i in range(len(leaves))]


def test_chosen_path_prefers_the_best_mean_reward_and_the_given_answer():
    tree = grow([Node(id=0)], [Node(parent=0, depth=1, reward=0.9), Node(parent=0, depth=1, reward=0.1)])
    tree = grow(tree, [Node(parent=1, depth=2, reward=0.8, terminal=True, answer="a"),
                       Node(parent=2, depth=2, reward=0.9, terminal=True, answer="b")])
    assert chosen_path(tree) == [0, 1, 3]
    assert chosen_path(tree, answer="b") == [0, 2, 4]
    assert chosen_path(tree[:3]) == [0], "no terminal node: only the root"
    with pytest.raises(ct.CertaError, match="nothing to draw"):
        draw_tree([])


def test_plot_certaindex_marks_threshold_signals_and_exit(tmp_path):
    b = ct.ScriptedBackend(responses={"Is this step": "Yes", "Step 1": "so \\boxed{18}"})
    r = ct.Runtime(b).run_sync(mcts_program(iterations=4, agreement=True, policy=ct.Threshold(0.9, detect_at=2)),
                               question="q")
    fig = plot_certaindex(r, tmp_path / "cd.png", threshold={"reward": 0.9})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "signal agreement" in labels and "signal reward" in labels and any("threshold" in x for x in labels)
    assert (tmp_path / "cd.png").read_bytes().startswith(PNG)
    r2 = ct.Runtime(ct.ScriptedBackend()).run_sync(build("sc", cap=8), question="q")
    fig = plot_certaindex([r, r2], x="tokens", threshold=ct.Threshold(0.55))
    assert fig.axes[0].get_xlabel() == "tokens spent"
    with pytest.raises(ct.CertaError):
        plot_certaindex(r, tmp_path / "cd.gif")


def test_module_examples_run():
    import doctest

    import certa.viz.drawing
    import certa.viz.plots
    import certa.viz.tree_drawing

    for mod in (certa.viz.drawing, certa.viz.plots, certa.viz.tree_drawing):
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert res.failed == 0 and res.attempted > 0, mod.__name__


def test_tokens_accuracy_and_slo_plots_read_the_reports(tmp_path):
    from certa.eval.bench_tokens import bench_tokens
    from certa.viz.plots import plot_slo, plot_tokens_accuracy
    from certa.simulation.sweep import SweepSpec, run_sweep
    from certa.simulation.synth import synth_traces

    traces = synth_traces(10, seed=0, samples=6, probed=2)
    fig = plot_tokens_accuracy(bench_tokens(traces, "sc", reps=20), tmp_path / "tokens.png")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "baseline-even" in labels and any(x.startswith("certaindex-threshold (") for x in labels)
    sweep = run_sweep(traces, SweepSpec(policies=["fcfs", "certa"], n_programs=8, rates=[0.05, 0.2],
                                        slo_scales=[1.0, 3.0], rate_scales=[], refine=0))
    fig = plot_slo(sweep, tmp_path / "slo.png")
    assert len(fig.axes) == 2 and "SIMULATED" in fig._suptitle.get_text()
    assert (tmp_path / "tokens.png").read_bytes().startswith(PNG) and (tmp_path / "slo.png").exists()
    with pytest.raises(ct.CertaError):
        plot_slo({"rates": []})
    with pytest.raises(ct.CertaError):
        plot_tokens_accuracy({})
