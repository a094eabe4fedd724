"""Dynasor-CoT probe-in-the-middle: the correct exit rule, exact and chunked probes (scripted fake backend)."""

from __future__ import annotations

import pytest

import certa as ct
from certa.algorithms.programs.cot_probe import PRESETS, cot_output, cot_program
from certa.algorithms.prompts import probe_text
from certa.runtime.errors import ConfigError

CHAIN = "think " * 600 + "so the answer is \\boxed{99}."  # 604 tokens; its own final answer is 99


def probing(*answers: str):
    """A native-probe callable answering the i-th probe (by chain length) with answers[i % n]."""
    return lambda text, suffix: answers[(len(text.split()) // 64 - 1) % len(answers)]


async def run(backend, **kw):
    return await ct.Runtime(backend).run(cot_program(**kw), question="What is 9 * 2?")


async def test_inconsistent_probes_never_exit__dynasor_main_branch_regression():
    # Dynasor's should_early_exit returns True here (k probes exist, no hesitation): it must not.
    b = ct.ScriptedBackend(responses=[CHAIN], probe=probing("18} \\]", "20} \\]"))
    r = await run(b, preset="high", max_tokens=1024)
    assert r.exit_reason == "done" and r.state.finished
    assert all(p.value == 0.0 for p in r.certaindex)
    assert r.answer == "99", "no early exit: the answer comes from the full chain"
    assert cot_output(r) == r.state.text


async def test_k_consistent_hesitation_free_probes_exit():
    b = ct.ScriptedBackend(responses=[CHAIN], probe=probing("18} \\]", "18.0} \\]", "18} \\]"))
    r = await run(b, preset="mid", max_tokens=1024)  # k=3, T=64
    assert (r.exit_reason, r.tokens.main, r.answer) == ("certaindex", 192, "18")
    assert [o.answer for o in r.state.probes] == ["18", "18.0", "18"]
    assert r.state.exact_probes and r.tokens.probe == 6  # 3 probes x 2 scripted tokens, kind "probe"
    assert cot_output(r).endswith("\\boxed{18} \\]") and r.tokens_saved == 1024 - 192


async def test_hesitation_word_blocks_the_exit_until_the_window_is_clean():
    b = ct.ScriptedBackend(responses=[CHAIN], probe=probing("18} wait", "18}", "18} hmm, no", "18}", "18}"))
    r = await run(b, preset="high", max_tokens=1024)  # k=2
    assert r.exit_reason == "certaindex" and r.tokens.main == 64 * 5
    assert r.answer == "18"


async def test_hesitation_is_matched_as_whole_words_only():
    b = ct.ScriptedBackend(responses=[CHAIN], probe=probing("18} I know it is not 17 (threshold)"))
    r = await run(b, preset="high", max_tokens=1024)
    assert r.exit_reason == "certaindex" and r.tokens.main == 128


async def test_empty_probe_answers_do_not_count():
    b = ct.ScriptedBackend(responses=[CHAIN], probe=lambda text, suffix: "18 and the budget ran out")
    r = await run(b, preset="crazy", max_tokens=256)
    assert r.exit_reason in ("cap", "done") and r.tokens.main == 256
    assert all(o.answer == "" for o in r.state.probes)


async def test_chunked_fallback_probes_as_separate_requests():
    def respond(req):
        return "18} \\]" if req.assistant_prefix.endswith(probe_text()) else "think " * 500
    b = ct.ScriptedBackend(responses=respond)  # no native sequences: ChunkedSequence
    r = await run(b, preset="high", max_tokens=512)
    assert r.ok, r.error
    assert not r.state.exact_probes
    assert (r.exit_reason, r.tokens.main, r.answer) == ("certaindex", 128, "18")
    probes = [q for q in b.requests if q.kind == "probe"]
    assert len(probes) == 2 and all(q.temperature == 0.0 and q.max_tokens == 20 for q in probes)
    assert r.tokens.probe == 4
    # chat: every chunk and probe keeps the user turn and continues the assistant turn
    assert len({q.prompt for q in b.requests}) == 1 and all(q.chat for q in b.requests)
    chunks = [q for q in b.requests if q.kind == "main"]
    assert chunks[0].assistant_prefix == "" and chunks[1].assistant_prefix.startswith("think ")


async def test_natural_finish_before_any_window():
    b = ct.ScriptedBackend(responses=["short reasoning, \\boxed{42}"], probe=probing("41}"))
    r = await run(b, preset="mid")
    assert (r.exit_reason, r.answer, r.state.probes) == ("done", "42", [])


def test_presets_and_overrides():
    assert PRESETS == {"mild": (8, 64), "low": (5, 64), "mid": (3, 64), "high": (2, 64), "crazy": (2, 32)}
    prog = cot_program("crazy", k=4, interval=16, max_tokens=100)
    assert prog.knob.unit == "tokens" and prog.knob.cap == 100
    with pytest.raises(ConfigError) as err:
        cot_program("extreme")
    assert err.value.code == "CT300"
    with pytest.raises(ConfigError):
        cot_program(family="gpt-unknown")


async def test_interval_override_sets_probe_spacing():
    b = ct.ScriptedBackend(responses=[CHAIN], probe=lambda text, suffix: "18}")
    r = await run(b, preset="mild", k=3, interval=10)
    assert [o.at for o in r.state.probes] == [10, 20, 30] and r.exit_reason == "certaindex"
