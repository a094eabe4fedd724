"""Every examples/*.ipynb executes top to bottom without an error (nbclient, one fresh kernel each).

Needs the ``notebooks`` extra (jupyterlab, nbclient, nbformat, ipykernel, matplotlib); skipped with a
reason otherwise. Notebooks are committed executed, with small outputs, so a code host shows them
(issue 40): ``python examples/execute_notebooks.py`` re-executes and stores them.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time

import pytest

import certa as ct
from certa.algorithms.programs.library import build

from .conftest import load_example

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
TIMEOUT_S = 180


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "admission-limits"])
def test_await_and_run_sync_mix_on_one_runtime_inside_a_running_loop(limited):
    """What a notebook does: top-level ``await runtime.run`` and ``runtime.run_sync`` on the same runtime."""
    async def cell():
        sched = ct.Scheduler(limits=ct.AdmissionLimits(max_requests=2)) if limited else None
        rt = ct.Runtime(ct.ScriptedBackend(responses=["\\boxed{4}"], latency=0.001), scheduler=sched)
        first = await rt.run(build("sc", cap=8), question="q")
        synced = rt.run_sync(build("sc", cap=8), question="q")  # a loop is running here, as in Jupyter
        again = await rt.run(build("sc", cap=8), question="q")
        return first, synced, again, rt

    results = asyncio.run(cell())
    assert [r.exit_reason for r in results[:3]] == ["certaindex"] * 3 and all(r.answer == "4" for r in results[:3])
    assert results[3].backend.live_rids() == set() and not results[3].active_programs
    assert "nest_asyncio" not in sys.modules, "no nest_asyncio patching of the user's loop"


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_executed_with_small_outputs(path):
    """Every code cell ran, in order, in one kernel session, without an error; the file stays small."""
    script = load_example("execute_notebooks")
    MAX_BYTES, MAX_TEXT = script.MAX_BYTES, script.MAX_TEXT  # noqa: N806
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    rerun = "rerun `python examples/execute_notebooks.py`"
    assert [c.get("execution_count") for c in code] == list(range(1, len(code) + 1)), \
        f"{path.name}: stored without outputs, or not run top to bottom in one session: {rerun}"
    assert sum(bool(c.get("outputs")) for c in code) >= len(code) // 2, f"{path.name}: few outputs stored: {rerun}"
    errors = [o for c in code for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"{path.name} was stored with an error output: {errors[0].get('ename')}"
    texts = ["".join(o.get("text", "")) for c in code for o in c.get("outputs", []) if o["output_type"] == "stream"]
    assert all(len(t) <= MAX_TEXT + 40 for t in texts), f"{path.name}: a long text output: {rerun}"
    assert path.stat().st_size <= MAX_BYTES, f"{path.name}: {path.stat().st_size:,} bytes"
    assert "language_info" not in nb["metadata"] and not any("execution" in c["metadata"] for c in code)


def test_the_notebooks_extra_installs_a_front_end():
    import tomllib
    extra = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith(("jupyterlab", "notebook")) for dep in extra["notebooks"])


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path):
    nbclient = pytest.importorskip("nbclient", reason="pip install 'certa[notebooks]' (nbclient) to run notebooks")
    nbformat = pytest.importorskip("nbformat", reason="pip install 'certa[notebooks]' (nbformat) to run notebooks")
    pytest.importorskip("ipykernel", reason="pip install 'certa[notebooks]' (ipykernel) to run notebooks")
    pytest.importorskip("matplotlib", reason="the notebooks draw and plot: pip install 'certa[notebooks]' (matplotlib)")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    t0 = time.monotonic()
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any error
    elapsed = time.monotonic() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    assert elapsed < TIMEOUT_S, f"{path.name} took {elapsed:.0f}s"
