"""In-process fake servers for backend tests (loopback only). They run no model."""
