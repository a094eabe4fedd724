"""The cost model's ``e·N·W`` term (attention over every KV cell a unified-cache engine holds)
and the simulator's idle slot cache that feeds it."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from certa.cli.sim import app
from certa.runtime.errors import ConfigError
from certa.runtime.sim.cost_model import CostModel, IterationRecord, RecordWriter
from certa.runtime.sim.engine import EngineConfig, SimEngine, SimRequest
from certa.runtime.sim.fit import fit_cost_model
from certa.runtime.sim.slot_cache import SlotCache

CPU = CostModel(a=0.03, b=0.006, c=2e-6, d=0.0, e=4e-7)  # e: 0.4 ms per token per 1,000 cells


def _cpu_records(seed: int = 3) -> list[IterationRecord]:
    """Decode iterations whose held cells vary apart from their own contexts (idle caches)."""
    rng, recs = random.Random(seed), []
    for _ in range(300):
        n = rng.randint(1, 16)
        k = n * rng.randint(60, 800)
        w = k + rng.choice([0, 0, 1500, 4000, 9000])
        recs.append(IterationRecord(n, k, 0.0, 0.0, n, 0, wall_seconds=CPU.iteration_time(n, k, 0.0, w)
                                    * (1 + rng.gauss(0, 0.01)), kv_cells=w))
    return recs


def test_idle_cells_cost_every_token_of_the_batch():
    assert CPU.iteration_time(16, 1600, 0.0, 1600 + 7000) - CPU.iteration_time(16, 1600, 0.0, 1600) == \
        pytest.approx(16 * 7000 * 4e-7)
    assert CostModel(a=0.0, b=0.0, c=0.0, d=0.0).iteration_time(8, 10, 0.0, 10**6) == 0.0  # e = 0: no charge
    with pytest.raises(ConfigError):
        CostModel(a=0.0, b=0.0, c=0.0, d=0.0, e=-1e-9)


def test_fit_with_cells_recovers_e_and_the_fit_without_them_cannot():
    recs = _cpu_records()
    fit = fit_cost_model(recs, target="wall_seconds", cells=True)
    assert fit.model.e == pytest.approx(CPU.e, rel=0.05) and fit.mape < 0.02
    assert fit_cost_model(recs, target="wall_seconds").mape > 3 * fit.mape
    old = [IterationRecord(r.n_tokens, r.kv_read, 0.0, r.seconds, wall_seconds=r.wall_seconds) for r in recs]
    with pytest.raises(ConfigError, match="kv_cells"):  # logged by an engine that did not count cells
        fit_cost_model(old, target="wall_seconds", cells=True)


def test_cli_fits_cells(tmp_path):
    with RecordWriter(tmp_path / "it.jsonl") as log:
        for r in _cpu_records():
            log.write(r)
    res = CliRunner().invoke(app, ["fit", str(tmp_path / "it.jsonl"), "--wall", "--cells"])
    assert res.exit_code == 0 and "µs/token/cell" in res.output
    assert float(res.output.split(" e=")[1].split()[0]) == pytest.approx(0.4, rel=0.02)


def test_slot_cache_keeps_finished_kv_within_its_limit_and_free_slots():
    c = SlotCache(limit=1000, slots=3)
    c.put("a", 400)
    c.put("b", 400)
    c.take("b", running=1)  # b's next request takes b's own slot, not the older a
    assert c.entries[0][0] == "a" and c.tokens == 400
    c.put("b", 500)
    c.put("c", 300)  # 1,200 > 1,000: the least recently used (a) goes
    assert [p for p, _ in c.entries] == ["b", "c"] and c.tokens == 800
    c.take("z", running=2)  # another program: the LRU cache goes; 1 cache + 2 running fit 3 slots
    assert [p for p, _ in c.entries] == ["c"]
    c.take("y", running=3)
    assert c.tokens == 0 and not c.entries


def _finish_time(cfg: EngineConfig, record: bool) -> tuple[float, SimEngine]:
    """r1 (3,000-token prompt, 10 tokens) and r2 (100, 300) start together; r2's finish time."""
    eng = SimEngine(cfg, CPU, record=record)
    eng.add(SimRequest("r1", "p1", prompt=3000, output=10))
    eng.add(SimRequest("r2", "p2", prompt=100, output=300))
    now, finished = 0.0, []
    while len(finished) < 2:
        now, done = eng.step(now)
        finished += done
    assert [r.rid for r in finished] == ["r1", "r2"]
    return now, eng


def test_idle_cache_slows_the_decodes_that_run_beside_it_in_the_simulator():
    plain, _ = _finish_time(EngineConfig(kv_capacity=16384, max_running=4), record=False)
    cached, eng = _finish_time(EngineConfig(kv_capacity=16384, max_running=4, cache_tokens=4096), record=True)
    # r1's 3,010 cells stay idle in its slot through r2's last 290 decodes, each charged e·1·3,010
    assert cached - plain == pytest.approx(290 * CPU.e * 3010, rel=1e-6)
    closed_form, _ = _finish_time(EngineConfig(kv_capacity=16384, max_running=4, cache_tokens=4096), record=False)
    assert closed_form == pytest.approx(cached, rel=1e-9)  # closed-form decode runs match iteration by iteration
    assert eng.stats.records[-1].kv_cells == 3010 + 100 + 299
    small, _ = _finish_time(EngineConfig(kv_capacity=16384, max_running=4, cache_tokens=1000), record=False)
    assert small == pytest.approx(plain)  # over the cache limit: nothing stays
