"""What a run was: servelab version, arguments, host, GPU and the target as it describes itself."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from servelab._version import __version__
from servelab.engines.control import EngineAPI


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory_gib"] = round(pages * size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return info


def gpu_info() -> list[dict[str, str]]:
    """GPUs as nvidia-smi reports them; empty where there is none."""
    if shutil.which("nvidia-smi") is None:
        return []
    fields = "name,memory.total,driver_version"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    keys = fields.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=False)) for line in out.splitlines() if line]


def target_info(base_url: str, *, api_key: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """The target's /v1/models, its /version and Server header, where it exposes them."""
    return EngineAPI(base_url, api_key=api_key, timeout=timeout).describe().to_dict()


def build_manifest(
    kind: str, args: dict[str, Any], targets: dict[str, str], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "servelab_version": __version__,
        "kind": kind,
        "args": args,
        "argv": sys.argv,
        "host": host_info(),
        "gpus": gpu_info(),
        "targets": {name: target_info(url) for name, url in targets.items()},
    }
    manifest.update(extra or {})
    return manifest
