"""Re-execute the example notebooks and store them with their outputs (so a code host shows them).

    python examples/execute_notebooks.py                 # every examples/*.ipynb
    python examples/execute_notebooks.py 01_quickstart   # one (name or path)

Needs ``pip install 'certa[notebooks]'``. Each notebook runs top to bottom in a fresh kernel
in this folder (as ``jupyter lab`` would run it), on the scripted fake backend or the
simulator, as the notebooks are written. Stored outputs are kept small: the kernel's
``language_info`` and cell execution timings are dropped, text streams longer than
:data:`MAX_TEXT` characters are cut (saying so), and a notebook over :data:`MAX_BYTES` fails
the run. ``tests/test_notebooks.py`` checks what is stored and runs them again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_TEXT = 4_000          # characters of one text output kept
MAX_BYTES = 400_000       # a stored notebook, outputs and pictures included
TIMEOUT_S = 180           # one cell


def _trim(nb) -> None:
    """Drop volatile metadata; cut long text outputs."""
    nb.metadata.pop("language_info", None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and len(out.get("text", "")) > MAX_TEXT:
                out["text"] = out["text"][:MAX_TEXT] + f"\n… (cut at {MAX_TEXT} characters)\n"
            data = out.get("data", {})
            if len(data.get("text/plain", "")) > MAX_TEXT:
                data["text/plain"] = data["text/plain"][:MAX_TEXT] + " …"


def execute(path: Path) -> float:
    """Run ``path`` in a fresh kernel and write it back with its outputs; seconds taken."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    t0 = time.monotonic()
    nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    _trim(nb)
    text = nbformat.writes(nb) + "\n"
    if len(text.encode()) > MAX_BYTES:
        raise SystemExit(f"{path.name}: {len(text.encode()):,} bytes with outputs (limit {MAX_BYTES:,}): "
                         "make its outputs smaller")
    path.write_text(text, encoding="utf-8")
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="names or paths (default: every examples/*.ipynb)")
    args = ap.parse_args(argv)
    paths = [Path(n) if n.endswith(".ipynb") else HERE / f"{n}.ipynb" for n in args.notebooks] \
        or sorted(HERE.glob("*.ipynb"))
    for path in paths:
        print(f"{path.name}: {execute(path):.1f} s, {path.stat().st_size:,} bytes", flush=True)


if __name__ == "__main__":
    sys.exit(main())
