"""One client for an OpenAI-compatible engine's control plane: what it serves (/v1/models), which build
(/version and the Server header), whether it is up (/health), how many tokens a prompt is (/tokenize) and its
Prometheus metrics (/metrics). One place knows the paths and which root each hangs off; the gateway, which keeps
its own pooled transport, takes the paths and the answer readers from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from servelab.core.errors import ServelabError
from servelab.core.failures import error_message
from servelab.core.urls import api_base, server_root
from servelab.engines.prometheus import MetricSample, parse_exposition

HEALTH = "/health"
TOKENIZE = "/tokenize"
APPLY_TEMPLATE = "/apply-template"  # llama.cpp's chat template applied, as text (its /tokenize takes text only)
METRICS = "/metrics"
VERSION = "/version"


def tokenize_body(model: str, text: str) -> dict[str, Any]:
    """One body both engines read: vLLM and SGLang take ``prompt`` (vLLM ignores the other key), llama.cpp's
    llama-server takes ``content``, with the special tokens its chat template adds, as vLLM counts them."""
    return {"model": model, "prompt": text, "content": text, "add_special": True}


def token_count(status: int, data: Any) -> int | None:
    """/tokenize's answer as a count (vLLM: ``count``; llama.cpp: the ``tokens`` list); None where the server
    has none or said something else."""
    if status != 200 or not isinstance(data, dict):
        return None
    if isinstance(data.get("count"), int) and not isinstance(data.get("count"), bool):
        return int(data["count"])
    tokens = data.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


@dataclass
class Description:
    """The target as it describes itself (what a run's manifest records)."""

    url: str
    models: list[dict[str, Any]] = field(default_factory=list)
    server_header: str | None = None
    server_version: str | None = None
    models_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "server_header": self.server_header}
        if self.models_error is None:
            out["models"] = self.models
        else:
            out["models_error"] = self.models_error
        if self.server_version is not None:
            out["server_version"] = self.server_version
        return out


@dataclass(frozen=True, slots=True)
class Served:
    """One model a target serves, as its /v1/models says: the id, and the context limit where it states one
    (vLLM's ``max_model_len``; llama.cpp's ``meta.n_ctx_train`` is the training context, not the server's)."""

    id: str
    max_model_len: int | None = None


def served_from(data: Any) -> list[Served]:
    """/v1/models' ``data`` as Served entries (anything not a model with an id left out)."""
    out = []
    for m in data if isinstance(data, list) else []:
        if isinstance(m, dict) and isinstance(m.get("id"), str):
            limit = m.get("max_model_len")
            out.append(Served(m["id"], limit if isinstance(limit, int) and limit > 0 else None))
    return out


class EngineAPI:
    """Synchronous calls; each says what went wrong as a value (None, False, an error string), never raises for a
    server that is down or answers oddly."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 10.0) -> None:
        self.base, self.root = api_base(url), server_root(url)
        self.url, self.timeout = url, timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _get(self, url: str) -> httpx.Response:
        return httpx.get(url, timeout=self.timeout, headers=self.headers)

    def healthy(self) -> bool:
        try:
            return self._get(self.root + HEALTH).status_code == 200
        except httpx.HTTPError:
            return False

    def first_model(self) -> str:
        """The first model the target serves; a ServelabError that says why when there is none."""
        return self.served()[0].id

    def served(self) -> list[Served]:
        """What the target serves; a ServelabError that says why in a person's words when it cannot be listed (down,
        a key it refuses, not an OpenAI-compatible server) or serves nothing."""
        try:
            resp = self._get(self.base + "/models")
        except httpx.HTTPError as exc:
            raise ServelabError(f"cannot list models at {self.url}: cannot reach it ({type(exc).__name__}: {exc})",
                                hint="is the server up, and is this its address?") from exc  # fmt: skip
        if resp.status_code in (401, 403):
            raise ServelabError(
                f"{self.url} refused {'the API key' if self.headers else 'a request without an API key'} "
                f"(HTTP {resp.status_code}: {_said(resp)})",
                hint="give --api-key KEY (or NAME=KEY for one target), or set OPENAI_API_KEY",
            )
        if resp.status_code != 200:
            raise ServelabError(f"cannot list models at {self.url}: HTTP {resp.status_code}: {_said(resp)}")
        try:
            models = served_from(resp.json().get("data"))
        except (ValueError, AttributeError) as exc:
            raise ServelabError(f"{self.url}/models did not answer an OpenAI model list") from exc
        if not models:
            raise ServelabError(f"{self.url} serves no models")
        return models

    def slot_context(self) -> int | None:
        """llama.cpp's context a slot holds (``/props``: ``default_generation_settings.n_ctx``, -c split over -np);
        None for a server without it."""
        try:
            resp = self._get(self.root + "/props")
            settings = resp.json().get("default_generation_settings") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None

    def models(self) -> list[str]:
        """The served model ids (empty where it answers none)."""
        try:
            resp = self._get(self.base + "/models")
            data = resp.json().get("data") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return []
        return [str(m["id"]) for m in data or [] if isinstance(m, dict) and "id" in m]

    def describe(self) -> Description:
        out = Description(self.url)
        try:
            resp = self._get(self.base + "/models")
            out.server_header = resp.headers.get("server")
            if resp.status_code == 200:
                out.models = list(resp.json().get("data", []))
            else:
                out.models_error = f"HTTP {resp.status_code}"
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            out.models_error = str(exc) or type(exc).__name__
        try:
            resp = self._get(self.root + VERSION)
            if resp.status_code == 200:
                out.server_version = resp.json().get("version")
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        return out

    def metrics_text(self) -> str:
        """The raw exposition; httpx.HTTPError for a server that cannot be reached."""
        return self._get(self.root + METRICS).text

    def metrics(self) -> list[MetricSample]:
        return parse_exposition(self.metrics_text())


class AsyncEngineAPI:
    """The calls a running measurement makes (token counts, metric scrapes), on one shared async client."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 10.0) -> None:
        self.base, self.root = api_base(url), server_root(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(timeout=timeout, headers=headers)

    async def tokens(self, model: str, text: str) -> int | None:
        try:
            resp = await self.http.post(self.root + TOKENIZE, json=tokenize_body(model, text))
            return token_count(resp.status_code, resp.json())
        except (httpx.HTTPError, ValueError):
            return None

    async def metrics(self) -> tuple[int, list[MetricSample]]:
        """The HTTP status and the samples (none unless 200); httpx.HTTPError or ValueError when unreadable."""
        resp = await self.http.get(self.root + METRICS)
        return resp.status_code, parse_exposition(resp.text) if resp.status_code == 200 else []

    async def aclose(self) -> None:
        await self.http.aclose()


def _said(resp: httpx.Response) -> str:
    return error_message(resp.text) or resp.reason_phrase


def discover_model(url: str, timeout: float = 10.0) -> str:
    """The first model the target serves."""
    return EngineAPI(url, timeout=timeout).first_model()
