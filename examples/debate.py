"""A two-agent debate (Du et al., 2023) written with a join; runs on the scripted fake backend.

    python examples/debate.py
    certa run examples/debate.py:program --dataset gsm8k --limit 3 --backend scripted

Each round both agents answer in parallel (``Send``s to ``speak``, seeing what the other said the
round before); the join ``close_round`` runs once both have spoken. Certaindex is 1.0 when the
last full round agrees, so the debate stops at consensus, else after exactly ROUNDS rounds: the
knob counts the join ``close_round`` (rounds), and once its cap is spent no ``speak`` starts
either, since that round could not be closed (docs/concepts.md, "Knob"). The scripted backend is
a fake, so the answer means nothing.
"""

from collections import Counter

import certa as ct
from certa.algorithms.answers import extract_answer

AGENTS, ROUNDS = ("alice", "bob"), 3


class Debate(ct.State):
    question: str
    seed: int = 0                                                   # debates with other seeds differ
    round: int = 0                                                  # rounds closed so far
    said: ct.Appended[list[tuple[int, str, str]]] = []             # (round, agent, answer)


debate = ct.Graph(Debate, knob=ct.Knob("iterations", cap=ROUNDS), name="debate")


def next_round(s: Debate) -> list[ct.Send]:                       # the knob cap ends the debate
    return [ct.Send("speak", agent) for agent in AGENTS]


@debate.step
async def speak(s: Debate, ctx: ct.Context):
    others = [f"{a} answered {t}." for r, a, t in s.said if r == s.round - 1 and a != ctx.payload]
    prompt = (f"You are {ctx.payload}. {s.question}\n" + "".join(f"{o}\n" for o in others)
              + "Put the final answer in \\boxed{}.")
    out = await ctx.gen(prompt, temperature=0.7, seed=s.seed * 1000 + ctx.branch, max_tokens=512, chat=True)
    return {"said": [(s.round, ctx.payload, extract_answer(out.text, "gsm8k") or "")]}


@debate.step(knob=True)
def close_round(s: Debate):                                         # the join: both have spoken
    return {"round": s.round + 1}


def last_round(s: Debate) -> list[str]:
    return [t for r, _, t in s.said if r == s.round - 1]


@debate.certaindex
def consensus(s: Debate) -> float:
    return 1.0 if s.round and len(set(last_round(s))) == 1 else 0.0


@debate.answer
def answer(s: Debate):
    return Counter(last_round(s)).most_common(1)[0][0] if s.round else None   # ties: alice's


debate.branch(ct.START, next_round, destinations=["speak"], max_fanout=len(AGENTS))
debate.join("close_round", after="speak")
debate.branch("close_round", next_round, destinations=["speak"], max_fanout=len(AGENTS))
program = debate.compile(policy=ct.Threshold(0.99, detect_at=1, every=1))



def fake_agent(req):
    """The scripted fake's reply: alice says 408; bob says 407 until he has heard 408."""
    return "\\boxed{408}" if "alice" in req.prompt.split(".")[0] or "408" in req.prompt else "\\boxed{407}"


if __name__ == "__main__":
    result = ct.Runtime(ct.ScriptedBackend(responses=fake_agent)).run_sync(program, question="What is 17 * 24?")
    print("answer:", result.answer, "| exit:", result.exit_reason, "| rounds:", result.state.round,
          "| said:", result.state.said)
