"""An OpenAI-compatible server's two roots: its API base (``.../v1``: models, completions) and the server root
(health, tokenize, metrics, version), from whatever form a user gives."""

from __future__ import annotations

from urllib.parse import urlsplit

from servelab.core.errors import UsageError


def api_base(url: str) -> str:
    """``http://host:8000``, ``.../v1`` or ``.../v1/`` → ``http://host:8000/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def server_root(url: str) -> str:
    """``http://host:8000/v1/`` (or without /v1) → ``http://host:8000``."""
    return api_base(url).removesuffix("/v1")


def check_url(url: str, what: str) -> str:
    """``url`` if it is an http(s) URL with a host (and a port in range), else a :class:`UsageError` naming what is
    wrong with it: no scheme (``localhost:8000`` reads as scheme 'localhost'), another scheme, no host, a bad port."""
    said = _url_problem(url)
    if said is not None:
        hint = f"like http://{url}" if said.startswith("no scheme") else "like http://127.0.0.1:8000"
        raise UsageError(f"{what}: {url!r} has {said}", hint=hint)
    return url


def _url_problem(url: str) -> str | None:
    if not url or any(c.isspace() for c in url):
        return "no address" if not url else "a space in it"
    if "://" not in url:
        return "no scheme (http:// or https://)"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"the scheme {parts.scheme!r}: servelab speaks http:// or https://"
    if not parts.hostname:
        return "no host"
    try:
        parts.port  # noqa: B018 - reading it checks it: a port out of range or not a number raises
    except ValueError:
        return "a port that is not a number from 0 to 65535"
    return None
