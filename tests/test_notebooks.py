"""Every examples/*.ipynb executes top to bottom without an error (nbclient, one fresh kernel each).

Needs the ``notebooks`` extra (nbclient, nbformat, ipykernel); skipped with a reason otherwise.
Notebooks are committed without outputs.
"""

from __future__ import annotations

import json
import pathlib
import time

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
TIMEOUT_S = 180


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, \
                f"{path.name}: clear the outputs before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path):
    nbclient = pytest.importorskip("nbclient", reason="pip install 'certa[notebooks]' (nbclient) to run notebooks")
    nbformat = pytest.importorskip("nbformat", reason="pip install 'certa[notebooks]' (nbformat) to run notebooks")
    pytest.importorskip("ipykernel", reason="pip install 'certa[notebooks]' (ipykernel) to run notebooks")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    t0 = time.monotonic()
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any error
    elapsed = time.monotonic() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    assert elapsed < TIMEOUT_S, f"{path.name} took {elapsed:.0f}s"
