"""certa.dsl: graphs of @step functions with @certaindex signals, compiled to Programs."""
