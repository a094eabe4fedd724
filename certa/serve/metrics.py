"""Server metrics: counters the Server updates per request, rendered as Prometheus text.

Everything lives in one :class:`ServeMetrics` object owned by a :class:`~certa.serve.Server`
(no module-level state). :meth:`ServeMetrics.snapshot` gives a plain dict (notebooks, JSON);
:func:`render_prometheus` the text format ``/metrics`` serves.

Example:
    >>> m = ServeMetrics()
    >>> m.finished("certaindex", {"main": 120, "probe": 20, "score": 0, "prompt": 30}, tokens_saved=200,
    ...            latency_s=0.4, deadline_s=1.0)
    >>> m.rejected("busy")
    >>> s = m.snapshot(running=2, queue_depth=5, inflight_requests=8)
    >>> s["programs_finished"], s["tokens"]["probe"], s["slo"]["attainment"]
    ({'certaindex': 1}, 20, 1.0)
    >>> "certa_tokens_total{kind=\\"probe\\"} 20" in render_prometheus(s)
    True
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = ["LATENCY_BUCKETS", "ServeMetrics", "render_prometheus"]

LATENCY_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds (seconds) of the request-latency histogram."""

_KINDS = ("main", "probe", "score", "prompt")


class ServeMetrics:
    """Counters of one server: programs by exit reason, tokens by kind, savings, SLOs, latency."""

    def __init__(self) -> None:
        self.started = 0
        self.exits: Counter[str] = Counter()
        self.rejections: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter({k: 0 for k in _KINDS})
        self.tokens_saved = 0
        self.slo_total = 0
        self.slo_met = 0
        self.latency_sum = 0.0
        self.latency_count = 0
        self.latency_buckets = [0] * len(LATENCY_BUCKETS)

    def admitted(self) -> None:
        """A program started."""
        self.started += 1

    def rejected(self, reason: str) -> None:
        """A request was refused before a program started (``busy``, ``bad_request``, ...)."""
        self.rejections[reason] += 1

    def finished(self, exit_reason: str, tokens: Mapping[str, int], *, tokens_saved: int, latency_s: float,
                 deadline_s: float | None) -> None:
        """A program ended (any reason, including ``error`` and ``cancelled``)."""
        self.exits[exit_reason] += 1
        for k in _KINDS:
            self.tokens[k] += int(tokens.get(k, 0))
        self.tokens_saved += tokens_saved
        self.latency_sum += latency_s
        self.latency_count += 1
        i = bisect.bisect_left(LATENCY_BUCKETS, latency_s)
        if i < len(self.latency_buckets):
            self.latency_buckets[i] += 1
        if deadline_s is not None and exit_reason != "cancelled":
            self.slo_total += 1
            self.slo_met += latency_s <= deadline_s

    @property
    def mean_latency_s(self) -> float | None:
        return self.latency_sum / self.latency_count if self.latency_count else None

    def snapshot(self, *, running: int, queue_depth: int, inflight_requests: int) -> dict[str, Any]:
        """A JSON-serialisable view; the gauges come from the server at call time."""
        cumulative, acc = [], 0
        for n in self.latency_buckets:
            acc += n
            cumulative.append(acc)
        return {
            "programs_running": running, "programs_started": self.started,
            "programs_finished": dict(self.exits), "requests_rejected": dict(self.rejections),
            "tokens": {k: self.tokens[k] for k in _KINDS}, "tokens_saved": self.tokens_saved,
            "slo": {"requests": self.slo_total, "met": self.slo_met,
                    "attainment": self.slo_met / self.slo_total if self.slo_total else None},
            "queue_depth": queue_depth, "backend_requests_inflight": inflight_requests,
            "latency": {"count": self.latency_count, "sum": round(self.latency_sum, 6),
                        "buckets": dict(zip(LATENCY_BUCKETS, cumulative))},
        }


def _line(name: str, value: float, labels: Mapping[str, str] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {_num(value)}"
    return f"{name} {_num(value)}"


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def render_prometheus(s: Mapping[str, Any], info: Mapping[str, str] | None = None) -> str:
    """Prometheus text exposition (format 0.0.4) of a :meth:`ServeMetrics.snapshot`."""
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, rows: list[tuple[float, Mapping[str, str] | None]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(_line(name, v, labels) for v, labels in rows)

    if info:
        metric("certa_server_info", "gauge", "Served programs, scheduler and backend.", [(1, info)])
    metric("certa_programs_running", "gauge", "Programs running now.", [(s["programs_running"], None)])
    metric("certa_programs_started_total", "counter", "Programs started.", [(s["programs_started"], None)])
    metric("certa_programs_finished_total", "counter", "Programs finished, by exit reason.",
           [(n, {"exit_reason": r}) for r, n in sorted(s["programs_finished"].items())])
    metric("certa_requests_rejected_total", "counter", "Requests refused before a program started, by reason.",
           [(n, {"reason": r}) for r, n in sorted(s["requests_rejected"].items())])
    metric("certa_tokens_total", "counter", "Tokens by kind (decode: main, probe, score; prefill: prompt).",
           [(n, {"kind": k}) for k, n in s["tokens"].items()])
    metric("certa_tokens_saved_total", "counter", "Decode tokens saved by early exit (estimate vs the knob cap).",
           [(s["tokens_saved"], None)])
    slo = s["slo"]
    metric("certa_slo_requests_total", "counter", "Finished requests that gave certa.deadline_s.",
           [(slo["requests"], None)])
    metric("certa_slo_met_total", "counter", "Of those, requests that finished within their deadline.",
           [(slo["met"], None)])
    if slo["attainment"] is not None:
        metric("certa_slo_attainment", "gauge", "Fraction of deadline requests that met their deadline.",
               [(slo["attainment"], None)])
    metric("certa_queue_depth", "gauge", "Backend requests waiting for admission in the scheduler.",
           [(s["queue_depth"], None)])
    metric("certa_backend_requests_inflight", "gauge", "Backend requests in flight.",
           [(s["backend_requests_inflight"], None)])
    for name, value in sorted((s.get("backend") or {}).items()):  # the backend's own counters (docs/backends.md)
        gauge = name.endswith("_down")
        metric(f"certa_backend_{name}" + ("" if gauge else "_total"), "gauge" if gauge else "counter",
               f"Backend {'gauge' if gauge else 'counter'} {name}.", [(value, None)])
    _self_calibration(s.get("self_calibration") or {}, metric)
    lat = s["latency"]
    rows: list[tuple[float, Mapping[str, str] | None]] = [
        (n, {"le": _num(le)}) for le, n in lat["buckets"].items()]
    rows.append((lat["count"], {"le": "+Inf"}))
    out.append("# HELP certa_request_latency_seconds Program latency from admission to exit.")
    out.append("# TYPE certa_request_latency_seconds histogram")
    out.extend(_line("certa_request_latency_seconds_bucket", v, lb) for v, lb in rows)
    out.append(_line("certa_request_latency_seconds_sum", lat["sum"]))
    out.append(_line("certa_request_latency_seconds_count", lat["count"]))
    return "\n".join(out) + "\n"


_SELFCAL = (("threshold", "gauge", "The certaindex setting served now (sc: StableVote delta; cot: patience)."),
            ("risk", "gauge", "The answer-change risk being certified (--self-calibrate)."),
            ("certified", "gauge", "1 when the setting served is certified, 0 while the shipped default serves."),
            ("change_rate", "gauge", "Measured share of explored requests whose answer the setting would change."),
            ("explored", "counter", "Requests explored to full compute."),
            ("explore_cost_tokens", "counter", "Decode tokens exploring cost beyond serving them with the setting."),
            ("explore_cost_share", "gauge", "Exploration cost as a share of all decode tokens of the program."))


def _self_calibration(cal: Mapping[str, Mapping[str, Any]], metric: Any) -> None:
    """``certa_selfcal_*`` gauges and counters, one series per self-calibrating program."""
    for key, kind, text in _SELFCAL:
        rows = [(float(v[key]), {"program": name}) for name, v in sorted(cal.items()) if v.get(key) is not None]
        if rows:
            metric(f"certa_selfcal_{key}" + ("_total" if kind == "counter" else ""), kind, text, rows)
