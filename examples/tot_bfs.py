"""Tree-of-Thoughts BFS (Yao et al., 2023) written with a join; runs on the scripted fake backend.

    python examples/tot_bfs.py
    certa run examples/tot_bfs.py:program --dataset gsm8k --limit 3 --backend scripted

Each level, every kept thought gets BREADTH proposed next steps in parallel (``Send``s to
``expand``, which also values its proposal with ``ctx.score``); the join ``prune`` runs once per
level, after the whole level, and keeps the BEAM best. The program starts by branching from
``START`` (no empty first step). The scripted backend is a fake, so the answer means nothing.
"""

import certa as ct
from certa.algorithms.answers import extract_answer

BREADTH, BEAM, DEPTH = 3, 2, 3


class ToT(ct.State):
    question: str
    frontier: list[str] = [""]                                    # the thoughts kept at this depth
    depth: int = 0
    proposals: ct.Appended[list[tuple[int, float, str]]] = []    # (depth, value, thought so far)


tot = ct.Graph(ToT, knob=ct.Knob("branches", cap=BREADTH * (1 + BEAM * (DEPTH - 1))), name="tot_bfs")


def grow(s: ToT) -> list[ct.Send] | str:                          # one level: BREADTH per kept thought
    if s.depth >= DEPTH:
        return ct.END
    return [ct.Send("expand", thought) for thought in s.frontier for _ in range(BREADTH)]


@tot.step(knob=True)
async def expand(s: ToT, ctx: ct.Context):
    steps = f"{s.question}\nSteps so far:\n{ctx.payload}"
    out = await ctx.gen(f"{steps}Next step:", temperature=0.7, seed=ctx.branch, max_tokens=128, stop=("\n",))
    path = f"{ctx.payload}{out.text.strip()}\n"
    value = await ctx.score(f"{s.question}\nSteps so far:\n{path}Is this on track?", options=("Yes", "No"))
    return {"proposals": [(s.depth, value.probs.get("Yes", 0.0), path)]}


@tot.step
def prune(s: ToT):                                                # the join: sees the whole level
    level = sorted((p for p in s.proposals if p[0] == s.depth), key=lambda p: -p[1])
    return {"frontier": [path for _, _, path in level[:BEAM]], "depth": s.depth + 1}


@tot.answer
def answer(s: ToT):
    return extract_answer(s.frontier[0], "gsm8k") if s.depth else None


tot.branch(ct.START, grow, destinations=["expand"], max_fanout=BREADTH * BEAM)
tot.join("prune", after="expand")
tot.branch("prune", grow, destinations=["expand", ct.END], max_fanout=BREADTH * BEAM)
program = tot.compile()

if __name__ == "__main__":
    def propose(req):                                             # fake thoughts: "add 1", "add 2", "add 3"
        return f"add {req.seed % BREADTH + 1}"

    def value(req):                                               # fake values: bigger steps look better
        last = req.prompt.split("Is this on track?")[0].strip().splitlines()[-1]
        return {"Yes": int(last.split()[-1]) / BREADTH, "No": 1 - int(last.split()[-1]) / BREADTH}

    result = ct.Runtime(ct.ScriptedBackend(responses=propose, scores=value)).run_sync(program, question="Reach 9.")
    print("best path:", result.state.frontier[0].splitlines(), "| answer:", result.answer,
          "| proposals:", result.knob_used, "| exit:", result.exit_reason)
