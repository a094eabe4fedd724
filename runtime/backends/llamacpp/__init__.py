"""The embedded llama.cpp engine (CPU): certa forms each decode batch itself.

``backend`` (:class:`LlamaCppBackend`, the Backend), ``engine`` (the batch thread), ``batch``
(one decode iteration), ``jobs`` (requests as jobs), ``kv`` (KV-cache slots and rollback),
``model`` (loading a GGUF). llama-cpp-python is imported only when a model loads.
"""
