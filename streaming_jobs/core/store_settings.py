"""The settings of an S3-compatible object store (`ObjectStoreSettings`): its own module, below
both `config` (which parses them from the environment) and `locations` (whose places on a store
carry them), so neither imports the other's dependents."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from streaming_jobs.core.parsing import ConfigError
from streaming_jobs.core.parsing import number as _number

_CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ObjectStoreSettings:
    """An S3-compatible object store: the project's own server (`tidemark s3 start`,
    `streaming_jobs.services.object_store`) or yours. The keys are secrets: out of repr, never
    logged; without them, the project's server's own keys are used."""

    port: int = 8333  # the project's own server, on 127.0.0.1
    endpoint: str = "http://127.0.0.1:8333"
    region: str = "us-east-1"
    path_style: bool = True
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    # the project's server's own files (its data, its keys, its log) and the built server
    home: Path = _CHECKOUT / ".tidemark" / "s3"
    server_cache: Path = Path(os.path.expanduser("~")) / ".cache" / "tidemark"

    @property
    def own_server(self) -> bool:
        """The endpoint is the project's own server (which tidemark may start)."""
        return self.endpoint.rstrip("/") == f"http://127.0.0.1:{self.port}"


# every variable `_object_store_settings` reads
STORE_VARIABLES = (
    "TIDEMARK_CACHE",
    "TIDEMARK_S3_ACCESS_KEY_ID",
    "TIDEMARK_S3_ENDPOINT",
    "TIDEMARK_S3_HOME",
    "TIDEMARK_S3_PATH_STYLE",
    "TIDEMARK_S3_PORT",
    "TIDEMARK_S3_REGION",
    "TIDEMARK_S3_SECRET_ACCESS_KEY",
)


def _object_store_settings(env: dict) -> ObjectStoreSettings:
    d = ObjectStoreSettings()
    port = _number(env, "TIDEMARK_S3_PORT", d.port, int, 1)
    if not 1 <= port <= 65535:
        raise ConfigError(f"TIDEMARK_S3_PORT={port} is not a TCP port (1-65535)")
    endpoint = env.get("TIDEMARK_S3_ENDPOINT") or f"http://127.0.0.1:{port}"
    if not re.fullmatch(r"https?://[^/\s]+/?", endpoint):
        raise ConfigError(
            f"TIDEMARK_S3_ENDPOINT={endpoint!r} is not http(s)://host[:port] (e.g. "
            "https://s3.eu-west-1.amazonaws.com)"
        )
    path_style = env.get("TIDEMARK_S3_PATH_STYLE", "1")
    if path_style not in ("0", "1"):
        raise ConfigError(f"TIDEMARK_S3_PATH_STYLE={path_style!r}: use 1 (path style) or 0")
    key = env.get("TIDEMARK_S3_ACCESS_KEY_ID") or None
    secret = env.get("TIDEMARK_S3_SECRET_ACCESS_KEY") or None
    if (key is None) != (secret is None):
        raise ConfigError(
            "TIDEMARK_S3_ACCESS_KEY_ID and TIDEMARK_S3_SECRET_ACCESS_KEY go together: set both, "
            "or neither (the project's own server's keys)"
        )
    cache = env.get("TIDEMARK_CACHE")
    return ObjectStoreSettings(
        port=port,
        endpoint=endpoint,
        region=env.get("TIDEMARK_S3_REGION", d.region),
        path_style=path_style == "1",
        access_key_id=key,
        secret_access_key=secret,
        home=Path(env["TIDEMARK_S3_HOME"]).resolve() if env.get("TIDEMARK_S3_HOME") else d.home,
        server_cache=Path(cache).resolve() if cache else d.server_cache,
    )
