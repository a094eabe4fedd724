"""SGLang backends: the embedded ``sglang.Engine`` (``engine``) and an SGLang server over HTTP (``http``)."""
