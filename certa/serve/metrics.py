"""Server metrics on ``prometheus-client``: counters the Server updates per request, gauges read at scrape time.

Everything lives in one :class:`ServeMetrics` object owned by a :class:`~certa.serve.Server`:
its own ``CollectorRegistry`` (no module-level state, so several servers in one process keep
apart). Programs started and finished (by exit reason), rejections, tokens by kind, tokens
saved and the SLO counts are ``Counter``\\ s, the request latency a ``Histogram``; what the
server knows only when asked (programs running, queue depth, backend requests in flight, the
backend's own counters, which programs and backend it serves) comes from a ``live`` callback
at each scrape. :meth:`ServeMetrics.render` is the text ``/metrics`` serves (the library's
exposition format); :meth:`ServeMetrics.snapshot` the same numbers as a plain dict (notebooks,
JSON), read back from the registry.

Example:
    >>> m = ServeMetrics(live=lambda: {"running": 2, "queue_depth": 5, "inflight_requests": 8})
    >>> m.finished("certaindex", {"main": 120, "probe": 20, "score": 0, "prompt": 30}, tokens_saved=200,
    ...            latency_s=0.4, deadline_s=1.0)
    >>> m.rejected("busy")
    >>> s = m.snapshot()
    >>> s["programs_finished"], s["tokens"]["probe"], s["slo"]["attainment"], s["queue_depth"]
    ({'certaindex': 1}, 20, 1.0, 5)
    >>> 'certa_tokens_total{kind="probe"} 20.0' in m.render()
    True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from certa.runtime.errors import ConfigError
from certa.runtime.policy import ExitReason

__all__ = ["LATENCY_BUCKETS", "ServeMetrics"]

LATENCY_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds (seconds) of the request-latency histogram."""

_KINDS = ("main", "probe", "score", "prompt")

Live = Callable[[], Mapping[str, Any]]
"""What the server knows at scrape time: ``running``, ``queue_depth``, ``inflight_requests``,
optionally ``backend`` (the backend's own counters) and ``info`` (models, scheduler, backend)."""


def _prometheus() -> Any:
    try:
        import prometheus_client  # noqa: PLC0415
        import prometheus_client.core  # noqa: F401,PLC0415 - the metric families of the live collector
    except ImportError:
        raise ConfigError("server metrics need prometheus-client", hint="pip install 'certa[serve]'") from None
    return prometheus_client


class ServeMetrics:
    """The metrics of one server (see the module docs); ``live`` supplies the scrape-time gauges."""

    def __init__(self, live: Live | None = None) -> None:
        prom = _prometheus()
        self.registry = r = prom.CollectorRegistry(auto_describe=True)
        self._started = prom.Counter("certa_programs_started", "Programs started.", registry=r)
        self._finished = prom.Counter("certa_programs_finished", "Programs finished, by exit reason.",
                                      ["exit_reason"], registry=r)
        self._rejected = prom.Counter("certa_requests_rejected",
                                      "Requests refused before a program started, by reason.", ["reason"], registry=r)
        self._tokens = prom.Counter("certa_tokens", "Tokens by kind (decode: main, probe, score; prefill: prompt).",
                                    ["kind"], registry=r)
        for k in _KINDS:
            self._tokens.labels(k)
        self._saved = prom.Counter("certa_tokens_saved", "Decode tokens saved by early exit (estimate vs the "
                                   "knob cap).", registry=r)
        self._slo_requests = prom.Counter("certa_slo_requests", "Finished requests that gave certa.deadline_s.",
                                          registry=r)
        self._slo_met = prom.Counter("certa_slo_met", "Of those, requests that finished within their deadline.",
                                     registry=r)
        self._latency = prom.Histogram("certa_request_latency_seconds", "Program latency from admission to exit.",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.live = live
        r.register(_LiveCollector(self))

    # ---- updates (the server calls these) -------------------------------------------
    def admitted(self) -> None:
        """A program started."""
        self._started.inc()

    def rejected(self, reason: str) -> None:
        """A request was refused before a program started (``busy``, ``bad_request``, ...)."""
        self._rejected.labels(reason).inc()

    def finished(self, exit_reason: ExitReason, tokens: Mapping[str, int], *, tokens_saved: int, latency_s: float,
                 deadline_s: float | None) -> None:
        """A program ended (any reason, including ``error`` and ``cancelled``)."""
        self._finished.labels(exit_reason).inc()
        for k in _KINDS:
            self._tokens.labels(k).inc(int(tokens.get(k, 0)))
        self._saved.inc(tokens_saved)
        self._latency.observe(latency_s)
        if deadline_s is not None and exit_reason != "cancelled":
            self._slo_requests.inc()
            if latency_s <= deadline_s:
                self._slo_met.inc()

    # ---- reading --------------------------------------------------------------------
    def _value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels or None) or 0.0

    def _by(self, name: str, label: str) -> dict[str, int]:
        return {s.labels[label]: int(s.value) for m in self.registry.collect() for s in m.samples
                if s.name == name and s.value}

    @property
    def started(self) -> int:
        """Programs started so far."""
        return int(self._value("certa_programs_started_total"))

    @property
    def rejections(self) -> Counter[str]:
        """Requests refused so far, by reason."""
        return Counter(self._by("certa_requests_rejected_total", "reason"))

    @property
    def exits(self) -> Counter[str]:
        """Programs finished so far, by exit reason."""
        return Counter(self._by("certa_programs_finished_total", "exit_reason"))

    @property
    def mean_latency_s(self) -> float | None:
        n = self._value("certa_request_latency_seconds_count")
        return self._value("certa_request_latency_seconds_sum") / n if n else None

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable view, read back from the registry (the live gauges at call time)."""
        live = dict(self.live()) if self.live is not None else {}
        requests, met = int(self._value("certa_slo_requests_total")), int(self._value("certa_slo_met_total"))
        count = int(self._value("certa_request_latency_seconds_count"))
        out: dict[str, Any] = {
            "programs_running": live.get("running", 0),
            "programs_started": self.started, "programs_finished": dict(self.exits),
            "requests_rejected": dict(self.rejections),
            "tokens": {k: int(self._value("certa_tokens_total", kind=k)) for k in _KINDS},
            "tokens_saved": int(self._value("certa_tokens_saved_total")),
            "slo": {"requests": requests, "met": met, "attainment": met / requests if requests else None},
            "queue_depth": live.get("queue_depth", 0), "backend_requests_inflight": live.get("inflight_requests", 0),
            "latency": {"count": count, "sum": round(self._value("certa_request_latency_seconds_sum"), 6),
                        "buckets": {le: int(self._value("certa_request_latency_seconds_bucket", le=str(le)))
                                    for le in LATENCY_BUCKETS}},
        }
        if live.get("backend"):
            out["backend"] = dict(live["backend"])
        if live.get("self_calibration"):
            out["self_calibration"] = {name: dict(v) for name, v in live["self_calibration"].items()}
        return out

    def render(self) -> str:
        """The Prometheus text exposition ``/metrics`` serves."""
        return _prometheus().generate_latest(self.registry).decode("utf-8")


class _LiveCollector:
    """The scrape-time gauges: what ``ServeMetrics.live`` reports, as metric families."""

    def __init__(self, metrics: ServeMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []  # nothing fixed to describe: the families depend on what the server reports

    def collect(self) -> Iterator[Any]:
        if self.metrics.live is None:
            return
        core = _prometheus().core
        live = self.metrics.live()
        if live.get("info"):
            info = core.GaugeMetricFamily("certa_server_info", "Served programs, scheduler and backend.",
                                          labels=list(live["info"]))
            info.add_metric([str(v) for v in live["info"].values()], 1)
            yield info
        for name, key, text in (("certa_programs_running", "running", "Programs running now."),
                                ("certa_queue_depth", "queue_depth",
                                 "Backend requests waiting for admission in the scheduler."),
                                ("certa_backend_requests_inflight", "inflight_requests", "Backend requests in flight.")):
            yield core.GaugeMetricFamily(name, text, value=live.get(key, 0))
        requests = self.metrics.registry.get_sample_value("certa_slo_requests_total") or 0.0
        if requests:
            met = self.metrics.registry.get_sample_value("certa_slo_met_total") or 0.0
            yield core.GaugeMetricFamily("certa_slo_attainment", "Fraction of deadline requests that met their "
                                         "deadline.", value=met / requests)
        for name, value in sorted((live.get("backend") or {}).items()):  # the backend's own (docs/backends.md)
            if name.endswith("_down"):
                yield core.GaugeMetricFamily(f"certa_backend_{name}", f"Backend gauge {name}.", value=value)
            else:
                yield core.CounterMetricFamily(f"certa_backend_{name}", f"Backend counter {name}.", value=value)
        yield from _self_calibration(core, live.get("self_calibration") or {})


_SELFCAL = (("threshold", "gauge", "The certaindex setting served now (sc: StableVote delta; cot: patience)."),
            ("risk", "gauge", "The answer-change risk being certified (--self-calibrate)."),
            ("certified", "gauge", "1 when the setting served is certified, 0 while the shipped default serves."),
            ("change_rate", "gauge", "Measured share of explored requests whose answer the setting would change."),
            ("explored", "counter", "Requests explored to full compute."),
            ("explore_cost_tokens", "counter", "Decode tokens exploring cost beyond serving them with the setting."),
            ("explore_cost_share", "gauge", "Exploration cost as a share of all decode tokens of the program."))


def _self_calibration(core: Any, cal: Mapping[str, Mapping[str, Any]]) -> Iterator[Any]:
    """``certa_selfcal_*`` gauges and counters, one series per self-calibrating program."""
    for key, kind, text in _SELFCAL:
        rows = [(name, float(v[key])) for name, v in sorted(cal.items()) if v.get(key) is not None]
        if not rows:
            continue
        family = (core.CounterMetricFamily if kind == "counter" else core.GaugeMetricFamily)(
            f"certa_selfcal_{key}", text, labels=["program"])
        for name, value in rows:
            family.add_metric([name], value)
        yield family
