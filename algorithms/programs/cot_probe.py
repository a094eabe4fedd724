r"""Chain-of-Thought with probe-in-the-middle early exit (Dynasor-CoT done right, and certa's rule).

One live sequence grows ``interval`` (T) tokens per step. After each chunk the certaindex reads
the chain: it may ask for a probe — a suffix ending in ``\boxed{`` appended to the chain, a
short answer decoded and forgotten (exact KV rollback where the backend supports it, else a
separate request sharing the prefix; both go through ``seq.probe``; kind ``probe``) — and it
says whether the answer is settled. Probe styles (:mod:`~certa.algorithms.probe_styles`):
``forced`` (the default: ``**Final Answer**\n\n\[ \boxed{``, sampled at the chain's
temperature, stop at ``\]``: how the dev probe banks were made) and ``dynasor`` (Dynasor's
text, greedy).

The default certaindex (preset ``certa``, :func:`~certa.algorithms.signals.reasoning.reasoning_signal`)
survives false consensus: exit once the chain has boxed its answer in its thinking (text only,
free), or once its own text and a stable majority of its probes name the same value; probes
are taken only once the text has stated an answer, every 128 tokens. Chosen leave-one-model-out
and leave-one-dataset-out on the dev probe banks (docs/evaluation.md). Dynasor's presets use its
rule (:class:`~certa.algorithms.signals.cot.ProbeAgreement`: the last ``k`` probed answers are
non-empty, math-equivalent and free of hesitation words — Dynasor's ``should_early_exit``
returns True even for inconsistent answers; this does not): mild (8, 64), low (5, 64),
mid (3, 64), high (2, 64), crazy (2, 32); ``settled`` (k=3, T=64: agreement and no hesitation
in the chain's text, the default chosen for small non-reasoning models); ``text`` (T=32,
:func:`text_signal`).

The knob is main decode tokens, capped at ``max_tokens``. On an early exit the answer is the
one the certaindex vouches for (the boxed value, or the latest probe's); at the chain's end
it is extracted from the whole chain (falling back to the last non-empty probe). The state's
``answers`` are the probed answers, so window policies (ESC, margin) also work on CoT.
``seed`` (an input) seeds the chain's sampling, so chains of one question sample differently.

**Text probes** (``probe="text"``, the ``text`` preset's default): no probe requests at all.
After each chunk the chain's own text is read — the answer it has committed to
(:mod:`~certa.algorithms.signals.text`) is the probe answer, at zero decode cost. When the
signal reaches 1.0 the program stops the thinking stream, closes the thought the way the
model family expects (:func:`close_thought`: ``</think>`` for reasoning families, then a short
"Final Answer" continuation ending in ``\boxed{``), decodes the answer (kind ``probe``,
stopping at its closing brace) and returns it.

Example:
    >>> import certa as ct
    >>> b = ct.ScriptedBackend(responses=["a " * 200], probe=lambda text, suffix: "18} \\]")
    >>> r = ct.Runtime(b).run_sync(cot_program("high", max_tokens=256), question="9 * 2?")
    >>> r.answer, r.exit_reason, r.tokens.main
    ('18', 'certaindex', 128)
    >>> chain = "<think>9 * 2 = 18. So the answer is 18. " + "Let me verify once more. " * 200
    >>> b = ct.ScriptedBackend(responses=[chain], probe=lambda text, suffix: "18}")
    >>> r = ct.Runtime(b).run_sync(cot_program(max_tokens=1024), question="What is 9 * 2?")
    >>> r.answer, r.exit_reason, r.tokens.main, r.tokens.probe
    ('18', 'certaindex', 320, 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal

from certa.dsl import END, Appended, CompiledGraph, Graph, State
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, Threshold
from certa.runtime.types import Knob

from certa.algorithms.answers import extract_answer, extract_probe_answer
from certa.algorithms.probe_styles import PROBE_STYLES, ProbeStyle
from certa.algorithms.prompts import final_answer, probe_text, prompt
from certa.algorithms.signals.cot import AllOf, ChainView, CoTSignal, ProbeAgreement, Settled, signal_from_dict
from certa.algorithms.signals.reasoning import reasoning_signal
from certa.algorithms.signals.text import Committed, committed_answer, for_problem
from certa.algorithms.signals import ProbeObs

__all__ = ["CERTA_INTERVAL", "ChunkRead", "PRESETS", "TEXT_INTERVAL", "CoTState", "certa_signal", "close_thought",
           "cot_output", "cot_program", "read_chunk", "settled_signal", "text_signal"]

PRESETS: dict[str, tuple[int, int]] = {"mild": (8, 64), "low": (5, 64), "mid": (3, 64), "high": (2, 64),
                                       "crazy": (2, 32)}
"""Dynasor's saving-effort presets as ``(k, T)``: window of agreeing probes, tokens between probes."""

CERTA_INTERVAL = 64
"""Tokens per chunk of the ``certa`` and ``settled`` presets (the text is read after each)."""


def certa_signal() -> CoTSignal:
    """The ``certa`` preset's certaindex (``cot_program()``'s default):
    :func:`~certa.algorithms.signals.reasoning.reasoning_signal`."""
    return reasoning_signal()


def settled_signal(k: int = 3) -> CoTSignal:
    """The ``settled`` preset's certaindex: the last ``k`` probes agree (Dynasor's rule, probes
    stopped at the answer's closing brace) AND no hesitation in the chain's recent text.

    Chosen on GSM8K dev traces of Qwen2.5-Coder-1.5B (80 problems; docs/evaluation.md), where
    no grounded/confidence/progress variant decoded fewer tokens at its accuracy; it loses
    accuracy on MATH-500 (0.80x at -5.5 pt held-out) and fails on reasoning models (false
    consensus), so it is no longer the default."""
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


@dataclass(frozen=True)
class ChunkRead:
    """What the certaindex made of one chunk: the probe it asked for (if any), its value, the
    answer it vouches for when the value is 1.0, and the text length at the last probe."""

    probe: ProbeObs | None
    value: float
    answer: str | None
    probed_chars: int


async def read_chunk(rule: CoTSignal, probes: list[ProbeObs], text: str, tokens: int, probed_chars: int, *,
                     probe_from: int, ask: Callable[[], Awaitable[ProbeObs]]) -> ChunkRead:
    """Read the chain after a chunk: unless the text alone settles the rule (no probe could change
    that), take a probe (``ask``) when the rule reads probes and one is due; then evaluate the
    rule. The one copy of this logic: ``cot_program`` runs it live,
    :class:`~certa.eval.replay.ReplayCoT` on recorded chains."""
    view = ChainView(probes, text, tokens)
    new: ProbeObs | None = None
    if not rule.settled_by_text(view) and rule.reads_probes and tokens >= probe_from and \
            rule.probe_due(text[probed_chars:], view):
        new = await ask()
        view, probed_chars = ChainView([*probes, new], text, tokens), len(text)
    value = rule(view)
    return ChunkRead(new, value, rule.answer(view) if value >= 1.0 else None, probed_chars)


class CoTState(State):
    """The live sequence, the chain so far, and every probe taken."""

    question: str
    seed: int | None = None  # seeds the chain's sampling (and its sampled probes)
    seq: Any = None
    text: str = ""
    finished: bool = False
    exact_probes: bool = False
    probes: Appended[list[ProbeObs]] = []
    answers: Appended[list[str]] = []
    value: float = 0.0  # the certaindex signal after the latest step
    probed_chars: int = 0  # length of the chain text at the last probe
    exit_answer: str | None = None  # the answer the certaindex vouched for when it reached 1.0
    forced: str | None = None  # text probes: the answer decoded after closing the thought


def _rule(preset: str, k: int | None, signal: CoTSignal | dict | None) -> tuple[CoTSignal, int, str]:
    """The preset's certaindex, chunk size and probe style (``k``/``signal`` override the rule)."""
    if preset not in ("certa", "settled", "text") and preset not in PRESETS:
        raise ConfigError(f"unknown CoT preset {preset!r}", hint=f"certa, settled, text, or one of {', '.join(PRESETS)}")
    if k is not None and preset in ("certa", "text") and signal is None:
        raise ConfigError(f"the {preset} preset has no probe window k", hint="k applies to settled and Dynasor presets")
    k0, t0 = {"certa": (1, CERTA_INTERVAL), "settled": (3, CERTA_INTERVAL),
              "text": (1, TEXT_INTERVAL)}.get(preset) or PRESETS[preset]
    k = k or k0
    if k < 1:
        raise ConfigError(f"cot needs k >= 1, got {k}")
    if isinstance(signal, dict):
        return signal_from_dict(signal), t0, "forced"
    made = {"certa": reasoning_signal, "text": text_signal, "settled": lambda: settled_signal(k)}
    return signal or made.get(preset, lambda: ProbeAgreement(k))(), t0, "forced" if preset == "certa" else "dynasor"


def cot_program(preset: str = "certa", *, max_tokens: int = 1024, family: str = "default", temperature: float = 0.0,
                top_p: float = 1.0, dataset: str = "math", k: int | None = None, interval: int | None = None,
                probe_tokens: int | None = None, policy: Policy | None = None, chat: bool = True, name: str = "cot",
                signal: CoTSignal | dict | None = None, probe: str | None = None,
                probe_style: str | None = None) -> CompiledGraph:
    """Build CoT with probe-in-the-middle as a compiled graph (inputs: ``question=``, optional ``seed=``).

    ``preset``: ``"certa"`` (default: the reasoning certaindex, ``forced`` probes, 64-token
    chunks), ``"settled"``, ``"text"`` or one of Dynasor's :data:`PRESETS`. ``k``/``interval``
    override the preset's window and chunk size; ``signal`` (a :mod:`~certa.algorithms.signals.cot`
    signal or its ``to_dict``) overrides its certaindex. ``family`` picks the ``dynasor``
    probe's template and how a text-probe exit closes the thought; ``probe_style`` overrides
    the preset's (``forced`` / ``dynasor``, :data:`~certa.algorithms.probe_styles.PROBE_STYLES`);
    ``probe_tokens`` the style's decode budget. ``policy`` defaults to stopping the first time
    certaindex reaches 1.0. Probes are skipped while they could not matter (before the signal's
    ``min_tokens`` minus its probe window, or when the signal says no probe is due).
    ``probe``: ``"model"`` (ask the model, the default), ``"text"`` (read the chain's
    committed answer; the ``text`` preset's default: on exit the thought is closed
    (:func:`close_thought`) and the answer decoded and counted) or ``"none"`` (no probe, no
    early exit: the plain chain, e.g. the baseline of SC over CoT).
    """
    rule, t0, style_name = _rule(preset, k, signal)
    probe = probe or ("text" if preset == "text" else "model")
    if probe not in ("model", "text", "none"):
        raise ConfigError(f"unknown probe kind {probe!r}",
                          hint="model (ask the model), text (read the chain) or none (no early exit)")
    interval = interval or t0
    if interval < 1 or max_tokens < 1:
        raise ConfigError(f"cot needs interval and max_tokens >= 1, got {interval}, {max_tokens}")
    style: ProbeStyle = PROBE_STYLES.get(probe_style or style_name)
    budget = probe_tokens or style.max_tokens
    probe_from = max(0, rule.min_tokens - (rule.window - 1) * interval)
    probe_text(family)  # an unknown model family is refused whatever the probe style
    probe_suffix, closing = style.suffix(family), close_thought(family)
    g = Graph(CoTState, knob=Knob("tokens", cap=max_tokens), name=name)

    @g.step
    async def start(s: CoTState, ctx) -> dict:
        """Open the sequence (nothing decoded yet)."""
        seq = await ctx.sequence(prompt("math_cot", question=s.question), max_tokens=max_tokens,
                                 temperature=temperature, top_p=top_p, seed=s.seed, chat=chat)
        return {"seq": seq, "exact_probes": seq.exact_probes}

    @g.step
    async def think(s: CoTState, ctx) -> dict:
        """Decode T more tokens, then let the certaindex read the chain (and maybe probe it)."""
        await s.seq.extend(interval)
        update: dict[str, Any] = {"text": s.seq.text, "finished": s.seq.finished, "value": 0.0}
        if s.seq.finished or probe == "none":
            return update
        if probe == "text":
            return update | await _read_text(s)

        async def ask() -> ProbeObs:
            seed = None if s.seed is None else s.seed * 100_003 + len(s.probes)
            out = await s.seq.probe(probe_suffix, max_tokens=budget, close_brace=True, stop=style.stop,
                                    **style.sampling(temperature, top_p, seed=seed))
            logprobs = tuple(out.token_logprobs) if out.token_logprobs is not None else None
            return ProbeObs(s.seq.tokens, extract_probe_answer(out.text), out.text, logprobs)

        got = await read_chunk(for_problem(rule, s.question, dataset), s.probes, s.seq.text, s.seq.tokens, s.probed_chars, probe_from=probe_from, ask=ask)
        new = [got.probe] if got.probe is not None else []
        return update | {"probes": new, "answers": [o.answer for o in new], "value": got.value,
                         "probed_chars": got.probed_chars, "exit_answer": got.answer}

    async def _read_text(s: CoTState) -> dict[str, Any]:
        """Text probe: the committed answer is the probe answer; on exit, force the answer."""
        text, tokens = s.seq.text, s.seq.tokens
        obs = ProbeObs(tokens, committed_answer(text, dataset=dataset, question=s.question), "", None)
        value = for_problem(rule, s.question, dataset)(ChainView([*s.probes, obs], text, tokens))
        out: dict[str, Any] = {"probes": [obs], "answers": [obs.answer], "value": value, "probed_chars": len(text)}
        if value >= 1.0:  # the exit: close the thought and decode the answer (counted as probe tokens)
            res = await s.seq.probe(closing, max_tokens=budget, close_brace=True)
            await s.seq.close()  # stop the thinking stream
            out["forced"] = extract_probe_answer(res.text) or obs.answer
        return out

    def more(s: CoTState) -> Literal["think", "__end__"]:
        return END if s.finished else "think"

    @g.certaindex
    def settled(s: CoTState) -> float:
        """The CoT certaindex on the latest chunk (default: the chain boxed its answer, or its text
        and a stable majority of its probes agree)."""
        return s.value

    @g.answer
    def final(s: CoTState) -> str | None:
        if s.forced is not None:
            return s.forced
        probed = next((a for a in reversed(s.answers) if a), None)
        if not s.finished:  # stopped by the certaindex, or read while running (SC over CoT): no re-read
            return (s.exit_answer or probed) if s.value >= 1.0 else probed
        return extract_answer(s.text, dataset) or probed

    g.edge("start", "think")
    g.branch("think", more)
    return g.compile(policy=policy or Threshold(1.0, detect_at=1, every=1))


def cot_output(result: Any) -> str:
    """The text a CoT run emits: the chain, plus a final-answer block when it exited early."""
    text = result.state.text if result.state is not None else ""
    if result.exit_reason == "certaindex" and result.answer is not None:
        return text + final_answer(str(result.answer))
    return text
