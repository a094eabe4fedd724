"""Self-Consistency in ~25 lines of certa, run on the scripted fake backend.

    python examples/sc_scripted.py
    certa run examples/sc_scripted.py:program --dataset gsm8k --limit 3 --backend scripted

The scripted backend is a fake (deterministic pseudo-answers), so accuracy here means
nothing; swap ``backend="llamacpp"`` to run a real model on CPU.
"""

from collections import Counter

import certa as ct
from certa.algorithms.answers import extract_answer
from certa.algorithms.signals import entropy_certainty


class SC(ct.State):
    question: str
    answers: ct.Appended[list[str]] = []          # concurrent branches append


sc = ct.Graph(SC, knob=ct.Knob("branches", cap=16), name="sc")


@sc.step(fanout=4)                                # each round: 4 branches in parallel
async def sample(s: SC, ctx: ct.Context):
    out = await ctx.gen(f"{s.question}\nPut the final answer in \\boxed{{}}.", temperature=0.7,
                        seed=ctx.branch, max_tokens=512, chat=True)
    return {"answers": [extract_answer(out.text, "gsm8k") or ""]}


@sc.certaindex
def agreement(s: SC) -> float:                    # 1.0 when every branch agrees
    return entropy_certainty(s.answers)


@sc.answer
def vote(s: SC):
    return Counter(s.answers).most_common(1)[0][0] if s.answers else None  # ties: first seen


sc.loop("sample")                                 # repeat until the policy says stop, or the cap
program = sc.compile(policy=ct.Threshold(0.5, detect_at=4, every=4))  # check at 4, 8, 12 branches

if __name__ == "__main__":
    runtime = ct.Runtime(backend="scripted")
    result = runtime.run_sync(program, question="What is 17 * 24?")
    print("answer:", result.answer, "| exit:", result.exit_reason, "| branches:", result.knob_used)
    print("certaindex per branch:", [round(p.value, 2) for p in result.certaindex])
    print("tokens:", result.tokens.as_dict())
