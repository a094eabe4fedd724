r"""Self-calibration while serving: explore a few programs to full compute, move the certaindex only when certified.

``SelfCalibrating("sc", risk=0.01)`` is a program (it has ``new``: ``Runtime.run``, ``certa
run`` and ``certa serve`` run it as any compiled graph). Each request is *explored* with the
probability :class:`ExploreRate` gives — it runs to full compute (SC: every sample; CoT: the
chain to its end, probed where every setting of the family would probe) and answers with full
compute's answer — or *served* with the current setting of the program's family
(:mod:`certa.eval.families`). An explored run shows what every setting would have answered
(SC: the vote after each prefix of its samples; CoT: each setting's exit, read on the chain
as it ran, :class:`Shadow`), so it gives one loss per setting: 1 when that setting's answer
differs from full compute's. :class:`OnlineCertifier` feeds them to one anytime-valid test per
setting (:class:`~certa.eval.risk.BettingTest`) and serves the cheapest setting of the certified
prefix (fixed-sequence testing); until one is certified, the shipped default. The setting moves
only when the evidence certifies it; nothing reads gold.

The guarantee: with traffic exchangeable over time (no drift), with probability >= 1 - delta,
at every moment every setting certified so far changes at most ``risk`` of the answers it gives
vs full compute. Explored requests are chosen by a coin, independent of the request.

Example:
    >>> import certa as ct
    >>> sc = SelfCalibrating("sc", risk=0.2, cap=4, explore=ExploreRate(1.0, 1.0))
    >>> rt = ct.Runtime(ct.ScriptedBackend(responses=["so \\boxed{18}."]))
    >>> [rt.run_sync(sc, question="9 * 2?").answer for _ in range(3)], sc.snapshot()["explored"]
    (['18', '18', '18'], 3)
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

from certa.algorithms.answers.clustering import majority
from certa.algorithms.signals.cot import AllOf, ChainView, CoTSignal
from certa.eval.families import PATIENCE, Family, changed, family, leaders, patience_signal, same_answer
from certa.eval.risk import BettingTest
from certa.runtime.errors import ConfigError
from certa.runtime.policy import Even

__all__ = ["ExploreRate", "OnlineCertifier", "SelfCalibrating", "Shadow"]


@dataclass(frozen=True)
class ExploreRate:
    """The chance a request is explored: ``warmup`` while nothing is certified, then ``steady``.

    Default: 10% of requests, certified or not. An explored request costs full compute instead of
    the served setting's share ``r`` of it, so exploring costs about ``0.1 * (1 - r)`` more
    tokens (3% at r = 0.7) and never more than 10%. Certifying risk ``R`` needs at least
    ``ln(1 / delta) / R`` loss-free explored problems (46 at R = 0.05, delta = 0.1; 230 at
    R = 0.01), so at 10% the first certificate comes after ~500 (R = 0.05) or ~2,500 (R = 0.01)
    requests. A higher ``warmup`` reaches it sooner at a higher cost: on the dev streams
    (300-370 problems, docs/evaluation.md) warm-up rates of 0.25 and 0.5 cost more than they saved.
    """

    steady: float = 0.1
    warmup: float = 0.1

    def __post_init__(self) -> None:
        if not (0.0 <= self.steady <= 1.0 and 0.0 <= self.warmup <= 1.0):
            raise ConfigError(f"explore rates must be in [0, 1], got {self.steady!r}, {self.warmup!r}")

    def __call__(self, explored: int, certified: bool) -> float:
        return self.steady if certified else self.warmup


class OnlineCertifier:
    """Anytime-valid Learn-then-Test over a family: one betting test per setting, fed with each
    explored problem's losses (one per setting); ``current`` is the cheapest setting of the
    certified prefix (mean tokens on the explored problems), else the family's default."""

    def __init__(self, fam: Family, risk: float, *, delta: float = 0.1, lower: float = 0.0) -> None:
        if not 0.0 < delta < 1.0:
            raise ConfigError(f"delta must be in (0, 1), got {delta!r}")
        self.family, self.risk, self.delta = fam, risk, delta
        self.tests = [BettingTest(risk, lower=lower) for _ in fam.values]
        self.token_sums = [0.0] * len(fam.values)
        self.explored = 0
        self.current_index = fam.index(fam.default)
        self.certified = False

    def observe(self, losses: Any, tokens: Any) -> None:
        """One explored problem: its loss and tokens under each setting (family order)."""
        self.explored += 1
        for i, test in enumerate(self.tests):
            test.update(float(losses[i]))
            self.token_sums[i] += float(tokens[i])
        prefix = 0
        while prefix < len(self.tests) and self.tests[prefix].rejects(self.delta):
            prefix += 1
        if prefix:
            self.certified = True
            self.current_index = min(range(prefix), key=lambda i: (self.token_sums[i], i))

    @property
    def current(self) -> float:
        return self.family.values[self.current_index]

    @property
    def change_rate(self) -> float | None:
        """The current setting's mean loss on the explored problems (its measured change rate)."""
        return self.tests[self.current_index].mean


@dataclass(frozen=True, eq=False)
class Shadow(CoTSignal):
    """Never 1.0 (the chain runs on); records, in ``log``, where each of ``rules`` would have
    exited and with which answer. AND-ed *first* with a rule that has their probe schedule, it
    is read on every view ``read_chunk`` builds — before and after a chunk's probe — exactly as
    the rules themselves would be."""

    rules: tuple[CoTSignal, ...] = ()
    log: dict = None  # type: ignore[assignment]
    kind: ClassVar[str] = "shadow"

    def for_problem(self, question: str, dataset: str | None = None) -> "Shadow":
        from certa.algorithms.signals.text import for_problem
        if self.log.get("bound") is None:
            self.log["bound"] = tuple(for_problem(r, question, dataset) for r in self.rules)
        return self

    def __call__(self, view: ChainView) -> float:
        rules = self.log.get("bound") or self.rules
        for i, rule in enumerate(rules):
            if i not in self.log and rule(view) >= 1.0:
                self.log[i] = (view.tokens, len(view.probes), rule.answer(view))
        return 0.0


class SelfCalibrating:
    """A built-in program (``sc`` or ``cot``) that calibrates its certaindex while it runs (see the
    module docstring). ``options`` go to the program's factory (e.g. ``cap=8``, ``max_tokens=...``)."""

    def __init__(self, program: str = "sc", risk: float = 0.01, *, delta: float = 0.1,
                 explore: ExploreRate | None = None, seed: int = 0, **options: Any) -> None:
        if program not in ("sc", "cot"):
            raise ConfigError(f"--self-calibrate runs sc or cot, not {program!r}",
                              hint="calibrate sc-cot offline: certa calibrate --program sc-cot --risk R")
        from certa.algorithms.programs.library import build
        self.program, self.options, self._build = program, options, build
        self.family = family(program)
        self.certifier = OnlineCertifier(self.family, risk, delta=delta)
        self.explore = explore or ExploreRate()
        self._rng = random.Random(f"certa-selfcal:{seed}")
        self._lock = threading.Lock()
        self._graphs: dict[Any, Any] = {}
        self.base = self._graph(self.family.default)
        self.served = self.explored_tokens = self.served_tokens = 0
        self.explore_extra = 0.0

    def _graph(self, value: float) -> Any:
        if value not in self._graphs:
            opt = {"policy": self.family.sc_policy(value)} if self.program == "sc" else \
                {"signal": patience_signal(value)}
            self._graphs[value] = self._build(self.program, **{**self.options, **opt})
        return self._graphs[value]

    def __getattr__(self, name: str) -> Any:  # knob, name, graph, draw ... of the program as shipped
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def with_policy(self, policy: Any) -> Any:
        """A request's own policy: the program as shipped with it (not calibrated, not counted)."""
        return self.base.with_policy(policy)

    def new(self, **inputs: Any) -> Any:
        """A program for one request: explored, or served with the current setting."""
        with self._lock:
            cert = self.certifier
            explore = self._rng.random() < self.explore(cert.explored, cert.certified)
            value = cert.current
        if not explore:
            prog = self._graph(value).new(**inputs)
            prog.on_result = self._served
            return prog
        if self.program == "sc":
            if "explorer" not in self._graphs:
                self._graphs["explorer"] = self.base.with_policy(Even(self.base.knob.cap))
            prog = self._graphs["explorer"].new(**inputs)
            prog.on_result = lambda r: self._explored(r, self._sc_losses(r))
            return prog
        log: dict = {}
        shadow = Shadow(tuple(patience_signal(v) for v in self.family.values), log)
        graph = self._build("cot", **{**self.options, "signal": AllOf(shadow, patience_signal(PATIENCE[0]))})
        prog = graph.new(**inputs)
        prog.on_result = lambda r: self._explored(r, self._cot_losses(r, log))
        return prog

    def _served(self, result: Any) -> None:
        with self._lock:
            self.served += 1
            self.served_tokens += result.tokens.total

    def _sc_losses(self, result: Any) -> tuple[list[float], list[float]]:
        answers = list(getattr(result.state, "answers", None) or [])
        n, total = len(answers), result.tokens.total
        full = leaders(answers)
        losses, tokens = [], []
        for value in self.family.values:
            rule = self.family.sc_policy(value)
            stop = next((k for k in range(1, n) if rule.decide(SimpleNamespace(
                state=SimpleNamespace(answers=answers[:k]), knob_value=k, knob_cap=n, policy_marks={})).stop), n)
            losses.append(float(changed(majority(answers[:stop], same="math")[0], full)))
            tokens.append(total * stop / max(1, n))
        return losses, tokens

    def _cot_losses(self, result: Any, log: dict) -> tuple[list[float], list[float]]:
        probes = len(getattr(result.state, "probes", None) or [])
        per_probe = result.tokens.probe / probes if probes else 0.0
        losses, tokens = [], []
        for i in range(len(self.family.values)):
            if i in log:
                at, seen, answer = log[i]
                losses.append(float(not same_answer(answer, result.answer)))
                tokens.append(at + seen * per_probe)
            else:
                losses.append(0.0)
                tokens.append(float(result.tokens.main + result.tokens.probe))
        return losses, tokens

    def _explored(self, result: Any, got: tuple[list[float], list[float]]) -> None:
        if result.error is not None:
            return
        losses, tokens = got
        with self._lock:
            current = self.certifier.current_index
            self.explored_tokens += result.tokens.total
            self.explore_extra += max(0.0, result.tokens.total - tokens[current])
            self.certifier.observe(losses, tokens)

    def snapshot(self) -> dict[str, Any]:
        """What ``/metrics`` and the run summary show: the setting (``threshold``), whether it is
        certified, the measured change rate, requests explored and what exploring cost."""
        with self._lock:
            c = self.certifier
            total = self.explored_tokens + self.served_tokens
            return {"program": self.program, "risk": c.risk, "delta": c.delta, "threshold": c.current,
                    "setting": self.family.label(c.current), "certified": c.certified,
                    "change_rate": c.change_rate, "explored": c.explored, "served": self.served,
                    "explore_rate": self.explore(c.explored, c.certified),
                    "explore_tokens": self.explored_tokens, "explore_cost_tokens": round(self.explore_extra, 1),
                    "explore_cost_share": round(self.explore_extra / total, 6) if total else 0.0}
