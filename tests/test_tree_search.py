"""MCTS, REBASE and SC over MCTS on the scripted fake backend: knob caps, trees as data, nesting, aborts."""

from __future__ import annotations

import re

import certa as ct
from certa.algorithms.programs.mcts import mcts_program, uct_select
from certa.algorithms.programs.rebase import allocate, rebase_program
from certa.algorithms.programs.sc_mcts import sc_mcts_program
from certa.algorithms.programs.tree import Node, grow, tree_mermaid

NEVER = ct.Threshold(1.0, detect_at=10_000)  # a policy that never stops: runs go to the knob cap


def steps_by_depth(final: str | None = None, at: int = 99):
    """Responder: the k-th step says 'step k'; at depth ``at`` it boxes ``final``. Self-eval says 'No'."""
    def respond(req):
        if "Is this step correct?" in req.prompt:
            return "No"
        k = int(re.findall(r"Step (\d+):\s*$", req.prompt)[-1])
        return f"so \\boxed{{{final}}}" if final is not None and k >= at else f"step {k} of the work"
    return respond


def check_tree(nodes: list[Node]) -> None:
    assert [n.id for n in nodes] == list(range(len(nodes)))
    for n in nodes[1:]:
        assert n.id in nodes[n.parent].children and n.depth == nodes[n.parent].depth + 1
        assert isinstance(n.model_dump(), dict)


async def test_mcts_respects_the_iteration_cap():
    b = ct.ScriptedBackend(responses=steps_by_depth())
    r = await ct.Runtime(b).run(mcts_program(iterations=5, width=2, depth=3, policy=NEVER), question="q")
    assert r.ok, r.error
    assert r.knob_used == 5 and r.state.iterations == 5 and r.state.nodes[0].visits == 5
    assert len(r.state.answers) == 5  # every iteration rolls out to a terminal node (depth limit 3)
    assert max(n.depth for n in r.state.nodes) == 3 and all(n.terminal for n in r.state.nodes if n.depth == 3)
    check_tree(r.state.nodes)
    assert b.live_rids() == set()


async def test_mcts_scorer_is_pluggable_and_drives_the_answer():
    seen = []

    async def scorer(ctx, question, steps, step):
        seen.append((question, tuple(steps), step))
        return 0.9 if "boxed{7}" in step else 0.2

    def respond(req):
        return "so \\boxed{7}" if req.seed % 2 else "so \\boxed{5}"

    b = ct.ScriptedBackend(responses=respond)
    r = await ct.Runtime(b).run(mcts_program(iterations=2, width=2, scorer=scorer, policy=NEVER), question="q")
    assert r.tokens.score == 0 and len(seen) == 2 and seen[0][0] == "q"
    assert r.answer == "7", "the terminal node with the best path reward wins"
    assert [n.reward for n in r.state.nodes[1:]] in ([0.2, 0.9], [0.9, 0.2])


async def test_mcts_exits_early_on_reward_certaindex_and_agreement():
    b = ct.ScriptedBackend(responses={"Is this step correct?": "Yes", "Step 1": "so \\boxed{18}"})
    r = await ct.Runtime(b).run(mcts_program(iterations=8, agreement=True,
                                             policy=ct.Threshold(0.9, detect_at=2, every=1)), question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 2 and r.answer == "18"
    assert set(r.certaindex[-1].signals) == {"reward", "agreement"}


def test_uct_prefers_unvisited_high_reward_children():
    tree = grow([Node(id=0, visits=4)], [Node(parent=0, depth=1, reward=0.1, visits=3, value=0.3),
                                         Node(parent=0, depth=1, reward=0.8)])
    assert uct_select(tree) == 2
    assert tree_mermaid(tree).startswith("flowchart TD") and "n0 --> n2" in tree_mermaid(tree)


def test_rebase_allocation_is_a_softmax_at_temperature_0_2():
    assert allocate([0.9, 0.5, 0.1], 8) == [7, 1, 0]
    assert allocate([0.5, 0.5], 3) == [2, 1] and allocate([0.3], 5) == [5] and allocate([], 4) == []
    assert sum(allocate([0.1, 0.7, 0.69, 0.2], 16)) == 16
    assert allocate([0.9, 0.5], 8, temperature=100.0) == [4, 4]


async def test_rebase_respects_the_depth_cap_and_width_budget():
    b = ct.ScriptedBackend(responses=steps_by_depth())
    r = await ct.Runtime(b).run(rebase_program(width=4, depth=3, policy=NEVER), question="q")
    assert r.ok, r.error
    assert r.knob_used == 3 and r.state.rounds == 3
    per_depth = [sum(1 for n in r.state.nodes if n.depth == d) for d in (1, 2, 3)]
    assert per_depth == [4, 4, 4], "no step finishes early, so each round spends the whole width"
    assert len(r.state.answers) == 4 and all(n.terminal for n in r.state.nodes if n.depth == 3)
    check_tree(r.state.nodes)


async def test_rebase_gives_finished_solutions_back_and_exits_on_max_reward():
    async def scorer(ctx, question, steps, step):
        return 0.97 if "boxed" in step else 0.5

    b = ct.ScriptedBackend(responses=steps_by_depth("12", at=2))
    r = await ct.Runtime(b).run(rebase_program(width=4, depth=5, scorer=scorer), question="q")
    assert (r.exit_reason, r.knob_used, r.answer) == ("certaindex", 2, "12")
    assert r.certaindex[-1].value == 0.97 and r.state.answers == ["12"] * 4


async def test_rebase_budget_shrinks_as_solutions_finish():
    async def scorer(ctx, question, steps, step):
        return 0.3

    def respond(req):  # at depth 1, even seeds finish immediately
        if "Step 1:" in req.prompt and "Step 2:" not in req.prompt and req.seed % 2 == 0:
            return "\\boxed{3}"
        return "\\boxed{3}" if "Step 2:" in req.prompt else "keep going"

    b = ct.ScriptedBackend(responses=respond)
    r = await ct.Runtime(b).run(rebase_program(width=6, depth=4, scorer=scorer, policy=NEVER), question="q")
    d1 = [n for n in r.state.nodes if n.depth == 1]
    d2 = [n for n in r.state.nodes if n.depth == 2]
    assert len(d1) == 6 and len(d2) == 6 - sum(n.terminal for n in d1)
    assert len(r.state.answers) == 6 and r.answer == "3"


async def test_sc_over_mcts_nests_and_aborts_subprogram_requests_on_exit():
    def respond(req):
        return "Yes" if "Is this step correct?" in req.prompt else "so \\boxed{4}"

    # the third search (the outer program's branch 2) is slow: still running when the outer one exits
    b = ct.ScriptedBackend(responses=respond,
                           latency=lambda req: 5.0 if "/mcts-3" in req.program_id else 0.001)
    prog = sc_mcts_program(branches_per_round=3, cap=6, iterations=2,
                           policy=ct.Threshold(1.0, detect_at=2, every=1))
    r = await ct.Runtime(b).run(prog, question="q")
    assert r.exit_reason == "certaindex" and r.knob_used == 2 and r.answer == "4"
    assert b.live_rids() == set()
    assert any(rid.startswith("sc-mcts-0/mcts-3") for rid in b.abort_calls)
    assert r.tokens.main > 0 and r.tokens.score > 0  # sub-program tokens roll up
    assert {s["exit"] for s in r.state.searches} <= {"certaindex", "done", "budget"}
    seeds = {q.seed for q in b.requests if q.kind == "main" and "/mcts-" in q.program_id}
    assert any(s >= 100_000 for s in seeds), "each search gets its own base seed"
