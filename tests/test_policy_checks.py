"""When policies check, how they print, and that a bad one fails before any token (issue 40,
items 9, 12 and 14): a join's certaindex is acted on at once; ``Watch`` checks after every
branch; policies draw as their parameters; every argument and the answers protocol are
checked before the program starts, so nothing is sent for a policy that cannot decide."""

from __future__ import annotations

import pytest

import certa as ct
from certa.algorithms.policies import policy_from_dict
from certa.runtime.errors import ConfigError
from certa.runtime.policy import CONTINUE, Policy


class Rounds(ct.State):
    answers: ct.Appended[list[str]] = []
    verdict: float = 0.0


def rounds(policy: Policy) -> ct.CompiledGraph:
    """Rounds of 4 samples (the knob's units) closed by a join, ``vote``, which alone sets the
    certaindex; the vote starts the next round, up to the cap of 16 samples."""
    g = ct.Graph(Rounds, knob=ct.Knob("branches", cap=16), name="rounds")

    @g.step(fanout=4, knob=True)
    async def sample(s, ctx):
        return {"answers": [(await ctx.gen(f"sample {ctx.branch}")).text]}

    @g.step
    def vote(s):
        return {"verdict": 1.0 if len(set(s.answers)) == 1 else 0.0}

    g.join("vote", after="sample").edge("vote", "sample")
    g.certaindex(lambda s: s.verdict, name="settled")
    g.answer(lambda s: s.answers[0] if s.answers else None)
    return g.compile(policy=policy)


@pytest.mark.parametrize("policy", [ct.Threshold(0.9, detect_at=4, every=4), ct.Threshold(0.9, detect_at=4)])
def test_a_certaindex_computed_at_a_join_is_acted_on_at_once(policy):
    """issue 40 item 9: the join's certaindex comes after the round's 4th unit at the same knob
    value; it used to wait for the next crossing (knob 8, a whole round of samples wasted, or
    never with no ``every``)."""
    b = ct.ScriptedBackend(responses=["42"])
    r = ct.Runtime(b).run_sync(rounds(policy))
    assert (r.exit_reason, r.knob_used, b.served) == ("certaindex", 4, 4)
    assert [p.knob for p in r.certaindex] == [1, 2, 3, 4, 4] and r.certaindex[-1].value == 1.0


def test_threshold_still_checks_only_at_its_detection_steps():
    b = ct.ScriptedBackend(responses=["42"])
    r = ct.Runtime(b).run_sync(rounds(ct.Threshold(0.9, detect_at=8)))   # the vote at knob 4 passes: not checked
    assert (r.exit_reason, r.knob_used) == ("certaindex", 8)


class Seq(ct.State):
    answers: ct.Appended[list[str]] = []


def one_at_a_time(policy: Policy) -> ct.CompiledGraph:
    g = ct.Graph(Seq, knob=ct.Knob("branches", cap=10), name="seq")

    @g.step
    async def sample(s, ctx):
        return {"answers": [(await ctx.gen(f"sample {ctx.branch}")).text]}

    g.loop("sample")
    g.certaindex(lambda s: 1.0 if len(s.answers) >= 3 else 0.0, name="three")
    g.answer(lambda s: len(s.answers))
    return g.compile(policy=policy)


def test_watch_checks_after_every_branch_where_threshold_waits_for_its_next_check():
    rt = ct.Runtime(ct.ScriptedBackend(responses=["7"]))
    assert rt.run_sync(one_at_a_time(ct.Threshold(0.5, detect_at=2, every=2))).knob_used == 4
    watched = rt.run_sync(one_at_a_time(ct.Watch(0.5, detect_at=2)))
    assert (watched.exit_reason, watched.knob_used) == ("certaindex", 3)
    assert rt.run_sync(one_at_a_time(ct.Watch(0.5, detect_at=5))).knob_used == 5   # not before detect_at
    w = ct.Watch({"three": 0.5}, detect_at=2, min_samples=2)
    assert policy_from_dict(w.to_dict()).to_dict() == w.to_dict() == {
        "kind": "watch", "tau": {"three": 0.5}, "detect_at": 2, "min_samples": 2}
    with pytest.raises(ConfigError):
        ct.Watch(1.5)


class AnyBranch(Policy):
    """A user's policy with neither ``__repr__`` nor ``to_dict``."""

    def __init__(self, tau: float, label: str = "x") -> None:
        self.tau, self.label, self._seen = tau, label, 0

    def decide(self, program):
        return CONTINUE


def test_policies_draw_as_their_parameters():
    """issue 40 item 12: ``draw()`` showed ``<beam.AnyBranch object at 0x...>``."""
    text = str(one_at_a_time(AnyBranch(0.7, label='say "hi"')).draw())
    assert "AnyBranch(tau=0.7, label='say #quot;hi#quot;')" in text and " object at 0x" not in text
    assert repr(policy_from_dict({"kind": "stable_vote"})) == "StableVote(delta=0.04)"
    assert repr(ct.Watch(0.8, detect_at=2)) == "Watch(tau=0.8, detect_at=2, min_samples=1)"


@pytest.mark.parametrize("bad", [{"kind": "stable_vote", "same": "bogus"}, {"kind": "esc", "same": "nope"},
                                 {"kind": "vote", "same": 3}, {"kind": "stable_vote", "min_samples": 2.5},
                                 {"kind": "esc", "window": "4"}, {"kind": "margin", "margin": 0},
                                 {"kind": "pareto", "curve": [[0.5, 4]], "every": 0},
                                 {"kind": "stable_vote", "horizon": 0}, {"kind": "vote", "tau": "0.9"}])
def test_every_argument_of_every_policy_is_checked_when_it_is_made(bad):
    with pytest.raises(ConfigError):
        policy_from_dict(bad)


async def test_a_bad_same_over_http_is_refused_before_the_program_spends_a_token():
    """issue 40 item 14: ``same`` was found bad at the first decide, after the samples."""
    pytest.importorskip("httpx")
    from certa.serve import Server

    from .test_serve_bounds import app_client   # the in-process ASGI client the server tests use

    b = ct.ScriptedBackend(responses=["so \\boxed{18}."])
    async with Server("sc", b, max_knob=8) as server:
        async with app_client(server) as c:
            r = await c.post("/v1/chat/completions", json={
                "model": "sc", "messages": [{"role": "user", "content": "9 * 2?"}],
                "certa": {"policy": {"kind": "stable_vote", "same": "bogus"}}})
    assert r.status_code == 400 and "unknown answer equality 'bogus'" in r.json()["error"]["message"]
    assert b.served == 0


class NoAnswers(ct.State):
    question: str
    text: str = ""


def test_a_policy_that_needs_the_answers_protocol_fails_before_the_first_step():
    g = ct.Graph(NoAnswers, knob=ct.Knob("iterations", cap=4), name="plain")

    @g.step
    async def think(s, ctx):
        return {"text": (await ctx.gen(s.question)).text}

    g.loop("think")
    g.answer(lambda s: s.text)
    for policy in ({"kind": "esc"}, {"kind": "stable_vote"}, {"kind": "vote"}):
        b = ct.ScriptedBackend(responses=["x"])
        with pytest.raises(ConfigError, match="state.answers") as err:
            ct.Runtime(b).run_sync(g.compile(policy=policy_from_dict(policy)), question="q")
        assert b.served == 0 and err.value.program.startswith("plain")
