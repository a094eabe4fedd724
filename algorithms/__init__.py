"""certa.algorithms: reasoning programs, answers, signals and policies written in certa's DSL."""
