"""docs/architecture.md matches the tree: every folder and module it names exists, every package is named."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
TICKED = re.compile(r"`([\w./]+)`")


def tree_rows() -> list[tuple[Path, list[str]]]:
    """(folder, names it lists) for each row of the doc's tree table."""
    rows = []
    for line in DOC.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`") and cells[1].endswith("/`"):
            rows.append((ROOT / cells[1].strip("`"), TICKED.findall(cells[2])))
    return rows


def test_every_folder_and_module_the_tree_table_names_exists():
    rows = tree_rows()
    assert len(rows) >= 8
    for folder, names in rows:
        assert folder.is_dir(), folder
        for name in names:
            if name.endswith(".py") or name.endswith("/"):
                assert (folder / name).exists(), f"docs/architecture.md names {folder.name}/{name}, which is not there"


def test_every_package_of_the_tree_is_in_the_doc():
    named = {str(folder.relative_to(ROOT)) for folder, _ in tree_rows()}
    named |= {f"{folder.relative_to(ROOT)}/{n.rstrip('/')}" for folder, names in tree_rows() for n in names if n.endswith("/")}
    for top in ("runtime", "dsl", "algorithms", "certa"):
        for init in (ROOT / top).rglob("__init__.py"):
            package = str(init.parent.relative_to(ROOT))
            assert package in named, f"{package}/ is missing from docs/architecture.md"
