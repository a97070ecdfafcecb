"""Small Python backends that multi-turn tool items talk to: the model's calls are executed here and the
results sent back, until the model answers in text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Backend = dict[str, Callable[..., Any]]

_WEATHER: dict[str, dict[str, Any]] = {
    "oslo": {"city": "Oslo", "temperature_c": 6, "conditions": "rain", "precipitation_mm": 12},
    "madrid": {"city": "Madrid", "temperature_c": 24, "conditions": "sunny", "precipitation_mm": 0},
}


def _get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    found = _WEATHER.get(str(city).strip().lower())
    if found is None:
        return {"error": f"no weather for {city!r}"}
    if unit == "fahrenheit":
        return {**found, "temperature_f": round(found["temperature_c"] * 9 / 5 + 32)}
    return found


def _add(a: Any, b: Any) -> Any:
    return {"result": a + b} if isinstance(a, int) and isinstance(b, int) else {"error": "a and b must be integers"}


BACKENDS: dict[str, Backend] = {"weather": {"get_weather": _get_weather, "add": _add}}


def call(backend: str, name: str, arguments: str) -> str:
    """One tool call's result as the JSON text a tool message carries; errors are results too."""
    functions = BACKENDS[backend]
    if name not in functions:
        return json.dumps({"error": f"no tool {name!r}"})
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise TypeError("arguments are not an object")
        return json.dumps(functions[name](**args))
    except (TypeError, ValueError) as exc:
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"})
