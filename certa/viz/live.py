"""A live table of running programs: certaindex, knob, tokens, requests in flight.

In Jupyter, :class:`LiveTable` shows an HTML table in the cell that created it and updates
it in place (an IPython ``display(..., display_id=True)`` handle; no ipywidgets) from the
runtime's event stream, at most ``max_hz`` times a second, with a trailing update so the
last state always shows. Outside Jupyter it prints the rows that changed, as text lines.

Example (in a notebook cell)::

    live = LiveTable(runtime)                     # the table appears here and updates live
    results = await runtime.run_many([(program, {"question": q}) for q in questions])
    live.close()                                  # final update; stop listening

Without Jupyter (prints to ``out``):

    >>> import io, certa as ct
    >>> from certa.algorithms.programs.library import build
    >>> rt = ct.Runtime(ct.ScriptedBackend(responses=["\\\\boxed{4}"]))
    >>> with LiveTable(rt, mode="text", out=io.StringIO()) as live:
    ...     r = rt.run_sync(build("sc", cap=8), question="2+2?")
    >>> row = live.rows[0]
    >>> row.status, row.knob_used, row.certaindex
    ('certaindex', 3, 1.0)
"""

from __future__ import annotations

import asyncio
import html
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from certa.runtime.events import Event
from certa.runtime.runtime import Runtime

__all__ = ["LiveTable", "Row", "render_html", "render_text", "summary"]


@dataclass
class Row:
    """What the table shows for one program (a plain record; rendering reads only these)."""

    program_id: str
    name: str
    status: str = "running"  # "running" or the exit reason
    knob_used: int = 0
    knob_cap: int | None = None
    knob_unit: str = ""
    certaindex: float | None = None
    tau: float | None = None
    tokens: int = 0
    tokens_saved: int = 0
    inflight: int = 0
    steps: int = 0  # steps (branches) running now
    started: float = 0.0
    updated: float = 0.0
    error: str | None = None

    @property
    def depth(self) -> int:
        """Nesting depth (a sub-program started with ``ctx.call`` is one deeper than its caller)."""
        return self.program_id.count("/")


def _tau(program: Any) -> float | None:
    tau = getattr(getattr(program, "policy", None), "tau", None)
    return float(tau) if isinstance(tau, (int, float)) else None


def summary(rows: list[Row]) -> str:
    """One line: running/finished counts, exit reasons, tokens and tokens saved."""
    running = sum(r.status == "running" for r in rows)
    reasons: dict[str, int] = {}
    for r in rows:
        if r.status != "running":
            reasons[r.status] = reasons.get(r.status, 0) + 1
    done = sum(reasons.values())
    why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
    tokens = sum(r.tokens for r in rows if r.depth == 0)
    saved = sum(r.tokens_saved for r in rows if r.depth == 0)
    return (f"{running} running · {done} finished" + (f" ({why})" if why else "")
            + f" · {tokens:,} tokens · saved ≈ {saved:,}")


def _visible(rows: list[Row], max_rows: int) -> list[Row]:
    running = [r for r in rows if r.status == "running"]
    done = sorted((r for r in rows if r.status != "running"), key=lambda r: r.updated, reverse=True)
    keep = {id(r) for r in (running + done)[:max_rows]}
    return [r for r in rows if id(r) in keep]


def _knob(r: Row) -> str:
    cap = f"/{r.knob_cap}" if r.knob_cap is not None else ""
    return f"{r.knob_used}{cap} {r.knob_unit}".strip()


_COLORS = {"running": "#2563eb", "certaindex": "#16a34a", "error": "#dc2626", "cancelled": "#9ca3af"}


def _bar(value: float | None, tau: float | None) -> str:
    if value is None:
        return "<span style='color:#9ca3af'>–</span>"
    color = "#16a34a" if tau is not None and value >= tau else "#2563eb"
    mark = (f"<div style='position:absolute;left:{tau * 100:.0f}%;top:-2px;bottom:-2px;width:2px;"
            f"background:#111827' title='threshold {tau:g}'></div>") if tau is not None else ""
    return ("<div style='display:flex;align-items:center;gap:6px'>"
            "<div style='position:relative;width:90px;height:10px;background:#e5e7eb;border-radius:3px'>"
            f"<div style='width:{max(0.0, min(1.0, value)) * 100:.0f}%;height:100%;background:{color};"
            f"border-radius:3px'></div>{mark}</div><code>{value:.2f}</code></div>")


def render_html(rows: list[Row], *, max_rows: int = 20, title: str = "certa: programs") -> str:
    """The HTML table (escaped; inline styles only, so it renders anywhere)."""
    head = ("program", "status", "knob", "certaindex", "tokens", "saved ≈", "in flight")
    out = [f"<div><b>{html.escape(title)}</b> <span style='color:#4b5563'>{html.escape(summary(rows))}</span>",
           "<table style='border-collapse:collapse;font-size:12px'>",
           "<tr>" + "".join(f"<th style='text-align:left;padding:2px 8px'>{h}</th>" for h in head) + "</tr>"]
    shown = _visible(rows, max_rows)
    for r in shown:
        color = _COLORS.get(r.status, "#4b5563")
        status = html.escape(r.status if r.status == "running" else f"exit: {r.status}")
        title_attr = f" title='{html.escape(r.error, quote=True)}'" if r.error else ""
        cells = [f"<span style='padding-left:{12 * r.depth}px'>{'↳ ' if r.depth else ''}"
                 f"{html.escape(r.program_id.rsplit('/', 1)[-1])}</span>",
                 f"<span style='color:{color}'{title_attr}>{status}</span>", html.escape(_knob(r)),
                 _bar(r.certaindex, r.tau), f"{r.tokens:,}", f"{r.tokens_saved:,}" if r.tokens_saved else "",
                 str(r.inflight) if r.status == "running" else ""]
        out.append("<tr>" + "".join(f"<td style='padding:2px 8px'>{c}</td>" for c in cells) + "</tr>")
    if len(shown) < len(rows):
        out.append(f"<tr><td colspan='7' style='color:#6b7280;padding:2px 8px'>… {len(rows) - len(shown)} more "
                   "finished programs</td></tr>")
    out.append("</table></div>")
    return "\n".join(out)


def render_text(rows: list[Row]) -> str:
    """Plain-text lines, one per row: id, status, knob, certaindex (vs threshold), tokens."""
    lines = []
    for r in rows:
        cd = "-" if r.certaindex is None else f"{r.certaindex:.2f}" + (f" (≥{r.tau:g})" if r.tau is not None else "")
        status = r.status if r.status == "running" else f"exit:{r.status}"
        lines.append(f"  {r.program_id:<24} {status:<16} knob {_knob(r):<16} certaindex {cd:<14} tokens {r.tokens}")
    return "\n".join(lines)


def _in_kernel() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class LiveTable:
    """Show ``runtime``'s programs live while they run (see the module docstring).

    Args:
        runtime: the :class:`~certa.runtime.runtime.Runtime` to watch.
        max_hz: most redraws per second (default 4 in Jupyter, 1 as text).
        max_rows: rows shown (running programs first, then the latest finished).
        mode: ``"auto"`` (HTML in a Jupyter kernel, else text), ``"html"`` or ``"text"``.
        out: the text stream (default ``sys.stdout``).
        clock: seconds, monotonic (injectable for tests).

    Subscribes on creation; :meth:`close` (or leaving a ``with`` block) draws the final
    state and unsubscribes. ``rows`` holds every program seen, in start order.
    """

    def __init__(self, runtime: Runtime, *, max_hz: float | None = None, max_rows: int = 20,
                 mode: Literal["auto", "html", "text"] = "auto", out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.mode = ("html" if _in_kernel() else "text") if mode == "auto" else mode
        self.interval = 1.0 / (max_hz or (4.0 if self.mode == "html" else 1.0))
        self.max_rows = max_rows
        self.out = out
        self.clock = clock
        self.rows: list[Row] = []
        self.renders = 0
        self._by_id: dict[str, Row] = {}
        self._changed: set[str] = set()
        self._last = float("-inf")
        self._pending = False
        self._lock = threading.RLock()
        self._handle: Any = None
        self._cell: int | None = None
        if self.mode == "html":
            from IPython import get_ipython  # noqa: PLC0415
            from IPython.display import HTML, display  # noqa: PLC0415
            self._handle = display(HTML(render_html(self.rows, max_rows=max_rows)), display_id=True)
            self._cell = getattr(get_ipython(), "execution_count", None)
        self._unsubscribe: Callable[[], None] | None = runtime.events.subscribe(self._on_event)

    # ---- events -----------------------------------------------------------------------
    def _on_event(self, ev: Event) -> None:
        with self._lock:
            row = self._apply(ev)
            if row is None:
                return
            self._changed.add(row.program_id)
            if ev.kind == "exit":
                self._sync_live()
            last_exit = ev.kind == "exit" and not any(r.status == "running" for r in self.rows)
            if last_exit or self.clock() - self._last >= self.interval:
                self.refresh()
            elif not self._pending:
                self._schedule_trailing()

    def _apply(self, ev: Event) -> Row | None:
        now, d = self.clock(), ev.data
        row = self._by_id.get(ev.program_id)
        if ev.kind == "program_start":
            prog = self.runtime.active_programs.get(ev.program_id)
            knob = getattr(prog, "knob", None)
            row = Row(ev.program_id, d.get("name", ""), knob_cap=d.get("knob_cap"), started=now,
                      knob_unit=getattr(knob, "unit", ""), tau=_tau(prog))
            self._by_id[ev.program_id] = row
            self.rows.append(row)
        elif row is None:
            return None
        elif ev.kind == "certaindex":
            row.certaindex, row.knob_used = d.get("value"), d.get("knob", row.knob_used)
        elif ev.kind == "request_sent":
            row.inflight += 1
        elif ev.kind == "request_done":
            row.inflight = max(0, row.inflight - 1)
            row.tokens += int(d.get("tokens", 0))
        elif ev.kind == "step_start":
            row.steps += 1
        elif ev.kind == "step_end":
            row.steps = max(0, row.steps - 1)
        elif ev.kind == "exit":
            row.status, row.inflight, row.steps = d.get("reason", "done"), 0, 0
            row.tokens, row.tokens_saved, row.error = d.get("tokens", row.tokens), d.get("tokens_saved", 0), d.get("error")
        row.updated = now
        return row

    def _schedule_trailing(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pending = True
        delay = max(0.0, self.interval - (self.clock() - self._last))
        loop.call_later(delay, self._trailing)

    def _trailing(self) -> None:
        with self._lock:
            if self._pending and self._unsubscribe is not None:
                self.refresh()

    # ---- drawing ----------------------------------------------------------------------
    def _sync_live(self) -> None:
        """Read knob and tokens of running programs straight from the runtime (cheap, exact).

        A running row whose program has left the runtime without an exit event was cancelled
        (e.g. a sub-program whose caller stopped early).
        """
        active = self.runtime.active_programs
        for r in self.rows:
            if r.status != "running":
                continue
            prog = active.get(r.program_id)
            if prog is None:
                r.status, r.inflight, r.steps, r.updated = "cancelled", 0, 0, self.clock()
                self._changed.add(r.program_id)
            else:
                r.knob_used, r.tokens = prog.knob_value, prog.tokens.total

    def refresh(self) -> None:
        """Redraw now (ignores the rate limit)."""
        with self._lock:
            self._pending = False
            self._last = self.clock()
            self._sync_live()
            self.renders += 1
            if self.mode == "html":
                from IPython.display import HTML  # noqa: PLC0415
                self._handle.update(HTML(render_html(self.rows, max_rows=self.max_rows)))
                return
            changed = [r for r in self.rows if r.program_id in self._changed]
            self._changed.clear()
            if changed:
                out = self.out or sys.stdout
                out.write(f"[certa live] {summary(self.rows)}\n{render_text(changed)}\n")
                out.flush()

    def close(self) -> None:
        """Draw the final state and stop listening (idempotent)."""
        with self._lock:
            if self._unsubscribe is None:
                return
            self._unsubscribe()
            self._unsubscribe = None
            self.refresh()

    def __enter__(self) -> "LiveTable":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _ipython_display_(self) -> None:
        """Showing the object in a later cell adds a copy that updates with the first one."""
        from IPython import get_ipython  # noqa: PLC0415
        from IPython.display import HTML, display  # noqa: PLC0415
        with self._lock:
            self._sync_live()
            body = HTML(render_html(self.rows, max_rows=self.max_rows))
        if self._handle is None:
            display(body)
        elif getattr(get_ipython(), "execution_count", None) != self._cell:  # not the cell that shows it already
            display(body, display_id=self._handle.display_id)

    def __repr__(self) -> str:
        return f"LiveTable({summary(self.rows)})"
