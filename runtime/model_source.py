"""Open a model for loading without a second copy on disk: a GGUF file in place, or the
installed part packages assembled in memory.

A known model's PyPI parts are byte ranges of one GGUF file, spread over several packages
(``certa[model-base]`` installs 1.1 GB of them). :func:`~certa.runtime.models.resolve_model`
concatenates them into a file in the cache: a second 1.1 GB copy. :func:`open_model` does
not. In order:

1. an explicit GGUF path, or a known model whose file is already in the cache (verified by
   sha256, or by the fresh marker a verification left), is loaded from that file in place;
2. a known model whose parts are installed is copied, part by part, into an anonymous
   in-memory file (Linux ``memfd_create``) that llama.cpp reads once into its own buffers
   and that is freed as soon as the weights are loaded (:meth:`ModelSource.close`). The
   parts are sha256-verified while they are copied the first time; a marker in the cache
   directory (``<file>.parts.verified``: the checksum and each part's size, mtime, inode and
   inode change time) vouches for them afterwards, and any write to a part forces a rehash;
3. where there is no ``memfd_create`` (not Linux), it falls back to the cache file of
   :func:`~certa.runtime.models.ensure`.

Which model a name, ``$CERTA_MODEL`` or the default picks is :func:`~certa.runtime.models.pick`'s
choice, the same as ``resolve_model``'s. ``certa models path`` still writes the cache file,
for tools that need a path (it says so).

Example:
    >>> from certa.runtime.models import KNOWN_MODELS
    >>> with open_model(KNOWN_MODELS["qwen2.5-coder-0.5b"].filename) as src:   # doctest: +SKIP
    ...     src.name, src.where, src.in_memory
    ('qwen2.5-coder-0.5b-instruct-q4_k_m.gguf', 'memory', True)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from certa.runtime import models
from certa.runtime.errors import ModelIntegrityError, ModelNotFoundError

__all__ = ["ModelSource", "open_model", "parts_marker", "verify_parts"]


@dataclass
class ModelSource:
    """A model ready to load: ``path`` is what llama.cpp opens (valid until :meth:`close`).

    ``name`` is the GGUF file name (the model's identity in traces and reports), ``where``
    one of ``"file"`` (an explicit path), ``"cache"`` or ``"memory"`` (assembled from the
    installed parts), ``size`` its bytes.
    """

    path: Path
    name: str
    where: str
    size: int
    _fd: int | None = field(default=None, repr=False)

    @property
    def in_memory(self) -> bool:
        """True when ``path`` is an in-memory file: load it by reading, not by mapping."""
        return self._fd is not None

    def close(self) -> None:
        """Free the in-memory copy (a loaded model keeps its own buffers). Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "ModelSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parts_marker(spec: models.ModelSpec, env: Mapping[str, str] | None = None) -> Path:
    """Where the verification of ``spec``'s installed parts is recorded."""
    return models.cache_dir(env) / f"{spec.filename}.parts.verified"


def _stamps(parts: list[Path]) -> list[dict]:
    return [{"path": str(p), **models.file_stamp(p)} for p in parts]


def _parts_vouched(spec: models.ModelSpec, parts: list[Path], env: Mapping[str, str] | None) -> bool:
    try:
        data = json.loads(parts_marker(spec, env).read_text())
        return data.get("sha256") == spec.sha256 and data.get("parts") == _stamps(parts)
    except (OSError, ValueError):
        return False


def _vouch(spec: models.ModelSpec, parts: list[Path], env: Mapping[str, str] | None) -> None:
    marker = parts_marker(spec, env)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"sha256": spec.sha256, "parts": _stamps(parts)}))
    except OSError:  # a read-only cache still works: the parts are rehashed next time
        pass


def _copy_in(fd: int, parts: list[Path], hasher: "hashlib._Hash | None") -> int:
    """Append ``parts`` to ``fd`` (kernel copies when nothing hashes); returns the bytes written."""
    size = 0
    for part in parts:
        with open(part, "rb") as f:
            if hasher is None:
                n = os.fstat(f.fileno()).st_size
                done = 0
                while done < n:
                    sent = os.sendfile(fd, f.fileno(), done, n - done)
                    if sent == 0:  # the part shrank while we read it
                        break
                    done += sent
                size += done
                continue
            while chunk := f.read(models.CHUNK):
                hasher.update(chunk)
                os.write(fd, chunk)
                size += len(chunk)
    return size


def verify_parts(spec: models.ModelSpec, *, env: Mapping[str, str] | None = None) -> bool:
    """Rehash ``spec``'s installed parts in order, copying nothing; when they match, a fresh
    marker vouches for them (``certa models verify``). ModelNotFoundError if they are not installed."""
    parts = models.part_paths(spec)
    if parts is None:
        raise ModelNotFoundError(f"model {spec.name} is not installed", hint=spec.pip_hint)
    hasher, size = hashlib.sha256(), 0
    for part in parts:
        with open(part, "rb") as f:
            while chunk := f.read(models.CHUNK):
                hasher.update(chunk)
                size += len(chunk)
    ok = size == spec.size and hasher.hexdigest() == spec.sha256
    if ok:
        _vouch(spec, parts, env)
    return ok


def _in_memory(spec: models.ModelSpec, parts: list[Path], env: Mapping[str, str] | None) -> ModelSource:
    """``spec``'s parts concatenated into a memfd, verified (or vouched for by the marker)."""
    vouched = _parts_vouched(spec, parts, env)
    fd = os.memfd_create(spec.filename, getattr(os, "MFD_CLOEXEC", 0))
    try:
        hasher = None if vouched else hashlib.sha256()
        size = _copy_in(fd, parts, hasher)
        digest = spec.sha256 if hasher is None else hasher.hexdigest()
        if size != spec.size or digest != spec.sha256:
            raise ModelIntegrityError(
                f"the installed parts of {spec.name} have sha256 {digest[:16]}… ({size} bytes), expected "
                f"{spec.sha256[:16]}… ({spec.size} bytes)",
                hint=f"reinstall them: pip install --force-reinstall 'certa[{spec.extra}]'")
        if not vouched:
            _vouch(spec, parts, env)
    except BaseException:
        os.close(fd)
        raise
    return ModelSource(Path(f"/proc/self/fd/{fd}"), spec.filename, "memory", size, fd)


def _memfd_works() -> bool:
    return hasattr(os, "memfd_create") and hasattr(os, "sendfile") and Path("/proc/self/fd").is_dir()


def open_model(model: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None) -> ModelSource:
    """A :class:`ModelSource` for ``model`` (a GGUF path, a known name, or None: ``$CERTA_MODEL``
    or the default), without writing a copy of an installed model (see the module docs).

    Raises :class:`ModelNotFoundError` when nothing is installed, :class:`ModelIntegrityError`
    when a file or the parts do not match the known checksum.
    """
    env = os.environ if env is None else env
    choice = models.pick(model, env=env)
    if isinstance(choice, Path):
        path = models.check_gguf(choice)
        return ModelSource(path, path.name, "file", path.stat().st_size)
    spec = choice
    parts = models.part_paths(spec)
    if (models.cache_dir(env) / spec.filename).is_file() or (parts is not None and not _memfd_works()):
        path = models.ensure(spec, env=env)  # verified; a corrupt copy is rebuilt from the parts
        return ModelSource(path, spec.filename, "cache", spec.size)
    if parts is None:
        raise ModelNotFoundError(f"model {spec.name} is not installed", hint=spec.pip_hint)
    return _in_memory(spec, parts, env)
