"""What every settings parser shares: the error that names a malformed variable, and numbers
read from the environment. Below `config` and `store_settings`, which both parse."""

from __future__ import annotations

import math


class ConfigError(ValueError):
    """A setting is malformed; the message names the variable and the fix."""


def number(env: dict, name: str, default, kind=float, minimum: float = 0):
    """A finite number of at least ``minimum`` (nan, inf and words are refused by name)."""
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
        if not math.isfinite(value) or value < minimum:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not a "
            f"{'whole number' if kind is int else 'finite number'} of at least "
            f"{minimum:g}"
        ) from None
    return value
