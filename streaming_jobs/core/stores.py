"""Object stores from Python: one layer, `obstore` (the Rust ``object_store`` crate that delta-rs
is built on), for S3-compatible stores and a local folder alike.

Why obstore: tidemark's ownership and commits stand on conditional writes, and obstore has
them for every store under one API: ``mode="create"`` (S3's ``If-None-Match: *``: the put fails
when the key exists) and ``mode={"e_tag": ...}`` (``If-Match``: the put fails when the object
changed since it was read). pyarrow's file systems have neither; s3fs brings botocore and has
no update-if-unchanged. It reads the same settings as delta-rs (`s3_options` serves both).

The keys are secrets: they go to the store's client and nowhere else (never into a repr, a
log line or Dagster metadata).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass

from streaming_jobs.core.store_settings import ObjectStoreSettings

# a TidemarkConfig (its ``s3``) or the ObjectStoreSettings themselves (config is above this
# module: a data root may be on a store)
StoreSettings = object


def _s3(cfg: StoreSettings) -> ObjectStoreSettings:
    return cfg if isinstance(cfg, ObjectStoreSettings) else cfg.s3  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Keys:
    """An access key pair: out of repr, never logged."""

    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:
        return "Keys(<secret>)"


def server_keys(cfg: StoreSettings) -> Keys:
    """The project's server's keys, made at its first start (readable by this user only)."""
    home = _s3(cfg).home
    path = home / "identities.json"
    try:
        identity = json.loads(path.read_text())["identities"][0]["credentials"][0]
        return Keys(identity["accessKey"], identity["secretKey"])
    except (OSError, ValueError, KeyError, IndexError):
        pass
    keys = Keys(f"tidemark{secrets.token_hex(4)}", secrets.token_urlsafe(30))
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "identities": [
            {
                "name": "tidemark",
                "credentials": [
                    {"accessKey": keys.access_key_id, "secretKey": keys.secret_access_key}
                ],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    partial = path.with_name(f".identities.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(config, out)
    partial.replace(path)
    return keys


def keys(cfg: StoreSettings) -> Keys:
    """The keys tidemark signs with: yours (``TIDEMARK_S3_ACCESS_KEY_ID`` and its secret), or
    the project's server's."""
    s3 = _s3(cfg)
    if s3.access_key_id and s3.secret_access_key:
        return Keys(s3.access_key_id, s3.secret_access_key)
    if not s3.own_server:
        raise StoreError(
            f"TIDEMARK_S3_ENDPOINT={s3.endpoint} needs keys: set TIDEMARK_S3_ACCESS_KEY_ID "
            "and TIDEMARK_S3_SECRET_ACCESS_KEY"
        )
    return server_keys(cfg)


class StoreError(RuntimeError):
    """An object store cannot be reached as set; the message names the setting to fix."""


def s3_options(cfg: StoreSettings) -> dict[str, str]:
    """The S3 settings in object_store's names (obstore's ``S3Store`` and delta-rs's
    ``storage_options`` both take them): the endpoint, region, path style, the keys, and
    conditional puts by the standard precondition headers."""
    signed, s3 = keys(cfg), _s3(cfg)
    return {
        "endpoint": s3.endpoint.rstrip("/"),
        "region": s3.region,
        "access_key_id": signed.access_key_id,
        "secret_access_key": signed.secret_access_key,
        "virtual_hosted_style_request": "false" if s3.path_style else "true",
        "conditional_put": "etag",
        "allow_http": "true" if s3.endpoint.startswith("http://") else "false",
    }


def s3_store(cfg: StoreSettings, bucket: str, prefix: str | None = None):
    """An obstore store over ``bucket`` (under ``prefix``), signed with tidemark's keys."""
    from obstore.store import S3Store

    options = s3_options(cfg)
    allow_http = options.pop("allow_http") == "true"
    return S3Store(
        bucket,
        prefix=prefix,
        config=options,
        client_options={"allow_http": allow_http, "timeout": "60s", "connect_timeout": "10s"},
    )


def ensure_bucket(cfg: StoreSettings, bucket: str) -> None:
    """Create ``bucket`` unless it is there already and yours (S3's CreateBucket, signed with
    tidemark's keys)."""
    import urllib.error
    import urllib.request
    from datetime import timedelta

    import obstore

    url = obstore.sign(s3_store(cfg, bucket), "PUT", "", timedelta(minutes=5))
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, method="PUT", data=b""), timeout=30
        ):
            return
    except urllib.error.HTTPError as refused:
        said = refused.read().decode(errors="replace")
        if refused.code == 409 and "BucketAlreadyOwnedByYou" in said:
            return
        raise StoreError(
            f"{_s3(cfg).endpoint} refused to create bucket {bucket} ({refused.code}): "
            f"{said[:300]}; create it yourself, or check the keys' permissions"
        ) from None
