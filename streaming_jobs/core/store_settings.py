"""The settings of an S3-compatible object store (`ObjectStoreSettings`): its own module, below
both `config` (which parses them from the environment) and `locations` (whose places on a store
carry them), so neither imports the other's dependents."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

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
