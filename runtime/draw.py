"""Mermaid text that renders in Jupyter (``_repr_markdown_``) and prints as plain text."""

from __future__ import annotations


class Mermaid(str):
    """A Mermaid diagram source. Jupyter renders it; ``str(m)`` is the raw Mermaid text.

    Example:
        >>> m = Mermaid("flowchart TD\\n    a --> b\\n")
        >>> m.startswith("flowchart")
        True
    """

    def _repr_markdown_(self) -> str:
        return f"```mermaid\n{self}```\n"

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": self._repr_markdown_(), "text/plain": str(self)}
