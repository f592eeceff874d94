"""Client properties by Kafka's names (`linger.ms=20`), typed after the default of the setting they set."""

from __future__ import annotations

from typing import Any

from broker.errors import UsageError


def typed(key: str, text: str, default: Any) -> Any:
    """`text` as the type of `default` (bool, int, float or str); a UsageError naming `key` when it is not one."""
    if isinstance(default, bool) or default is None and text.lower() in ("true", "false"):
        if text.lower() not in ("true", "false"):
            raise UsageError(f"{key}: expected true or false, not {text!r}")
        return text.lower() == "true"
    if isinstance(default, int | float):
        try:
            value = type(default)(text)
        except ValueError:
            kind = "an integer" if isinstance(default, int) else "a number"
            raise UsageError(f"{key}: expected {kind}, not {text!r}") from None
        if value < 0:
            raise UsageError(f"{key}: must not be negative")
        return value
    return text


def pairs(items: list[str], option: str = "--property") -> dict[str, str]:
    """KEY=VALUE arguments as a dict; a UsageError for one without '='."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
