"""Security: model output is data, never code; templates are sandboxed; model files are
sha256-verified; nothing unpickles untrusted files; HTTP backends only reach configured hosts.
See SECURITY.md for the threat model."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import sys

import time

import pytest

import certa as ct

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("certa", "dsl", "algorithms", "runtime", "benchmarks", "examples", "tests")
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", "out", ".hypothesis", ".pytest_cache"}

# Each pattern is assembled from pieces so this file does not match itself.
_CALL = r"\s*\("
DANGEROUS = {
    "eval": r"(?<![\w.])" + "ev" + "al" + _CALL,
    "exec": r"(?<![\w.])" + "ex" + "ec" + _CALL,
    "builtins eval/exec": r"\bbuiltins\s*\.\s*(?:ev" + "al|ex" + "ec)\b",
    "pickle-like load": r"\b(?:pickle|cPickle|dill|cloudpickle|marshal|joblib|shelve)\s*\.\s*(?:load|loads|open)" + _CALL,
    "pickle-like import": r"\bfrom\s+(?:pickle|cPickle|dill|cloudpickle|marshal|joblib)\s+import\b",
    "allow_pickle": r"allow_" + r"pickle\s*=\s*True",
    "torch.load": r"\btorch\s*\.\s*lo" + "ad" + _CALL,
    "non-sandboxed jinja2": r"\bjinja2\s*\.\s*(?:Environment|Template)" + _CALL,
    "non-sandboxed jinja2 import": r"\bfrom\s+jinja2\s+import\b[^\n]*\b(?:Environment|Template)\b",
    "yaml.load": r"\byaml\s*\.\s*(?:load|unsafe_load|full_load|load_all)" + _CALL,
    "shell true": r"\bshell\s*=\s*" + "True",
    "os.system/popen": r"\bos\s*\.\s*(?:sys" + "tem|po" + "pen)" + _CALL,
    "sympy string eval": r"\b(?:sym" + "pify|parse_" + "expr)" + _CALL,
    "dynamic __import__": r"(?<![\w.])__imp" + "ort__" + _CALL,
}
# (path relative to the repo root, pattern name) -> why it is safe. Stale entries fail the test.
ALLOWLIST: dict[tuple[str, str], str] = {
    ("tests/test_docs_snippets.py", "eval"): "runs the code blocks of the project's own README and docs "
                                             "(eval: a block with a top-level await gives its coroutine)",
}


def source_files() -> list[pathlib.Path]:
    files = [p for p in ROOT.glob("*.py")]
    for top in SCANNED:
        for p in (ROOT / top).rglob("*"):
            if p.suffix in (".py", ".ipynb") and not SKIP_DIRS & set(p.relative_to(ROOT).parts):
                files.append(p)
    return files


def test_no_eval_exec_pickle_unsafe_jinja_or_yaml_in_the_source_tree():
    hits, used = [], set()
    files = source_files()
    assert len(files) > 50, "the scan must see the source tree"
    patterns = {name: re.compile(rx) for name, rx in DANGEROUS.items()}
    for path in files:
        rel = str(path.relative_to(ROOT))
        text = path.read_text(encoding="utf-8", errors="replace")
        for name, rx in patterns.items():
            for m in rx.finditer(text):
                if (rel, name) in ALLOWLIST:
                    used.add((rel, name))
                    continue
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{rel}:{line}: {name}: {text.splitlines()[line - 1].strip()[:100]}")
    assert not hits, "dangerous calls outside the allowlist:\n" + "\n".join(hits)
    assert used == set(ALLOWLIST), f"stale allowlist entries: {set(ALLOWLIST) - used}"


def test_the_scan_catches_what_it_should(tmp_path):
    bad = ["x = ev" "al(s)", "ex" "ec(code)", "import pickle\npickle.lo" "ads(b)", "from pick" "le import loads",
           "jinja2.Environ" "ment()", "from jin" "ja2 import Environment, Template", "yaml.lo" "ad(f)",
           "subprocess.run(c, shell=Tr" "ue)", "os.sys" "tem('x')", "sympy.sympi" "fy(s)", "__imp" "ort__('os')"]
    good = ["ast.literal_eval(s)", "model.eval()", "spec.loader.exec_module(m)", "yaml.safe_load(f)",
            "from jinja2.sandbox import ImmutableSandboxedEnvironment", "json.loads(s)",
            "asyncio.create_subprocess_exec(x)", "re.compile(p)"]
    patterns = [re.compile(rx) for rx in DANGEROUS.values()]
    for snippet in bad:
        assert any(p.search(snippet) for p in patterns), snippet
    for snippet in good:
        assert not any(p.search(snippet) for p in patterns), snippet


# ---- model output is data --------------------------------------------------------------------
IMPORT, POPEN, EVAL = "__imp" + "ort__(", "os.po" + "pen(", "ev" + "al("  # attack strings are data here


def payloads(marker: pathlib.Path) -> list[str]:
    m = str(marker)
    return [
        f"\\boxed{{{IMPORT}'os').system('touch {m}')}}",
        f"The answer is {{{{ cycler.__init__.__globals__.{POPEN}'touch {m}').read() }}}}",
        "{% for c in ().__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
        f"$(touch {m}) `touch {m}` ; touch {m}",
        f"\\boxed{{1+{IMPORT}\"os\").system(\"touch {m}\")}}",
        f"\\boxed{{{EVAL}\"open('{m}', 'w')\")}}",
    ]


async def test_model_output_flows_through_programs_as_data(tmp_path):
    from certa.algorithms.answers.equivalence import grade, math_equal
    from certa.algorithms.programs.self_consistency import sc_program

    marker = tmp_path / "PWNED"
    texts = payloads(marker)
    backend = ct.ScriptedBackend(responses=texts)
    prog = sc_program(branches_per_round=3, cap=len(texts), policy=ct.Even(len(texts)))
    r = await ct.Runtime(backend).run(prog, question="What is 1+1? {{ 7*7 }} {% raw %}")
    assert r.ok, r.error
    assert "{{ 7*7 }}" in backend.requests[0].prompt and "49" not in backend.requests[0].prompt
    for t in texts:  # graders and the math-verify worker see the payloads too
        grade(t, "2", "math", timeout=2.0)
        math_equal(t, t + "1", timeout=2.0)
    assert not marker.exists(), "model output was executed"


def test_model_output_fed_back_into_templates_stays_literal():
    from certa.algorithms.prompts import render
    out = render("mcts_step", question="q", steps=["{{ 7*7 }}", "{% raw %}x", "{{ ''.__class__ }}"])
    assert "{{ 7*7 }}" in out and "49" not in out and "{{ ''.__class__ }}" in out


# ---- templates are sandboxed -----------------------------------------------------------------
def test_prompt_templates_render_in_a_sandbox():
    from jinja2.sandbox import SandboxedEnvironment

    from certa.algorithms import prompts
    from certa.runtime.errors import ConfigError
    assert isinstance(prompts._env(), SandboxedEnvironment)
    for attack in ("{{ ''.__class__.__mro__[1].__subclasses__() }}",
                   "{{ cycler.__init__.__globals__." + POPEN + "'id').read() }}",
                   "{{ self._TemplateReference__context }}",
                   "{{ [].__class__.__base__ }}",
                   "{% set x = [] %}{{ x.append(1) }}"):
        with pytest.raises(ConfigError):
            prompts.render(attack)


@pytest.mark.parametrize("source", ["{% for i in range(10**9) %}{% endfor %}", "{{ 9 ** 99999999 }}",
                                    "{{ 'x' * 10**9 }}", "{{ [0] * 10**9 }}", "{{ 1 // 0 }}", "{{ 'a' + 1 }}",
                                    "{{ '%d' % 'x' }}", "{{ (10**9) | string | int * 'x' }}"])
def test_template_resource_and_type_errors_are_config_errors(source):
    """issue 20: ``range(10**9)`` leaked a raw OverflowError; huge powers and repeats could
    eat the CPU or memory; a failing expression raised its raw Python error."""
    from certa.algorithms import prompts
    from certa.runtime.errors import ConfigError
    t0 = time.monotonic()
    with pytest.raises(ConfigError):
        prompts.render(source)
    assert time.monotonic() - t0 < 2.0


def test_small_arithmetic_in_templates_still_works():
    from certa.algorithms import prompts
    assert prompts.render("{{ 2 ** 10 }} {{ 'ab' * 3 }} {% for i in range(3) %}{{ i }}{% endfor %}") == "1024 ababab 012"


# ---- model files are sha256-verified ----------------------------------------------------------
def test_tampered_cached_model_is_refused(tmp_path):
    models = pytest.importorskip("certa.runtime.models")
    from certa.runtime.errors import ModelIntegrityError
    good = b"GGUF" + b"\0" * 60
    import hashlib
    spec = models.ModelSpec("fake", "fake.gguf", len(good), hashlib.sha256(good).hexdigest(),
                            (("certa_no_such_part_pkg", "data/part01.bin"),), "model-fake")
    env = {"CERTA_CACHE": str(tmp_path)}
    (tmp_path / "fake.gguf").write_bytes(good)
    assert models.ensure(spec, env=env) == tmp_path / "fake.gguf"
    (tmp_path / "fake.gguf").write_bytes(b"GGUF" + b"\1" * 60)  # same size, different bytes
    with pytest.raises(ModelIntegrityError):
        models.ensure(spec, env=env)


def test_tampered_cached_model_with_the_same_size_and_mtime_is_refused(tmp_path):
    """issue 20: the ``.verified`` stamp was (size, mtime), both of which a writer can restore
    (``os.utime``); the stamp now also holds the inode change time, which it cannot."""
    models = pytest.importorskip("certa.runtime.models")
    from certa.runtime.errors import ModelIntegrityError
    import hashlib
    import os
    good = b"GGUF" + b"\0" * 60
    spec = models.ModelSpec("fake", "fake.gguf", len(good), hashlib.sha256(good).hexdigest(),
                            (("certa_no_such_part_pkg", "data/part01.bin"),), "model-fake")
    env = {"CERTA_CACHE": str(tmp_path)}
    path = tmp_path / "fake.gguf"
    path.write_bytes(good)
    assert models.ensure(spec, env=env) == path
    st = path.stat()
    time.sleep(0.01)
    with open(path, "r+b") as f:  # same size, different bytes, then the old mtime put back
        f.seek(10)
        f.write(b"\1")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    with pytest.raises(ModelIntegrityError):
        models.ensure(spec, env=env)


def test_the_llamacpp_backend_loads_models_through_the_verifying_source(tmp_path, monkeypatch):
    """Tampered part packages, or a file that is not GGUF, never reach llama.cpp."""
    backend = pytest.importorskip("certa.runtime.backends.llamacpp.backend",
                                  reason="llama-cpp-python is not installed (pip install 'certa[cpu]')")
    import hashlib

    from certa.runtime import models
    from certa.runtime.errors import ModelIntegrityError, ModelNotFoundError
    good = b"GGUF" + b"\0" * 60
    part = tmp_path / "site" / "certa_sec_part1" / "data" / "part01.bin"
    part.parent.mkdir(parents=True)
    (part.parent.parent / "__init__.py").write_text("raise RuntimeError('a part package was imported')\n")
    part.write_bytes(b"GGUF" + b"\1" * 60)  # the right size, the wrong bytes
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    spec = models.ModelSpec("fake", "fake.gguf", len(good), hashlib.sha256(good).hexdigest(),
                            (("certa_sec_part1", "data/part01.bin"),), "model-fake")
    monkeypatch.setattr(models, "KNOWN_MODELS", {"fake": spec})
    monkeypatch.setenv("CERTA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(backend, "LlamaModel", lambda *a, **k: pytest.fail("llama.cpp was handed unverified bytes"))
    with pytest.raises(ModelIntegrityError, match="installed parts of fake"):
        backend.LlamaCppBackend("fake")
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(ModelNotFoundError, match="not a GGUF"):
        backend.LlamaCppBackend(str(tmp_path / "notes.gguf"))


# ---- HTTP backends only reach configured hosts -----------------------------------------------
@pytest.mark.parametrize("kind", ["openai", "sglang-http"])
async def test_http_backends_only_contact_configured_hosts(kind, monkeypatch):
    httpx = pytest.importorskip("httpx")
    from certa.runtime.backends.registry import make_backend
    from certa.runtime.errors import BackendError
    from certa.runtime.types import GenRequest, ScoreRequest

    contacted: list[str] = []

    async def record(self, request):
        contacted.append(request.url.host)
        raise httpx.ConnectError("refused by test", request=request)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", record)
    opts = {"urls": "http://127.0.0.1:9"} if kind == "sglang-http" else {"base_url": "http://127.0.0.1:9"}
    b = make_backend(kind, **opts)
    for call in (b.generate(GenRequest(prompt="x", rid="s1", max_tokens=2)),
                 b.score(ScoreRequest(prompt="x", rid="s2")),
                 b.generate(GenRequest(prompt="x", rid="s3", max_tokens=2, chat=True))):
        with pytest.raises(BackendError):
            await call
    await b.abort("s1")
    assert contacted and set(contacted) == {"127.0.0.1"}
    # even if the worker list were tampered with after construction, the host guard refuses
    b.workers = ["http://169.254.169.254"]
    contacted.clear()
    with pytest.raises(BackendError, match="unconfigured host"):
        await b.generate(GenRequest(prompt="x", rid="s4", max_tokens=2))
    assert contacted == []
    await b.close()


# ---- the adversarial-exit benchmark runs and supports SECURITY.md's claims --------------------
def test_adversarial_exit_benchmark_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("adversarial_exit", ROOT / "benchmarks" / "adversarial_exit.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["adversarial_exit"] = mod
    spec.loader.exec_module(mod)
    out = tmp_path / "adv.json"
    sys_argv, sys.argv = sys.argv, ["adversarial_exit.py", "--json", str(out), "--n", "6"]
    mod.KS = (1, 2)
    mod.SC_GUARDS = [(0.9, 4), (0.9, 8)]
    try:
        mod.main()
    finally:
        sys.argv = sys_argv
    data = json.loads(out.read_text())
    assert data["checks"]["cot_replay_mismatches"] == 0
    cot = {(r["model"], r["k"], r["hesitation_filter"]): r for r in data["cot"]}
    assert cot[("hedging_wrong", 2, True)]["premature_wrong_exit_rate"] == 0.0  # the filter blocks hedgers
    assert cot[("hedging_wrong", 1, False)]["premature_wrong_exit_rate"] == 1.0
    assert cot[("flip_flop", 2, True)]["premature_wrong_exit_rate"] == 0.0  # k >= 2 blocks flip-floppers
    assert cot[("confident_wrong", 2, True)]["premature_wrong_exit_rate"] > 0.5  # ...but not a confident liar
    sc = {(r["model"], r["min_samples"]): r for r in data["sc"]}
    assert sc[("early_wrong_attractor", 8)]["premature_wrong_exit_rate"] <= sc[("early_wrong_attractor", 4)][
        "premature_wrong_exit_rate"]
