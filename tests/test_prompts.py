"""Prompt templates: exact probe texts, sandboxing, strict variables."""

from __future__ import annotations

import pytest

from certa.algorithms.prompts import (
    TEMPLATE_DIR, final_answer, probe_text, prompt, render, template_names,
)
from certa.algorithms.answers import extract_probe_answer
from certa.runtime.errors import ConfigError

DYNASOR_PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"


def test_bundled_templates_exist():
    assert {"math_cot", "probe_default", "probe_qwen", "final_answer", "self_eval",
            "mcts_step"} <= set(template_names())
    assert all(p.suffix == ".j2" for p in TEMPLATE_DIR.iterdir() if p.is_file())


def test_math_cot():
    text = render("math_cot", question="What is 17 * 24?")
    assert text == "What is 17 * 24?\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert prompt("math_cot.j2", question="What is 17 * 24?") == text


def test_probe_texts():
    assert probe_text() == DYNASOR_PROBE
    assert probe_text("DEFAULT") == DYNASOR_PROBE
    assert probe_text("qwen") == probe_text("chatml")
    assert probe_text("qwen").endswith("\\boxed{")
    with pytest.raises(ConfigError):
        probe_text("llama9")


def test_final_answer_and_probe_roundtrip():
    assert final_answer("18") == "\n\n**Final Answer**\n\\[ \\boxed{18} \\]"
    text = final_answer(r"\frac{1}{2}")
    assert text == "\n\n**Final Answer**\n\\[ \\boxed{\\frac{1}{2}} \\]"
    assert extract_probe_answer(text.split("\\boxed{", 1)[1]) == r"\frac{1}{2}"


def test_final_answer_does_not_interpret_jinja_in_answers():
    assert final_answer("{{ 7 * 7 }}").endswith("\\boxed{{{ 7 * 7 }}} \\]")


def test_self_eval_and_mcts_step():
    text = render("self_eval", question="Q?", step=" x = 2 ", steps=["a", "b"])
    assert "Step 1: a\nStep 2: b" in text and "Proposed next step: x = 2" in text
    assert text.endswith("Is this step correct? Answer Yes or No.")
    assert render("self_eval", question="Q?", step="s").endswith("Answer Yes or No.")
    text = render("mcts_step", question="Q?", steps=["a"])
    assert text.startswith("Q?\n") and text.endswith("Step 2:")
    assert render("mcts_step", question="Q?").endswith("Step 1:")


def test_render_source_and_strict_undefined():
    assert render("Hi {{ name }}!", name="Ada") == "Hi Ada!"
    with pytest.raises(ConfigError, match="missing"):
        render("Hi {{ name }}!")
    with pytest.raises(ConfigError):
        render("math_cot")  # question missing
    with pytest.raises(ConfigError, match="unknown prompt template"):
        render("no_such_template")
    with pytest.raises(ConfigError):
        render("{% for %}")
    with pytest.raises(ConfigError):
        render(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ x.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ x.append(1) }}",
    "{% set d = {} %}{{ d.update(a=1) }}",
])
def test_sandbox_refuses_unsafe_access(source):
    with pytest.raises(ConfigError):
        render(source, x=[1])
