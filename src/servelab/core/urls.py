"""An OpenAI-compatible server's two roots: its API base (``.../v1``: models, completions) and the server root
(health, tokenize, metrics, version), from whatever form a user gives."""

from __future__ import annotations


def api_base(url: str) -> str:
    """``http://host:8000``, ``.../v1`` or ``.../v1/`` → ``http://host:8000/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def server_root(url: str) -> str:
    """``http://host:8000/v1/`` (or without /v1) → ``http://host:8000``."""
    return api_base(url).removesuffix("/v1")
