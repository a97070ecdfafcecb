"""What the gateway checks of its upstreams beside the local health check: whether an upstream can be reached at
all (its name resolves, its port answers), and what to warn about at start-up (a key variable that is not set, an
upstream that cannot be reached)."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

from servelab.gateway.config import GatewayConfig, Upstream

LOG = logging.getLogger("servelab.gateway")


async def unreachable(url: str, timeout: float) -> str | None:
    """Why ``url``'s host cannot be reached (it does not resolve, nothing answers on its port), None when it can."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow the caller's cancel
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return f"{host}:{port} did not answer within {timeout:g} s"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
    writer.close()
    return None


async def startup_warnings(config: GatewayConfig) -> list[str]:
    """One line per thing an operator should fix before traffic arrives."""
    out = []
    for name, upstream in (("local", config.local), ("external", config.external)):
        if upstream is None:
            continue
        out += _key_warning(name, upstream)
        why = await unreachable(upstream.url, upstream.connect_timeout_s)
        if why is not None:
            out.append(f"the {name} upstream cannot be reached ({why}): requests routed there will fail over or 503")
    return out


def _key_warning(name: str, upstream: Upstream) -> list[str]:
    if upstream.api_key_env and not upstream.api_key():
        return [f"the {name} upstream's key variable {upstream.api_key_env} is not set: it is sent no key"]
    return []


def warn_at_start(config: GatewayConfig) -> None:
    for line in asyncio.run(startup_warnings(config)):
        LOG.warning("warning: %s", line)
