"""Live sequences on the llama.cpp engine: extend by a chunk, probe, and roll a probe back exactly.

A probe appends its suffix to a sequence's pending tokens and decodes greedily; ending it
drops exactly the KV positions it added and re-pends the sequence's last real token, so the
continuation is token-identical to a run without the probe. These are :class:`Batcher`
methods (engine thread only), kept apart from batch formation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from certa.runtime.types import GenResult
from certa.runtime.backends.llamacpp.jobs import Job, Probe, deliver

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.backends.llamacpp.kv import KVSlots
    from certa.runtime.backends.llamacpp.model import LlamaModel


class SequenceOps:
    """Extend and probe operations of :class:`~certa.runtime.backends.llamacpp.batch.Batcher`."""

    jobs: list[Job]
    kv: "KVSlots"
    model: "LlamaModel"
    forget: Callable[[tuple[str, ...]], None]

    def start_extend(self, job: Job, n: int, future) -> None:
        if job.aborted:
            deliver(job.loop, future, job.result("abort"))
        elif job.finished:
            deliver(job.loop, future, job.result())
        else:
            job.future, job.budget = future, n

    def start_probe(self, job: Job, probe: Probe) -> None:
        if probe.aborted:
            return
        if job.aborted or job not in self.jobs:
            self.forget((probe.rid,))
            deliver(job.loop, probe.future, GenResult("", 0, finish_reason="abort", rid=probe.rid))
            return
        slot = job.slot
        if not job.pending and slot is not None and slot.kv:  # re-open the last token for its logits
            job.pending = [slot.kv[-1]]
            self.kv.truncate(slot, len(slot.kv) - 1)
        probe.base_len = (len(slot.kv) if slot is not None else 0) + len(job.pending)
        probe.sampler = self.model.sampler(probe.temperature, probe.top_p, 0, probe.seed)
        job.probe = probe
        job.pending = job.pending + probe.suffix

    def cancel_probe(self, job: Job, probe: Probe | None) -> None:
        if probe is not None and job.probe is probe:
            self.end_probe(job, deliver_result=False)

    def end_probe(self, job: Job, *, deliver_result: bool = True) -> None:
        """Forget the probe exactly: drop its KV positions and re-pend the last real token.
        ``deliver_result=False``: the probe was cut short; its awaiter gets an abort result."""
        probe, job.probe = job.probe, None
        if probe is None:
            return
        slot, n = job.slot, probe.base_len
        logical = ((slot.kv if slot is not None else []) + job.pending)[:n]
        keep = min(len(slot.kv), n - 1) if slot is not None else 0
        if slot is not None:
            self.kv.truncate(slot, keep)
        job.pending = logical[keep:]
        job.prompt_left = min(job.prompt_left, len(job.pending))
        self.model.free_sampler(probe.sampler)
        self.forget((probe.rid,))
        probe.text.flush()
        eog = bool(probe.out) and self.model.is_eog(probe.out[-1])
        reason = ("stop" if eog or probe.text.stopped else "length") if deliver_result else "abort"
        deliver(job.loop, probe.future, GenResult(probe.text.text, len(probe.out), prompt_tokens=len(probe.suffix),
                                                  finish_reason=reason, rid=probe.rid,  # type: ignore[arg-type]
                                                  token_logprobs=list(probe.logps)))


__all__ = ["SequenceOps"]
