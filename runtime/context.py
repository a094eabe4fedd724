"""Context: the only way a step talks to the model (gen, sequences with probes, score, call).

Every request gets a unique rid ``{program}:{step}:{branch}:{n}``, goes through the
scheduler, is counted per program and kind, and is aborted on the backend if the awaiting
task is cancelled (early exit, Ctrl-C, client disconnect). ``ctx.gen(..., stream=True)``
streams the text as it is decoded (:mod:`certa.runtime.token_stream`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Literal, overload

from certa.runtime.backends.base import probe_kwargs
from certa.runtime.errors import BackendError, CertaError, ConfigError, LimitExceededError
from certa.runtime.seeds import call_salt, salted
from certa.runtime.token_stream import STREAM_TOKENS, TokenStream, token_emitter, tokens_wanted
from certa.runtime.types import GenRequest, GenResult, ScoreRequest, ScoreResult, TokenKind

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.program import Program
    from certa.runtime.result import Result
    from certa.runtime.subprogram import Child
    from certa.runtime.runtime import ProgramRun


class Context:
    """Per-step handle: ``ctx.gen``, ``ctx.sequence``, ``ctx.score``, ``ctx.call``.

    Attributes:
        step: name of the running step; ``branch``: its branch index; ``payload``: the value
        a fan-out ``Send`` carried to this branch (or None; a ``g.loop`` keeps it); ``lane``
        (property): its index in its fan-out.
    """

    __slots__ = ("run", "step", "branch", "payload")

    def __init__(self, run: "ProgramRun", step: str = "", branch: int = 0, payload: Any = None) -> None:
        self.run = run
        self.step = step
        self.branch = branch
        self.payload = payload

    def child(self, step: str, branch: int = 0, payload: Any = None) -> "Context":
        return Context(self.run, step, branch, payload)

    @property
    def program(self) -> "Program":
        return self.run.program

    @property
    def program_id(self) -> str:
        return self.run.program.program_id

    @property
    def max_fanout(self) -> int | None:
        """The runtime's cap on the branches one step may fan out to (None = no limit)."""
        return self.run.runtime.limits.max_fanout

    def spare_slots(self, keep: int = 0) -> int:
        """Requests this program may start now beside its own in flight, leaving ``keep`` free, while
        nobody waits (0 unless the scheduler's policy widens:
        :meth:`~certa.runtime.scheduling.scheduler.Scheduler.spare`); elastic fan-outs read it."""
        return self.run.runtime.scheduler.spare(self.run.info, keep)

    def _rid(self, tag: str = "") -> str:
        return f"{self.run.program.program_id}:{self.step}:{self.branch}:{next(self.run.rid_counter)}{tag}"

    def _check_limits(self, prompt: str, max_tokens: int) -> None:
        """Refuse a prompt or a token budget over the runtime's limits (before anything is sent)."""
        limits = self.run.runtime.limits
        if limits.max_prompt_chars is not None and len(prompt) > limits.max_prompt_chars:
            raise LimitExceededError(f"prompt of {len(prompt)} chars is over the limit {limits.max_prompt_chars}",
                                     program=self.program_id, step=self.step, branch=self.branch)
        if limits.max_tokens_per_request is not None and max_tokens > limits.max_tokens_per_request:
            raise LimitExceededError(f"max_tokens={max_tokens} is over the limit {limits.max_tokens_per_request}",
                                     program=self.program_id, step=self.step, branch=self.branch)

    def _request(self, prompt: str, kind: TokenKind, max_tokens: int, temperature: float, top_p: float,
                 top_k: int, seed: int | None, stop, logprobs: int, chat: bool, prefix_hint: str | None) -> GenRequest:
        self._check_limits(prompt, max_tokens)
        pid = self.run.program.program_id
        if seed is not None and self.run.salt is not None:  # a sub-program: its call path salts the seed
            seed = salted(seed, self.run.salt)
        return GenRequest(prompt=prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                          top_k=top_k, seed=seed, stop=tuple([stop] if isinstance(stop, str) else stop),
                          rid=self._rid(), program_id=pid, step=self.step, branch=self.branch, kind=kind,
                          logprobs=logprobs, chat=chat, prefix_hint=prefix_hint if prefix_hint is not None else pid)

    @overload
    def gen(self, prompt: str, *, max_tokens: int = ..., temperature: float = ..., top_p: float = ...,
            top_k: int = ..., seed: int | None = ..., stop: str | tuple[str, ...] | list[str] = ...,
            kind: TokenKind = ..., logprobs: int = ..., chat: bool = ..., prefix_hint: str | None = ...,
            stream: Literal[False] = ...) -> Coroutine[Any, Any, GenResult]: ...

    @overload
    def gen(self, prompt: str, *, max_tokens: int = ..., temperature: float = ..., top_p: float = ...,
            top_k: int = ..., seed: int | None = ..., stop: str | tuple[str, ...] | list[str] = ...,
            kind: TokenKind = ..., logprobs: int = ..., chat: bool = ..., prefix_hint: str | None = ...,
            stream: Literal[True]) -> TokenStream: ...

    def gen(self, prompt: str, *, max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
            top_k: int = 0, seed: int | None = None, stop: str | tuple[str, ...] | list[str] = (),
            kind: TokenKind = "main", logprobs: int = 0, chat: bool = False,
            prefix_hint: str | None = None, stream: bool = False) -> Coroutine[Any, Any, GenResult] | TokenStream:
        """Generate from ``prompt``: ``await ctx.gen(...)`` gives the GenResult. ``chat=True``
        wraps it in the model's chat template. ``stream=True`` returns a
        :class:`~certa.runtime.token_stream.TokenStream` instead: ``async for chunk in
        ctx.gen(prompt, stream=True)`` yields TokenChunks (``chunk.text``) as they are decoded,
        and awaiting it gives the GenResult. Prompts and ``max_tokens`` over the runtime's
        limits raise CT205 at the call (a stream: when first iterated), before anything is sent."""
        if stream:
            return TokenStream(self, lambda: self._request(prompt, kind, max_tokens, temperature, top_p, top_k, seed,
                                                           stop, logprobs, chat, prefix_hint))
        # the request is built now (limits raise at the call) and the submit coroutine returned as is
        req = self._request(prompt, kind, max_tokens, temperature, top_p, top_k, seed, stop, logprobs, chat,
                            prefix_hint)
        if STREAM_TOKENS.get():  # Runtime.stream(mode="tokens"): stream every gen out as token events
            return self.run.submit(req, self, on_text=token_emitter(self, req))
        return self.run.submit(req, self)

    async def score(self, prompt: str, options: tuple[str, ...] = ("Yes", "No"), *, chat: bool = False) -> ScoreResult:
        """Probability of each option as the next text (self-evaluation rewards)."""
        self._check_limits(prompt, 1)
        req = ScoreRequest(prompt=prompt, options=tuple(options), rid=self._rid(), program_id=self.program_id,
                           step=self.step, branch=self.branch, chat=chat)
        return await self.run.submit_score(req, self)

    async def sequence(self, prompt: str, *, max_tokens: int = 1024, temperature: float = 0.0,
                       top_p: float = 1.0, top_k: int = 0, seed: int | None = None,
                       stop: str | tuple[str, ...] = (), chat: bool = False) -> "ManagedSequence":
        """Open a live sequence to grow chunk by chunk and probe between chunks (CoT probing)."""
        req = self._request(prompt, "main", max_tokens, temperature, top_p, top_k, seed, stop, 0, chat, None)
        seq = await self.run.timed(self.run.backend.open_sequence(req), req.rid, self)
        managed = ManagedSequence(self, seq)
        self.run.sequences.append(managed)
        return managed

    async def call(self, program: Any, /, **inputs: Any) -> "Result":
        """Run a sub-program (compiled graph or Program) to completion as part of this step.

        Its tokens count toward this program too; cancelling this step cancels it. The seeds
        its requests carry are salted with its call path (:mod:`certa.runtime.seeds`), so
        ``seed=ctx.branch`` in it differs from call to call, deterministically.
        """
        run = self.run
        calls = run.calls if run.calls is not None else {}
        run.calls = calls
        index = calls.get((self.step, self.branch), 0)  # the how-many-th call of this branch (same order each run)
        calls[(self.step, self.branch)] = index + 1
        name = getattr(program, "name", None) or getattr(program, "__name__", None) or type(program).__name__
        salt = call_salt(run.salt, self.step, self.branch, index, str(name))
        result = await run.runtime.run_program(program, inputs, parent=run, salt=salt)
        if result.error is not None and not isinstance(result.error, asyncio.CancelledError):
            raise result.error
        return result

    def spawn(self, program: Any, /, **inputs: Any) -> "Child":
        """Start a sub-program this step steers and reads while it runs (``await child.advance()``,
        ``child.answer``, ``child.certaindex``; :mod:`certa.runtime.subprogram`). Its tokens
        count toward this program; it is cancelled if still running when this program ends."""
        return self.run.runtime.spawn(program, inputs, parent=self.run)

    def interrupt(self, value: Any = None) -> Any:
        """Pause this step for a human (LangGraph's ``interrupt``): the program pauses once its
        other branches in flight finish, and ``run`` returns an ``InterruptedResult`` whose
        ``interrupt.value`` is ``value``. Resumed with ``command=Command(resume=answer)``, the
        step runs again from its beginning and this call returns ``answer`` (the n-th call of a
        step gets the n-th answer). Needs a compiled graph run on a thread (``thread_id=``):
        CT300 otherwise, also in a ``ctx.call`` sub-program. Do not catch the exception it raises
        (a ``BaseException``, like ``CancelledError``); requests sent before it are sent again
        when the step runs again, so interrupt first, or in a step of its own."""
        ask = getattr(self.run.program, "interrupt_step", None)
        if ask is None:
            raise ConfigError(f"ctx.interrupt needs a compiled graph; program {self.program_id!r} is not one",
                              program=self.program_id, step=self.step, branch=self.branch)
        return ask(self.step, self.branch, value)

    @property
    def lane(self) -> int:
        """This branch's lane in the fan-out that launched it: ``i`` of ``fanout=n`` (0..n-1) or
        the index of its ``Send`` in the router's list, kept by a ``g.loop`` continuing it
        (lanes an elastic fan-out adds are negative); 0 for a branch of no fan-out."""
        lane_of = getattr(self.run.program, "lane_of", None)
        return lane_of(self.branch) if lane_of is not None else 0

    def emit(self, kind: str, **data: Any) -> None:
        """Publish an event for this step and branch on the runtime's event stream (a no-op
        while nobody listens)."""
        self.run.runtime.events.emit(kind, self.program_id, self.step, self.branch, **data)


class ManagedSequence:
    """A backend sequence whose chunks and probes are scheduled, counted and aborted like requests
    (each one under its own ticket: :meth:`~certa.runtime.program_run.ProgramRun.scheduled`)."""

    def __init__(self, ctx: Context, seq) -> None:
        self.ctx = ctx
        self.seq = seq
        self._probes = itertools.count()

    @property
    def text(self) -> str:
        return self.seq.text

    @property
    def tokens(self) -> int:
        return self.seq.tokens

    @property
    def finished(self) -> bool:
        return self.seq.finished

    @property
    def exact_probes(self) -> bool:
        """True when probes roll the KV back exactly (native backend support)."""
        return bool(self.ctx.run.backend.capabilities.rollback_probe)

    async def extend(self, max_new_tokens: int) -> GenResult:
        if self.ctx.run.pacer is not None:  # a spawned sub-program: one chunk per step its parent allows
            await self.ctx.run.pacer.gate()
        out = await self.ctx.run.scheduled(self.seq.rid, max_new_tokens, lambda: self.seq.extend(max_new_tokens),
                                           "main", self.ctx)
        if out.text and tokens_wanted():  # Runtime.stream(mode="tokens"): each chunk is a token event
            self.ctx.emit("token", rid=self.seq.rid, text=out.text, attempt=0)
        return out

    async def probe(self, suffix: str, max_tokens: int = 20, *, close_brace: bool = False, stop: tuple[str, ...] = (),
                    temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> GenResult:
        """Probe (counted as kind ``probe``). ``close_brace``: stop after the brace that closes
        one the suffix opened, where the backend supports it (same answer, fewer tokens);
        ``stop`` strings; ``temperature`` > 0 samples the probe (with ``top_p``, ``seed``)
        where the backend can, else it is greedy."""
        self.ctx._check_limits(self.seq.req.prompt + self.seq.text + suffix, max_tokens)
        rid = f"{self.seq.rid}.probe{next(self._probes)}"
        wanted: dict[str, Any] = {"close_brace": True} if close_brace else {}
        if stop:
            wanted["stop"] = tuple(stop)
        if temperature > 0.0:
            wanted.update(temperature=temperature, top_p=top_p, seed=seed)
        extra = probe_kwargs(self.seq, **wanted) if wanted else {}
        return await self.ctx.run.scheduled(rid, max_tokens, lambda: self.seq.probe(suffix, max_tokens, rid=rid, **extra),
                                            "probe", self.ctx)

    async def close(self) -> None:
        if self in self.ctx.run.sequences:
            self.ctx.run.sequences.remove(self)
            await self.seq.close()
        self.ctx.run.inflight.discard(self.seq.rid)

    async def __aenter__(self) -> "ManagedSequence":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


__all__ = ["Context", "ManagedSequence", "BackendError", "CertaError"]
