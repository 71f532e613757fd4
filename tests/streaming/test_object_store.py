"""The project's own S3-compatible store, as tidemark's guarantees need it: signed requests
only, server-side copies, and the two conditional writes (create if absent, update if
unchanged) through tidemark's one Python storage layer (`streaming_jobs.core.stores`)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError, PreconditionError

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.stores import ensure_bucket, server_keys
from streaming_jobs.services.processes import accepts


@pytest.fixture
def bucket(s3_bucket):
    _, cfg, _, name = s3_bucket
    ensure_bucket(cfg, name)  # again: it is there, and ours
    return s3_bucket


def test_conditional_writes_are_honoured_by_the_store(bucket):
    store, _, _, _ = bucket
    first = obstore.put(store, "lease/owner.json", b'{"owner": "a"}', mode="create")
    with pytest.raises(AlreadyExistsError):  # If-None-Match: * on an existing key: 412
        obstore.put(store, "lease/owner.json", b'{"owner": "b"}', mode="create")
    assert bytes(obstore.get(store, "lease/owner.json").bytes()) == b'{"owner": "a"}'

    renewed = obstore.put(
        store, "lease/owner.json", b'{"owner": "a", "n": 2}', mode={"e_tag": first["e_tag"]}
    )
    with pytest.raises(PreconditionError):  # If-Match with the superseded version: 412
        obstore.put(store, "lease/owner.json", b'{"owner": "c"}', mode={"e_tag": first["e_tag"]})
    assert renewed["e_tag"] != first["e_tag"]
    assert bytes(obstore.get(store, "lease/owner.json").bytes()) == b'{"owner": "a", "n": 2}'


def test_copies_are_made_by_the_server_and_listed(bucket):
    store, _, _, _ = bucket
    payload = os.urandom(3 * 1024 * 1024)
    obstore.put(store, "savepoints/a/state.bin", payload)
    obstore.copy(store, "savepoints/a/state.bin", "savepoints/b/state.bin")
    assert bytes(obstore.get(store, "savepoints/b/state.bin").bytes()) == payload
    listed = sorted(m["path"] for batch in obstore.list(store, "savepoints") for m in batch)
    assert listed == ["savepoints/a/state.bin", "savepoints/b/state.bin"]


def test_only_signed_requests_are_served_and_the_keys_stay_private(bucket, s3_server):
    _, cfg, server, name = bucket
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{server.endpoint}/{name}/", timeout=10)
    assert refused.value.code == 403
    identities = cfg.s3.home / "identities.json"
    assert stat.S_IMODE(identities.stat().st_mode) == 0o600
    secret = server_keys(cfg).secret_access_key
    assert secret not in (cfg.s3.home / "s3.log").read_text(errors="replace")

    env = {**os.environ, "TIDEMARK_S3_HOME": str(cfg.s3.home), "TIDEMARK_S3_PORT": str(cfg.s3.port)}
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    status = subprocess.run([tidemark, "s3", "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 0 and f"S3 server on {server.endpoint}" in status.stdout
    assert secret not in status.stdout + status.stderr


@pytest.mark.slow
def test_a_restarted_server_starts_at_once_and_takes_new_buckets(tmp_path):
    """Two things a restart broke. `make live` runs `tidemark setup` (which starts the server
    for itself; it stops when setup exits) and then `tidemark live`, which started a second
    server at once: the first still held the filer's files and the second died ("resource
    temporarily unavailable"); now a supervisor holds its lock until its last process is gone,
    and the next one waits. And each start gave the master a new port, so a new folder for its
    state: the restarted master froze volume growth, and a new bucket's first write hung for
    good; now the master keeps its port (`server_ports`). And a server whose owner had just
    ended was used while its supervisor was about to stop it (a CI run's write went to it, its
    read was refused): here the first owner freezes its supervisor as it ends, so the server is
    left answering with its owner gone, deterministically; it is not used, and the next start
    waits for it to stop."""
    from streaming_jobs.services import object_store

    env = {
        **os.environ,
        "TIDEMARK_S3_HOME": str(tmp_path / "s3"),
        "TIDEMARK_S3_PORT": str(object_store.paired_port()),
        "TIDEMARK_DATA_ROOT": str(tmp_path / "root"),
    }
    start_and_write = (
        "import sys\n"
        "from streaming_jobs.core import locations\n"
        "from streaming_jobs.core.config import TidemarkConfig\n"
        "from streaming_jobs.core.stores import ensure_bucket\n"
        "from streaming_jobs.services import object_store\n"
        "cfg = TidemarkConfig.from_env()\n"
        "print(object_store.start(cfg).endpoint, flush=True)\n"
        # started means writable: its master assigns at once (a restarted one warms up first)
        "import json, urllib.request\n"
        "info = json.loads((cfg.s3.home / 'server.json').read_text())\n"
        "url = f\"http://127.0.0.1:{info['master_port']}/dir/assign?collection=probe\"\n"
        "print(urllib.request.urlopen(url, timeout=30).status, flush=True)\n"
        "ensure_bucket(cfg, sys.argv[1])\n"
        "place = locations.Location.of(f's3://{sys.argv[1]}/a/b.json')\n"
        "locations.write_bytes(place, b'{}')\n"
        "print(locations.read_bytes(place).decode(), flush=True)\n"
        "if sys.argv[2:]:\n"
        "    import os, signal\n"
        "    os.kill(object_store.discover(cfg).pid, signal.SIGSTOP)\n"
    )
    for bucket in ("first", "second"):  # each owned by a process that ends at once
        freeze = ["freeze"] if bucket == "first" else []
        done = subprocess.run(
            [sys.executable, "-c", start_and_write, bucket, *freeze],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        endpoint, assigned, written = done.stdout.split()
        assert endpoint.startswith("http://127.0.0.1:") and written == "{}"
        assert assigned == "200"
        if freeze:
            cfg = TidemarkConfig.from_env(env)
            info = json.loads((tmp_path / "s3" / "server.json").read_text())
            try:
                assert accepts("127.0.0.1", int(info["port"]))  # it answers, its owner gone
                assert object_store.discover(cfg) is None
            finally:
                os.kill(int(info["pid"]), signal.SIGCONT)  # it stops now, as the next starts
    log = (tmp_path / "s3" / "s3.log").read_text(errors="replace")
    assert "resource temporarily unavailable" not in log
    assert "volume growth is frozen" not in log
    assert len(list((tmp_path / "s3" / "data").glob("m[0-9]*"))) == 1  # one master state


def test_a_server_owned_by_another_process_outlives_its_starter_and_stops_with_its_owner(
    tmp_path,
):
    """How the tests' two workers share one server (`tests/conftest.py`, `_SharedServers`):
    the worker that starts it may end first, so the server is owned by the session's first
    process (``owner``), not by its starter."""
    import time

    from streaming_jobs.services import object_store

    env = {
        **os.environ,
        "TIDEMARK_S3_HOME": str(tmp_path / "s3"),
        "TIDEMARK_S3_PORT": str(object_store.paired_port()),
    }
    cfg = TidemarkConfig.from_env(env)
    owner = subprocess.Popen(["sleep", "600"])
    try:
        started = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\n"
                "from streaming_jobs.core.config import TidemarkConfig\n"
                "from streaming_jobs.services import object_store\n"
                "object_store.start(TidemarkConfig.from_env(), owner=int(sys.argv[1]))\n",
                str(owner.pid),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert started.returncode == 0, started.stderr[-3000:]
        server = object_store.discover(cfg)  # its starter has ended
        assert server is not None and accepts("127.0.0.1", server.port)
        info = json.loads((tmp_path / "s3" / "server.json").read_text())
        assert info["owner"] == owner.pid
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 60
    while object_store.ObjectStoreServer(cfg).supervisor_running():
        assert time.monotonic() < deadline, "the server outlived its owner by a minute"
        time.sleep(0.5)
    assert object_store.discover(cfg) is None and not accepts("127.0.0.1", server.port)
