r"""Chain-of-Thought with probe-in-the-middle early exit (Dynasor-CoT done right, and certa's rule).

One live sequence grows ``interval`` (T) tokens per step. After a chunk a probe
(:func:`~certa.algorithms.prompts.probe_text` for the model family, ending in ``\boxed{``)
is decoded greedily (up to ``probe_tokens``, stopping after the answer's closing brace where
the backend can) and forgotten: with exact KV rollback when the backend supports it
(``seq.exact_probes``), else as a separate request sharing the prefix (the runtime's chunked
fallback; both go through ``seq.probe``). Probe tokens count as kind ``probe``.

Certaindex is a :mod:`~certa.algorithms.signals.cot` signal. Dynasor's presets use its rule:
1.0 iff the last ``k`` probed answers are non-empty, math-equivalent and free of hesitation
words (whole words) — Dynasor's ``should_early_exit`` returns True even for inconsistent
answers; this does not. The default ``certa`` preset (:func:`certa_signal`) adds "no
hesitation in the chain's own text"; more evidence (grounding, the model's confidence in its
probed answer, progress) is in :mod:`~certa.algorithms.signals.cot` (docs/algorithms.md).

The knob is main decode tokens, capped at ``max_tokens``. The answer is the probed answer
when the run exits early, else the answer extracted from the whole chain (falling back to the
last non-empty probe when the chain has none). The state's ``answers`` are the probed answers,
so window policies (ESC, margin) also work on CoT.

Presets: ``certa`` (k=3, T=64, :func:`certa_signal`); Dynasor's ``(k, T)``: mild (8, 64),
low (5, 64), mid (3, 64), high (2, 64), crazy (2, 32); ``text`` (T=32, :func:`text_signal`).

**Text probes** (``probe="text"``, the ``text`` preset's default): no probe requests at all.
After each chunk the chain's own text is read — the answer it has committed to
(:mod:`~certa.algorithms.signals.text`) is the probe answer, at zero decode cost. When the
signal reaches 1.0 the program stops the thinking stream, closes the thought the way the
model family expects (:func:`close_thought`: ``</think>`` for reasoning families, then a short
"Final Answer" continuation ending in ``\boxed{``), decodes the answer (kind ``probe``,
stopping at its closing brace) and returns it. Use text probes for reasoning models (R1,
Qwen3, Phi-4-reasoning: they state and re-verify their answer in the open); use model probes
for models that do not write their answer down before the end.

Example:
    >>> import certa as ct
    >>> b = ct.ScriptedBackend(responses=["a " * 200], probe=lambda text, suffix: "18} \\]")
    >>> r = ct.Runtime(b).run_sync(cot_program("high", max_tokens=256), question="9 * 2?")
    >>> r.answer, r.exit_reason, r.tokens.main
    ('18', 'certaindex', 128)
    >>> chain = "9 * 2 = 18. So the answer is 18. Wait, let me check: 9 * 2 = 18. Yes, the answer is 18. " + "ok " * 400
    >>> b = ct.ScriptedBackend(responses=[chain], probe=lambda text, suffix: "18}")
    >>> r = ct.Runtime(b).run_sync(cot_program("text", max_tokens=512, family="r1"), question="9 * 2?")
    >>> r.answer, r.exit_reason, r.tokens.main, r.tokens.probe
    ('18', 'certaindex', 288, 1)
"""

from __future__ import annotations

from typing import Any, Literal

from certa.dsl import END, Appended, CompiledGraph, Graph, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.answers import extract_answer, extract_probe_answer
from certa.algorithms.prompts import final_answer, probe_text, prompt
from certa.algorithms.signals.cot import AllOf, ChainView, CoTSignal, ProbeAgreement, Settled, signal_from_dict
from certa.algorithms.signals.text import Committed, committed_answer, for_problem
from certa.algorithms.signals import ProbeObs

__all__ = ["CERTA_INTERVAL", "PRESETS", "TEXT_INTERVAL", "CoTState", "certa_signal", "close_thought", "cot_output",
           "cot_program", "text_signal"]

PRESETS: dict[str, tuple[int, int]] = {"mild": (8, 64), "low": (5, 64), "mid": (3, 64), "high": (2, 64),
                                       "crazy": (2, 32)}
"""Dynasor's saving-effort presets as ``(k, T)``: window of agreeing probes, tokens between probes."""

CERTA_INTERVAL = 64
"""Tokens between probes of the ``certa`` preset."""


def certa_signal(k: int = 3) -> CoTSignal:
    """The ``certa`` preset's certaindex: the last ``k`` probes agree (Dynasor's rule, probes
    stopped at the answer's closing brace) AND no hesitation in the chain's recent text.

    Chosen on GSM8K dev traces of Qwen2.5-Coder-1.5B (80 problems, every variant of
    :mod:`~certa.eval.cot_grid` replayed): no grounded/confidence/progress variant decoded
    fewer tokens at this rule's accuracy (0.93x full chains, -0.9 pt; docs/evaluation.md), so
    the default stays the rule that measured best. On MATH-500 dev traces of the same model it
    costs accuracy (0.80x at -5.5 pt held-out), and no fixed rule of ``benchmarks/cot_default.py``
    saves tokens on both datasets at equal accuracy: calibrate (``certa calibrate --program
    cot``) for another model or dataset."""
    return AllOf(ProbeAgreement(k), Settled())


TEXT_INTERVAL = 32
"""Tokens between text probes of the ``text`` preset (reading the stream is free)."""

TEXT_DEFAULT: dict[str, Any] = {"kinds": "conclude", "confirm": 2, "quiet": 150, "survive": 800}
"""The ``text`` preset's rule (:func:`text_signal`), chosen by leave-one-model-out over the
reasoning dev traces (``benchmarks/reasoning_cot.py``, docs/results/reasoning/)."""

_REASONING_FAMILIES = ("r1", "deepseek", "qwen3", "think", "reasoning", "phi4-reasoning")


def text_signal() -> CoTSignal:
    """The ``text`` preset's certaindex: the chain has committed to its answer
    (:class:`~certa.algorithms.signals.text.Committed` with :data:`TEXT_DEFAULT`)."""
    return Committed(**TEXT_DEFAULT)


def close_thought(family: str = "default") -> str:
    r"""The text that ends the thinking and asks for the answer, for the model family:
    ``</think>`` first for reasoning families (R1, DeepSeek, Qwen3), then a short final-answer
    continuation ending in ``\boxed{`` (as Dynasor forces its answer).

    >>> close_thought("r1")
    '\n</think>\n\n**Final Answer**\n\\boxed{'
    """
    head = "\n</think>" if str(family).lower() in _REASONING_FAMILIES else ""
    return head + "\n\n**Final Answer**\n\\boxed{"


class CoTState(State):
    """The live sequence, the chain so far, and every probe taken."""

    question: str
    seq: Any = None
    text: str = ""
    finished: bool = False
    exact_probes: bool = False
    probes: Appended[list[ProbeObs]] = []
    answers: Appended[list[str]] = []
    value: float = 0.0  # the certaindex signal after the latest step
    probed_chars: int = 0  # length of the chain text at the last probe
    forced: str | None = None  # text probes: the answer decoded after closing the thought


def cot_program(preset: str = "certa", *, max_tokens: int = 1024, family: str = "default", temperature: float = 0.0,
                dataset: str = "math", k: int | None = None, interval: int | None = None, probe_tokens: int = 20,
                policy: Policy | None = None, chat: bool = True, name: str = "cot",
                signal: CoTSignal | dict | None = None, probe: str | None = None) -> CompiledGraph:
    """Build CoT with probe-in-the-middle as a compiled graph (inputs: ``question=``).

    ``preset``: ``"certa"`` (default: :func:`certa_signal`, a probe every 64 tokens)
    or one of Dynasor's :data:`PRESETS` (its rule, ``ProbeAgreement(k)``). ``k``/``interval``
    override the preset's; ``signal`` (a :mod:`~certa.algorithms.signals.cot` signal or its
    ``to_dict``) overrides its certaindex. ``family`` picks the probe template; ``policy``
    defaults to stopping the first time certaindex reaches 1.0. Probes are skipped while they
    could not matter (before the signal's ``min_tokens`` minus its probe window, or when the
    signal says no probe is due). ``probe``: ``"model"`` (ask the model, the default) or
    ``"text"`` (read the chain's committed answer; the ``text`` preset's default): on exit the
    thought is closed (:func:`close_thought`) and the answer decoded and counted.
    """
    if preset not in ("certa", "text") and preset not in PRESETS:
        raise ConfigError(f"unknown CoT preset {preset!r}", hint=f"certa, text, or one of {', '.join(PRESETS)}")
    probe = probe or ("text" if preset == "text" else "model")
    if probe not in ("model", "text"):
        raise ConfigError(f"unknown probe kind {probe!r}", hint="model (ask the model) or text (read the chain)")
    k0, t0 = {"certa": (3, CERTA_INTERVAL), "text": (1, TEXT_INTERVAL)}.get(preset) or PRESETS[preset]
    k, interval = k or k0, interval or t0
    if k < 1 or interval < 1 or max_tokens < 1:
        raise ConfigError(f"cot needs k, interval and max_tokens >= 1, got {k}, {interval}, {max_tokens}")
    if isinstance(signal, dict):
        rule = signal_from_dict(signal)
    else:
        made = {"certa": lambda: certa_signal(k), "text": text_signal}.get(preset, lambda: ProbeAgreement(k))
        rule = signal or made()
    probe_from = max(0, rule.min_tokens - (rule.window - 1) * interval)
    probe_suffix, closing = probe_text(family), close_thought(family)
    g = Graph(CoTState, knob=Knob("tokens", cap=max_tokens), name=name)

    @g.step
    async def start(s: CoTState, ctx) -> dict:
        """Open the sequence (nothing decoded yet)."""
        seq = await ctx.sequence(prompt("math_cot", question=s.question), max_tokens=max_tokens,
                                 temperature=temperature, chat=chat)
        return {"seq": seq, "exact_probes": seq.exact_probes}

    @g.step
    async def think(s: CoTState, ctx) -> dict:
        """Decode T more tokens, then probe the current answer (unless the chain finished)."""
        await s.seq.extend(interval)
        update: dict[str, Any] = {"text": s.seq.text, "finished": s.seq.finished, "value": 0.0}
        if probe == "text":
            return update | (await _read_text(s) if not s.seq.finished else {})
        if not s.seq.finished and s.seq.tokens >= probe_from and rule.probe_due(s.seq.text[s.probed_chars:]):
            update["probed_chars"] = len(s.seq.text)
            out = await s.seq.probe(probe_suffix, max_tokens=probe_tokens, close_brace=True)
            logprobs = tuple(out.token_logprobs) if out.token_logprobs is not None else None
            obs = ProbeObs(s.seq.tokens, extract_probe_answer(out.text), out.text, logprobs)
            value = rule(ChainView([*s.probes, obs], s.seq.text, s.seq.tokens))
            update |= {"probes": [obs], "answers": [obs.answer], "value": value}
        return update

    async def _read_text(s: CoTState) -> dict[str, Any]:
        """Text probe: the committed answer is the probe answer; on exit, force the answer."""
        text, tokens = s.seq.text, s.seq.tokens
        obs = ProbeObs(tokens, committed_answer(text, dataset=dataset, question=s.question), "", None)
        value = for_problem(rule, s.question, dataset)(ChainView([*s.probes, obs], text, tokens))
        out: dict[str, Any] = {"probes": [obs], "answers": [obs.answer], "value": value, "probed_chars": len(text)}
        if value >= 1.0:  # the exit: close the thought and decode the answer (counted as probe tokens)
            res = await s.seq.probe(closing, max_tokens=probe_tokens, close_brace=True)
            await s.seq.close()  # stop the thinking stream
            out["forced"] = extract_probe_answer(res.text) or obs.answer
        return out

    def more(s: CoTState) -> Literal["think", "__end__"]:
        return END if s.finished else "think"

    @g.certaindex
    def settled(s: CoTState) -> float:
        """The CoT signal on the latest probe (default: the last k probes agree, no hesitation)."""
        return s.value

    @g.answer
    def final(s: CoTState) -> str | None:
        if s.forced is not None:
            return s.forced
        if not s.finished and s.value >= 1.0:
            return s.probes[-1].answer
        return extract_answer(s.text, dataset) or next((a for a in reversed(s.answers) if a), None)

    g.edge("start", "think")
    g.branch("think", more)
    return g.compile(policy=policy or Threshold(1.0, detect_at=1, every=1))


def cot_output(result: Any) -> str:
    """The text a CoT run emits: the chain, plus a final-answer block when it exited early."""
    text = result.state.text if result.state is not None else ""
    if result.exit_reason == "certaindex" and result.answer is not None:
        return text + final_answer(str(result.answer))
    return text
