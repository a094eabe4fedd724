"""Self-Consistency over the debate: each SC branch runs a whole two-agent debate as a sub-program.

    python examples/sc_debate.py
    certa run examples/sc_debate.py:program --dataset gsm8k --limit 3 --backend scripted

Branch ``i`` calls the debate of ``examples/debate.py`` with ``ctx.call(debate, seed=i)`` (so
debates differ) and votes over the debates' answers. Each debate may stop at its own consensus;
the vote stops once the debates agree (entropy certainty), which cancels the debates still
running and aborts their requests. The debates' tokens roll up into this program. Composed the
way SC over MCTS is (``certa.algorithms.programs.sc_mcts``). The scripted backend is a fake.
"""

import certa as ct
from certa.algorithms.answers.clustering import majority
from certa.algorithms.signals import entropy_certainty

from debate import fake_agent, program as debate   # examples/debate.py: python and `certa run` find it

DEBATES, PARALLEL = 6, 2


class SCDebate(ct.State):
    question: str
    answers: ct.Appended[list[str]] = []                   # one per finished debate
    debates: ct.Appended[list[dict]] = []                  # per debate: its id, exit reason, rounds


sc = ct.Graph(SCDebate, knob=ct.Knob("branches", cap=DEBATES), name="sc_debate")


@sc.step(fanout=PARALLEL)                                  # PARALLEL debates at a time, each lane looping
async def hold_debate(s: SCDebate, ctx: ct.Context):
    res = await ctx.call(debate, question=s.question, seed=ctx.branch)
    return {"answers": [res.answer or ""],
            "debates": [{"program": res.program_id, "exit": res.exit_reason, "rounds": res.state.round}]}


@sc.certaindex
def agreement(s: SCDebate) -> float:                       # entropy certainty over the debates' answers
    return entropy_certainty(s.answers, same="math")


@sc.answer
def vote(s: SCDebate):
    return majority(s.answers, same="math")[0] or None


sc.loop("hold_debate")
program = sc.compile(policy=ct.Threshold(0.9, detect_at=2, every=1))

if __name__ == "__main__":
    result = ct.Runtime(ct.ScriptedBackend(responses=fake_agent)).run_sync(program, question="What is 17 * 24?")
    print("answer:", result.answer, "| exit:", result.exit_reason, "| debates:", result.state.debates,
          "| requests:", result.tokens.requests)
