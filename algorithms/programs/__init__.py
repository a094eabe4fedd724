"""The program library, written in certa's DSL: CoT with probes (``cot_probe``), Self-Consistency
(``self_consistency``), MCTS (``mcts``), REBASE (``rebase``), SC over MCTS (``sc_mcts``), the
shared search tree (``tree``) and the name → builder registry (``library``).
"""
