"""Live CoT exit on text probes (scripted backend): read the chain, close the thought, force the answer."""

from __future__ import annotations

import pytest

import certa as ct
from certa.algorithms.programs.cot_probe import close_thought, cot_output, cot_program
from certa.algorithms.signals.text import Committed
from certa.runtime.errors import ConfigError

Q = "Janet has 16 eggs and eats 7. She sells the rest for $2 each. How much in dollars does she make?"
PAD = "and so on " * 8  # 24 scripted tokens of filler
STATES = "She has 16 - 7 = 9 eggs left, and 9 * 2 = 18. So the answer is 18. "
HESITATES = "Wait, let me double-check the eggs. " + PAD
CONFIRMS = "Yes, 9 * 2 = 18, so the answer is 18. " + PAD + PAD


def _words(text: str) -> int:
    return len(text.split())


def _run(chain: str, rule, *, family: str = "r1", answer: str = "18}", max_tokens: int = 400):
    seen: list[str] = []

    def probe(text: str, suffix: str) -> str:
        seen.append(suffix)
        return answer
    b = ct.ScriptedBackend(responses=[chain], probe=probe)
    prog = cot_program("text", max_tokens=max_tokens, family=family, signal=rule, interval=8, dataset="gsm8k")
    return ct.Runtime(b).run_sync(prog, question=Q), seen, b


def test_states_hesitates_confirms_exits_after_confirmation_and_forces_the_answer():
    chain = STATES + HESITATES + CONFIRMS + PAD * 4
    r, suffixes, backend = _run(chain, Committed(confirm=2), answer="18} \\]")
    assert r.exit_reason == "certaindex" and r.answer == "18"
    confirmed_at = _words(STATES + HESITATES + "Yes, 9 * 2 = 18, so the answer is 18.")
    assert confirmed_at <= r.tokens.main < confirmed_at + 8 + 1  # exits at the first read after confirming
    assert r.tokens.main < _words(chain)
    # one request beside the chain: the forced answer, after closing the thought the R1 way
    assert suffixes == [close_thought("r1")]
    assert suffixes[0].startswith("\n</think>") and suffixes[0].endswith("\\boxed{")
    assert r.tokens.probe == 2  # the answer decode is counted ("18} \\]": two scripted tokens)
    assert [q.kind for q in backend.requests] == ["main", "probe"]  # the chain, then the forced answer only
    assert "\\boxed{18}" in cot_output(r)


def test_stated_once_then_hesitation_does_not_exit_before_confirmation():
    chain = STATES + HESITATES + PAD * 6
    r, suffixes, _ = _run(chain, Committed(confirm=2))
    assert r.exit_reason == "done" and suffixes == [] and r.tokens.probe == 0
    assert r.tokens.main == _words(chain)


def test_intermediate_value_does_not_exit():
    chain = ("First 16 - 7 = 9. So she has 9 eggs left to sell. " + PAD * 3 +
             "Each sells for $2, so she makes 9 * 2 = 18 dollars. So the answer is 18. " + PAD * 3)
    r, suffixes, _ = _run(chain, Committed(confirm=1))
    assert r.answer == "18" and r.exit_reason == "certaindex"
    assert r.tokens.main >= _words(chain.split("So the answer is 18.")[0]) + 4  # not on the 9
    assert suffixes == [close_thought("r1")]


def test_default_family_closes_without_think_tag_and_model_probes_still_work():
    assert not close_thought("default").startswith("\n</think>") and close_thought("default").endswith("\\boxed{")
    b = ct.ScriptedBackend(responses=["a " * 200], probe=lambda text, suffix: "18} \\]")
    r = ct.Runtime(b).run_sync(cot_program("high", max_tokens=256), question="9 * 2?")
    assert (r.answer, r.exit_reason) == ("18", "certaindex") and r.tokens.probe > 0
    with pytest.raises(ConfigError):
        cot_program("certa", probe="psychic")


def test_dynasor_rule_on_text_probes_agrees_over_k_reads():
    chain = STATES + PAD * 8
    b = ct.ScriptedBackend(responses=[chain], probe=lambda text, suffix: "18}")
    r = ct.Runtime(b).run_sync(cot_program("high", probe="text", interval=8, family="r1", dataset="gsm8k"),
                               question=Q)
    assert r.exit_reason == "certaindex" and r.answer == "18"
    assert r.tokens.main >= _words(STATES) + 8  # two reads (k=2) of the same committed answer
