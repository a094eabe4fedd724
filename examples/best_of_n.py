"""Best-of-N with a verifier, written with a join; runs on the scripted fake backend.

    python examples/best_of_n.py
    certa run examples/best_of_n.py:program --dataset gsm8k --limit 3 --backend scripted

N branches each sample a solution and ask the model to verify it (``ctx.score``: P("Yes")).
Certaindex is the best verifier score, so one confidently verified candidate ends the program
at once (the other branches' requests are aborted); otherwise the join ``pick`` runs once, after
all N, and takes the answer with the largest total verifier score. The scripted backend is a
fake, so the numbers mean nothing; pass ``backend="llamacpp"`` to run a real model.
"""

from collections import defaultdict

import certa as ct
from certa.algorithms.answers import extract_answer


class BoN(ct.State):
    question: str
    scored: ct.Appended[list[tuple[float, str]]] = []   # (verifier P(Yes), answer), one per branch
    best: str | None = None


bon = ct.Graph(BoN, knob=ct.Knob("branches", cap=8), name="best_of_n")


@bon.step(fanout=8)                                       # 8 candidates in parallel
async def sample(s: BoN, ctx: ct.Context):
    out = await ctx.gen(f"{s.question}\nPut the final answer in \\boxed{{}}.", temperature=0.8,
                        seed=ctx.branch, max_tokens=512, chat=True)
    answer = extract_answer(out.text, "gsm8k") or ""
    verdict = await ctx.score(f"Question: {s.question}\nProposed answer: {answer}\nIs the answer correct?",
                              options=("Yes", "No"), chat=True)
    return {"scored": [(verdict.probs.get("Yes", 0.0), answer)]}


@bon.step
def pick(s: BoN):                                         # the join: sees all 8 candidates
    totals: defaultdict[str, float] = defaultdict(float)
    for p, answer in s.scored:
        totals[answer] += p
    return {"best": max(totals, key=totals.get)}


@bon.certaindex
def verified(s: BoN) -> float:                           # the best single verifier score
    return max((p for p, _ in s.scored), default=0.0)


@bon.answer
def answer(s: BoN):
    return s.best if s.best is not None else max(s.scored, default=(0.0, None))[1]


bon.join("pick", after="sample")
program = bon.compile(policy=ct.Threshold(0.95, detect_at=1, every=1))   # checked after every branch

if __name__ == "__main__":
    def verifier(req):                                    # a fake verifier: trusts 408 only
        return {"Yes": 0.97, "No": 0.03} if "answer: 408" in req.prompt else {"Yes": 0.2, "No": 0.8}

    backend = ct.ScriptedBackend(responses=["\\boxed{400}", "\\boxed{407}", "\\boxed{408}"], scores=verifier,
                                 latency=lambda req: 0.01 * (req.branch % 4))
    result = ct.Runtime(backend).run_sync(program, question="What is 17 * 24?")
    print("answer:", result.answer, "| exit:", result.exit_reason, "| candidates:", len(result.state.scored),
          "| requests aborted:", len(backend.abort_calls))
