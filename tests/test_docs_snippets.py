"""Every ```python block of README.md and docs/*.md runs as printed (issue 40).

How the blocks run (write new ones to fit; docs/index.md says so too):

- A page's blocks run in order in one namespace, like a notebook's cells, in a fresh temporary
  directory; a top-level ``await`` works. A block may use what an earlier block of the same page
  defined, nothing else.
- A compile warning (CT111 "no @answer", CT112) fails the block: a documented program is a
  complete one.
- ``"llamacpp"`` — the real CPU engine — is replaced by the scripted fake: the test swaps
  ``LlamaCppBackend`` (``Runtime("llamacpp")`` and ``LlamaCppBackend(...)`` both reach it) for a
  ``ScriptedBackend`` that answers ``\\boxed{408}`` (the docs ask 17 * 24) and takes the engine's
  options. The text of the block is not changed.
- ``<!-- snippet: against certa serve -->`` on the line before a block: it is run against a
  ``certa serve --program sc --backend scripted`` the test starts; the block's
  ``127.0.0.1:8000`` is the only text replaced (by that server's address).
- ``<!-- snippet: not run: REASON -->``: compiled only. REASON must start with one of
  :data:`NOT_RUN`: it needs hardware CI does not have, or the block is an outline of an API
  whose full program is elsewhere (and tested there).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import certa as ct
from certa.dsl.errors import CompileWarning

from .conftest import stop_process, wait_for_serve_port
from .test_docs_imports import DOCS, ROOT

FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"<!--\s*snippet:\s*(.*?)\s*-->\s*$")
NOT_RUN = ("needs a GPU", "outline of")
SERVER = "against certa serve"
ANSWER = "The answer is \\boxed{408}."


def snippets(doc: Path) -> list[tuple[int, str, str]]:
    """(line, marker or "", code) of each python block of ``doc``."""
    text = doc.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        out.append((line, mark.group(1) if mark else "", m.group(1)))
    return out


PAGES = [d for d in DOCS if snippets(d)]


class ScriptedLlama(ct.ScriptedBackend):
    """The stand-in for ``LlamaCppBackend``: takes its arguments, answers ``\\boxed{408}``."""

    def __init__(self, model=None, **engine_options) -> None:
        super().__init__(responses=[ANSWER])
        self.model_path, self.engine_options = model, engine_options


@pytest.fixture
def fake_llamacpp(monkeypatch):
    pytest.importorskip("llama_cpp", reason="the docs import the llama.cpp backend (pip install 'certa[cpu]')")
    from certa.runtime.backends.llamacpp import backend
    monkeypatch.setattr(backend, "LlamaCppBackend", ScriptedLlama)


@pytest.fixture(scope="module")
def serve_url():
    """``certa serve --program sc --backend scripted`` on a free port: ``127.0.0.1:PORT``."""
    pytest.importorskip("uvicorn", reason="certa serve needs uvicorn (pip install 'certa[serve]')")
    pytest.importorskip("openai", reason="the served snippets use the openai client (pip install 'certa[server-test]')")
    proc = subprocess.Popen([sys.executable, "-m", "certa.cli", "serve", "--program", "sc", "--backend", "scripted",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "CERTA_API_KEY": ""})
    try:
        yield f"127.0.0.1:{wait_for_serve_port(proc)}"
    finally:
        stop_process(proc)


def run_page(doc: Path, tmp_path: Path, request) -> dict:
    """Run ``doc``'s blocks as the module docstring says; returns the namespace."""
    ns: dict = {"__name__": "__doc_snippet__"}
    loop = asyncio.new_event_loop()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for line, mark, code in snippets(doc):
            where = f"{doc.name}:{line}"
            if mark.startswith("not run:"):
                assert mark.removeprefix("not run:").strip().startswith(NOT_RUN), f"{where}: reason {mark!r}"
                compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
                continue
            assert mark in ("", SERVER), f"{where}: unknown snippet marker {mark!r}"
            if mark == SERVER:
                code = code.replace("127.0.0.1:8000", request.getfixturevalue("serve_url"))
            run_block(code, where, ns, loop)
    finally:
        os.chdir(cwd)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return ns


def run_block(code: str, where: str, ns: dict, loop: asyncio.AbstractEventLoop) -> None:
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        asyncio.set_event_loop(loop)
        try:
            value = eval(compiled, ns)  # noqa: S307 - the project's own documentation, not model output
            if inspect.iscoroutine(value):
                loop.run_until_complete(value)
        finally:
            asyncio.set_event_loop(None)


@pytest.mark.parametrize("doc", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs_as_printed(doc, tmp_path, request, fake_llamacpp):
    run_page(doc, tmp_path, request)


def test_the_readme_program_answers(tmp_path, request, fake_llamacpp):
    """The README's 20-line program has an answer (it had none: CT111, ``result.answer`` None)."""
    ns = run_page(ROOT / "README.md", tmp_path, request)
    assert ns["result"].answer == "408" and ns["result"].exit_reason == "certaindex"


def test_markers_are_read_and_unknown_ones_fail(tmp_path, request):
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- snippet: not run: needs a GPU (sglang) -->\n```python\nimport no_such_module\n```\n\n"
                    "```python\nx = 1\n```\n<!-- snippet: maybe later -->\n```python\ny = x + 1\n```\n")
    assert [(line, mark) for line, mark, _ in snippets(page)] == [(3, "not run: needs a GPU (sglang)"), (7, ""),
                                                                 (11, "maybe later")]
    with pytest.raises(AssertionError, match="unknown snippet marker"):
        run_page(page, tmp_path, request)
    page.write_text("<!-- snippet: not run: too slow -->\n```python\nx = 1\n```\n")
    with pytest.raises(AssertionError, match="reason"):
        run_page(page, tmp_path, request)
