r"""ReplayBackend: serves recorded reasoning traces as if a model produced them (no model runs).

A request's prompt is a *replay key* ``replay://<idx>/<sample>`` (see :func:`replay_key`):
``generate`` returns that trace sample whole (its recorded ``tokens``, ``text`` and finish),
``open_sequence`` returns a :class:`ReplaySequence` that reveals the sample ``extend(n)``
tokens at a time and answers ``probe`` with the probe recorded at the current position.

Token accounting (what a real engine would have spent):

* main — the sample's recorded ``tokens`` (a sequence: the tokens extended so far);
* probe decode — the probe's recorded ``tokens`` when the trace has it (``certa traces
  collect`` records it), else :func:`estimate_probe_tokens` of its answer (answer tokens + 1
  for the closing brace, capped at the probe budget);
* probe prefill — the probe's recorded ``prompt_tokens``, else :data:`PROBE_PREFILL_TOKENS`
  (the default probe text is 21 Qwen2.5 tokens); reported as ``prompt_tokens`` of the probe,
  so the runtime counts it under ``prompt``, apart from decode tokens.

Example:
    >>> import asyncio
    >>> from certa.eval.traces import parse_trace_line
    >>> p = parse_trace_line('{"idx": 0, "gold": "18", "interval": 32, "samples": [{"tokens": 70, '
    ...     '"pred": "18", "correct": true, "probes": [{"at": 32, "answer": "16"}, {"at": 64, "answer": "18"}]}]}')
    >>> b = ReplayBackend([p])
    >>> async def main():
    ...     seq = await b.open_sequence(GenRequest(prompt=replay_key(0, 0), rid="s"))
    ...     await seq.extend(64)
    ...     out = await seq.probe("... \\boxed{", 20)
    ...     return seq.tokens, out.text, out.tokens, out.prompt_tokens
    >>> asyncio.run(main())
    (64, '18}', 3, 21)
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable

from certa.eval.errors import TraceFormatError
from certa.runtime.errors import BackendError
from certa.eval.traces import Probe, Sample, TraceProblem
from certa.runtime.types import Capabilities, GenRequest, GenResult
from certa.runtime.backends.base import Backend, BackendSequence

__all__ = ["ChainReplayBackend", "HESITANT_MARK", "PROBE_MAX_TOKENS", "PROBE_PREFILL_TOKENS", "ReplayBackend", "ReplaySequence",
           "estimate_probe_tokens", "probe_cost", "probe_prefill", "recorded_probe_text", "replay_key"]

PROBE_MAX_TOKENS = 20
"""Probe decode budget (Dynasor's ``max_tokens=20``); caps the estimate."""

PROBE_PREFILL_TOKENS = 21
"""Tokens of the default probe text (``prompts.probe_text()``) with the Qwen2.5 tokenizer."""

_SCHEME = "replay://"


def replay_key(idx: int | str, sample: int) -> str:
    """The prompt that asks a :class:`ReplayBackend` for sample ``sample`` of problem ``idx``."""
    return f"{_SCHEME}{idx}/{sample}"


def estimate_probe_tokens(answer: str | None, cap: int = PROBE_MAX_TOKENS) -> int:
    """Decode tokens of a probe whose continuation stopped at the closing brace (an estimate).

    Qwen2.5 tokenizes digits one by one; other characters count one token per two (whitespace
    ignored); +1 for the closing brace; capped at ``cap``. An empty answer is 1 token (the
    brace alone). Measured with the Qwen2.5 tokenizer: ``18}`` 3, ``7.6}`` 4 (estimate 4),
    ``\\frac{1}{2}}`` 7 (estimate 8).

    >>> estimate_probe_tokens("18"), estimate_probe_tokens("7.6"), estimate_probe_tokens("x" * 99)
    (3, 4, 20)
    """
    text = "".join((answer or "").split())
    digits = sum(c.isdigit() for c in text)
    return min(cap, digits + math.ceil((len(text) - digits) / 2) + 1)


def probe_cost(probe: Probe, cap: int = PROBE_MAX_TOKENS) -> int:
    """Decode tokens of a recorded probe: its ``tokens`` (``certa traces collect``) or
    ``probe_tokens`` (probe banks) field if recorded, else the estimate."""
    extra = probe.model_extra or {}
    recorded = extra.get("tokens", extra.get("probe_tokens"))
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 0:
        return min(recorded, cap)
    return estimate_probe_tokens(probe.answer, cap)


HESITANT_MARK = " hmm"
"""Appended to the text of a recorded probe marked ``certain: false`` (a probe bank records only
that Dynasor's hesitation filter fired on the probe's text, not the text): the replayed probe
then reads as hesitant to the same check live probes go through (``has_hesitation``)."""


def recorded_probe_text(probe: Probe) -> str:
    """The continuation a recorded probe stands for: its ``text`` if recorded, else its answer and
    the closing brace (plus :data:`HESITANT_MARK` when the bank marks it ``certain: false``)."""
    extra = probe.model_extra or {}
    text = extra.get("text")
    if isinstance(text, str):
        return text
    return f"{probe.answer or ''}}}" + (HESITANT_MARK if extra.get("certain") is False else "")


def text_at(sample: Sample, tokens: int) -> str:
    """The sample's text after ``tokens`` main tokens: cut at the probe's recorded ``chars``
    there, else (older traces) at the same fraction of the text as of the tokens."""
    if tokens >= sample.tokens:
        return sample.text
    for p in sample.probes:
        if p.at == tokens and p.chars is not None:
            return sample.text[:p.chars]
    return sample.text[:len(sample.text) * max(0, tokens) // max(1, sample.tokens)]


def probe_prefill(probe: Probe) -> int:
    """Prefill tokens of a recorded probe: its ``prompt_tokens`` if recorded, else the default probe's."""
    recorded = (probe.model_extra or {}).get("prompt_tokens")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 0:
        return recorded
    return PROBE_PREFILL_TOKENS


class ReplaySequence(BackendSequence):
    """A recorded sample revealed chunk by chunk; probes return the answer recorded at the position.

    ``extend``/``probe`` never suspend, so a replay can also be driven without an event loop.
    """

    def __init__(self, req: GenRequest, problem: TraceProblem, sample: Sample) -> None:
        super().__init__(req)
        self.problem, self.sample = problem, sample
        self._probes = {p.at: p for p in sample.probes}

    def step(self, max_new_tokens: int) -> GenResult:
        """Synchronous :meth:`extend`."""
        if self.finished:
            return GenResult("", 0, finish_reason=self.finish_reason or "stop", rid=self.rid)  # type: ignore[arg-type]
        n = max(0, min(max_new_tokens, self.req.max_tokens - self.tokens, self.sample.tokens - self.tokens))
        self.tokens += n
        self.text = text_at(self.sample, self.tokens)
        if self.tokens >= self.sample.tokens:  # the recorded end: natural stop, or truncation if unfinished
            self.finished, self.text = True, self.sample.text
            self.finish_reason = "stop" if self.sample.finished else "length"
        elif self.tokens >= self.req.max_tokens:
            self.finished, self.finish_reason = True, "length"
        return GenResult("", n, finish_reason=self.finish_reason or "length", rid=self.rid)  # type: ignore[arg-type]

    def recorded_probe(self) -> Probe:
        """The probe recorded at the current position; TraceFormatError if the trace has none."""
        probe = self._probes.get(self.tokens)
        if probe is None:
            raise TraceFormatError(f"problem {self.problem.idx}: no probe recorded at token {self.tokens} "
                                   f"(recorded at {sorted(self._probes)[:6]}...)",
                                   hint="replay probes at multiples of the trace's interval")
        return probe

    def probe_now(self, max_tokens: int = PROBE_MAX_TOKENS, *, rid: str = "") -> GenResult:
        """Synchronous :meth:`probe`: the recorded answer and its token costs. Past a chain's last
        recorded probe (a probe bank lacks the last one or two before the chain's end) the probe
        answers nothing, at no cost."""
        if self.tokens not in self._probes and self._probes and self.tokens > max(self._probes):
            return GenResult("}", 0, finish_reason="length", rid=rid or f"{self.rid}.probe")
        probe = self.recorded_probe()
        return GenResult(recorded_probe_text(probe), probe_cost(probe, max_tokens), prompt_tokens=probe_prefill(probe),
                         finish_reason="length", rid=rid or f"{self.rid}.probe")

    async def extend(self, max_new_tokens: int) -> GenResult:
        return self.step(max_new_tokens)

    async def probe(self, suffix: str, max_tokens: int = 20, *, rid: str = "") -> GenResult:
        return self.probe_now(max_tokens, rid=rid)


class ReplayBackend(Backend):
    """Serves trace samples for replay keys (see the module docstring). Runs no model."""

    def __init__(self, problems: Iterable[TraceProblem]) -> None:
        self.problems: dict[str, TraceProblem] = {}
        for p in problems:
            if str(p.idx) in self.problems:
                raise TraceFormatError(f"problem idx {p.idx!r} appears twice")
            self.problems[str(p.idx)] = p
        self.capabilities = Capabilities(rollback_probe=True, score=False, name="replay")
        self._live: set[str] = set()

    def lookup(self, req: GenRequest) -> tuple[TraceProblem, Sample]:
        """The problem and sample a replay key names; BackendError for anything else."""
        key = req.prompt
        if not key.startswith(_SCHEME):
            raise BackendError(f"replay backend got a prompt that is not a replay key: {key[:40]!r}",
                               program=req.program_id or None, hint="use replay_key(idx, sample)")
        idx, _, sample = key[len(_SCHEME):].rpartition("/")
        problem = self.problems.get(idx)
        if problem is None or not sample.isdigit() or int(sample) >= len(problem.samples):
            raise BackendError(f"no trace sample for {key!r}", program=req.program_id or None)
        return problem, problem.samples[int(sample)]

    def serve(self, req: GenRequest) -> GenResult:
        """Synchronous :meth:`generate`: the whole recorded sample (cut at ``max_tokens``)."""
        _, s = self.lookup(req)
        n = min(s.tokens, req.max_tokens)
        finish = ("stop" if s.finished else "length") if n == s.tokens else "length"
        return GenResult(s.text if n == s.tokens else "", n, finish_reason=finish, rid=req.rid)  # type: ignore[arg-type]

    def open(self, req: GenRequest) -> ReplaySequence:
        """Synchronous :meth:`open_sequence`."""
        problem, sample = self.lookup(req)
        return ReplaySequence(req, problem, sample)

    async def generate(self, req: GenRequest) -> GenResult:
        self._live.add(req.rid)
        try:
            await asyncio.sleep(0)
            return self.serve(req)
        finally:
            self._live.discard(req.rid)

    async def open_sequence(self, req: GenRequest) -> ReplaySequence:
        return self.open(req)

    async def abort(self, rid: str) -> bool:
        return False

    def live_rids(self) -> set[str]:
        return set(self._live)


class ChainReplayBackend(ReplayBackend):
    """Serves one problem's chains to live programs (``cot_program``, ``sc_cot_program``): a
    sequence request gets the chain whose index is its ``seed`` (0 when unseeded), whatever its
    prompt. Runs no model; probes answer what the chain's probes recorded."""

    def __init__(self, problem: TraceProblem) -> None:
        super().__init__([problem])
        self.problem = problem

    def lookup(self, req: GenRequest) -> tuple[TraceProblem, Sample]:
        i = req.seed or 0
        if not 0 <= i < len(self.problem.samples):
            raise BackendError(f"problem {self.problem.idx} has {len(self.problem.samples)} chains; no chain {i}",
                               program=req.program_id or None, hint="seed chain i with seed=i")
        return self.problem, self.problem.samples[i]

