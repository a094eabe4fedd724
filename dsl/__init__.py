"""certa.dsl: graphs of ``@step`` functions with ``@certaindex`` signals, compiled to Programs."""

from .compiler import CompiledGraph, compile_graph
from .graph import END, START, Graph, Send
from .program import GraphProgram
from .state import Annotated, Appended, Extended, Reducer, State, add, append, extend, max_, merge, min_

__all__ = ["Annotated", "Appended", "CompiledGraph", "END", "Extended", "Graph", "GraphProgram", "Reducer", "START",
           "Send", "State", "add", "append", "compile_graph", "extend", "max_", "merge", "min_"]
