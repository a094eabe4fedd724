"""Mermaid snapshots for two graphs. Regenerate with CERTA_UPDATE_SNAPSHOTS=1."""

from __future__ import annotations

import os
import pathlib
from typing import Literal

import pytest

import certa as ct

from .conftest import make_sc

SNAP = pathlib.Path(__file__).parent / "snapshots"


class Verify(ct.State):
    question: str
    draft: str = ""
    verdicts: ct.Appended[list[bool]] = []


def verifier_loop() -> ct.CompiledGraph:
    g = ct.Graph(Verify, knob=ct.Knob("iterations", cap=4, step="draft_answer"), name="verifier")

    @g.step
    async def draft_answer(s, ctx):
        return {"draft": (await ctx.gen(s.question)).text}

    @g.step
    async def check(s, ctx):
        sc = await ctx.score(f"{s.question}\n{s.draft}\nIs this correct?")
        return {"verdicts": [sc.probs["Yes"] > 0.5]}

    def route(s: Verify) -> Literal["draft_answer", "__end__"]:
        return ct.END if s.verdicts and s.verdicts[-1] else "draft_answer"

    @g.certaindex
    def verified(s) -> float:
        return 1.0 if s.verdicts and s.verdicts[-1] else 0.0

    g.edge("draft_answer", "check")
    g.branch("check", route)
    return g.compile(policy=ct.Threshold(1.0, detect_at=1, every=1))


def check(name: str, text: str, snapshots: pathlib.Path = SNAP) -> None:
    """Compare with the stored snapshot; a missing one fails (it is written only on request)."""
    path = snapshots / f"{name}.mmd"
    if os.environ.get("CERTA_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"no Mermaid snapshot {path.name}; write it with CERTA_UPDATE_SNAPSHOTS=1 and review it")
    assert text == path.read_text(), f"Mermaid for {name} changed; review and regenerate with CERTA_UPDATE_SNAPSHOTS=1"


def test_a_missing_snapshot_fails_and_is_not_written(tmp_path, monkeypatch):
    monkeypatch.delenv("CERTA_UPDATE_SNAPSHOTS", raising=False)
    with pytest.raises(pytest.fail.Exception, match="no Mermaid snapshot"):
        check("nope", "flowchart TD\n", snapshots=tmp_path)
    assert not (tmp_path / "nope.mmd").exists()


def test_mermaid_self_consistency_snapshot():
    m = make_sc(policy=ct.Threshold(0.5, detect_at=4)).draw()
    assert isinstance(m, ct.Mermaid) and m._repr_markdown_().startswith("```mermaid")
    check("self_consistency", m)


def test_mermaid_verifier_loop_snapshot():
    check("verifier_loop", verifier_loop().draw())


def test_verifier_loop_runs():
    b2 = ct.ScriptedBackend(responses=["draft"], scores=lambda r: {"Yes": 0.2, "No": 0.8})
    r = ct.Runtime(b2).run_sync(verifier_loop(), question="q")
    assert r.ok, r.error
    assert r.exit_reason == "cap" and r.knob_used == 4 and r.state.verdicts == [False] * 4
