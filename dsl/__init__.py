"""certa.dsl: graphs of ``@step`` functions with ``@certaindex`` signals, compiled to Programs."""

from certa.dsl.compiler import CompiledGraph, compile_graph
from certa.dsl.graph import END, START, Graph, Send
from certa.dsl.program import GraphProgram
from certa.dsl.state import (Annotated, Appended, Extended, Overwrite, Reducer, State, add, append, extend, max_,
                             merge, min_)

__all__ = ["Annotated", "Appended", "CompiledGraph", "END", "Extended", "Graph", "GraphProgram", "Overwrite", "Reducer",
           "START",
           "Send", "State", "add", "append", "compile_graph", "extend", "max_", "merge", "min_"]
