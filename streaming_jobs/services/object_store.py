"""The project's own S3-compatible object store: SeaweedFS, one process, on 127.0.0.1.

For development and tests (a production lake is on your own store: ``TIDEMARK_S3_ENDPOINT``
and its keys). Why SeaweedFS: it is Apache-2.0, one binary with no service of its own to
install, and it honours the conditional writes tidemark's guarantees stand on (a ``PUT`` with
``If-None-Match: *`` on an existing key answers 412), which s3proxy could not promise and
MinIO's licence (AGPL) rules out.

SeaweedFS is not published as a binary the project can fetch; `install` builds it once from its
Go module (``go build ./weed`` in the downloaded module, about 8 CPU-minutes; ``go install``
refuses the module for its ``replace`` directives) into a cache outside the checkout
(``~/.cache/tidemark/seaweedfs/<version>/weed``, ``TIDEMARK_CACHE`` moves it), so a fresh clone
reuses it. ``make s3-setup`` (``tidemark s3 install``; ``make test`` runs it) and the first
``tidemark s3 start`` run it.

The server (master, volume server, filer and S3 gateway in one ``weed server`` process) keeps
its files under ``TIDEMARK_S3_HOME`` (default ``.tidemark/s3`` in the checkout), with its log
(``s3.log``) and its keys (``identities.json``: made at the first start, readable by this user
only; tidemark uses them when ``TIDEMARK_S3_ACCESS_KEY_ID`` is not set). Every port it opens is
on 127.0.0.1: the S3 port is ``TIDEMARK_S3_PORT`` (default 8333), the others are free ports
chosen at each start.

A Python supervisor (``python -m streaming_jobs.services.object_store``) owns the process, as
for every server (`streaming_jobs.services.lifecycle`).

    tidemark s3 install|start|stop|status
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.lifecycle import HOST, Service, ServiceError
from streaming_jobs.services.processes import accepts, free_port, port_free
from streaming_jobs.core.stores import server_keys

SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
BUILD_TIMEOUT = 3600.0
GRPC_OFFSET = 10000
STOP_GRACE_SECONDS = 8.0
# a volume id no store reaches (ids count up from 1): its lookup tells a warming master apart
UNUSED_VOLUME = 4_000_000_000


def paired_port() -> int:
    """A free port whose gRPC twin (port + 10000) is free too."""
    for _ in range(200):
        port = free_port()
        if port + GRPC_OFFSET < 65536 and port_free(HOST, port + GRPC_OFFSET):
            return port
    raise ServiceError(f"no free pair of ports (p, p + {GRPC_OFFSET}) on {HOST}")


def server_ports(home: Path) -> dict[str, int]:
    """The ports of the master, the volume server and the filer: those of the last start
    (``ports.json`` in ``home``) when free, else new ones (each with its gRPC twin free).

    The master keeps its state (volume ids, the topology) in ``data/m<its port>``: a master on
    another port starts with none, finds the volumes it does not know, and freezes volume
    growth ("volume growth is frozen after master state loss"), so that a new bucket can never
    be written. Its port therefore never changes: taken, it is an error naming it."""
    record = home / "ports.json"
    try:
        ports = {k: int(v) for k, v in json.loads(record.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        ports = {}
    if "master" not in ports:  # a home from before the record: its newest master state
        states = sorted((home / "data").glob("m[0-9]*"), key=lambda p: p.stat().st_mtime)
        if states and states[-1].name[1:].isdigit():
            ports["master"] = int(states[-1].name[1:])
    for name in ("master", "volume", "filer"):
        port = ports.get(name)
        if port is not None and port_free(HOST, port) and port_free(HOST, port + GRPC_OFFSET):
            continue
        if name == "master" and port is not None:
            raise ServiceError(
                f"port {port} or {port + GRPC_OFFSET} on {HOST} is taken; the S3 server's "
                f"master keeps its state under that port ({home / 'data' / f'm{port}'}): stop "
                f"what holds it, or move {home} aside to start an empty store"
            )
        ports[name] = paired_port()
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(ports))
    return ports


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    port: int
    pid: int  # the supervisor's
    filer_port: int


def binary(cfg: TidemarkConfig) -> Path:
    """Where the built server is (it may not be there yet: `install`)."""
    return cfg.s3.server_cache / "seaweedfs" / SEAWEEDFS_VERSION / "weed"


def install(cfg: TidemarkConfig, say=print) -> Path:
    """The server's binary, built from its Go module the first time (about 8 CPU-minutes)."""
    target = binary(cfg)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    go = shutil.which("go")
    if go is None:
        raise ServiceError(
            "the project's S3 server (SeaweedFS) is built from its Go module, and `go` is not on "
            "PATH: install Go 1.26 or newer (https://go.dev/doc/install), or use your own S3 "
            "store (TIDEMARK_S3_ENDPOINT)"
        )
    say(
        f"building SeaweedFS {SEAWEEDFS_VERSION} into {target.parent} (once; about 8 "
        "CPU-minutes)...",
    )
    env = {**os.environ, "GOFLAGS": os.environ.get("GOFLAGS", "-buildvcs=false")}
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{SEAWEEDFS_VERSION}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if found.returncode != 0:
        raise ServiceError(
            f"go could not download {SEAWEEDFS_MODULE}@{SEAWEEDFS_VERSION}: "
            f"{(found.stderr or found.stdout).strip()[-800:]}"
        )
    source = Path(json.loads(found.stdout)["Dir"])
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"weed.{os.getpid()}.partial")
    built = subprocess.run(
        [go, "build", "-o", str(partial), "./weed"],
        cwd=source,
        capture_output=True,
        text=True,
        env=env,
        timeout=BUILD_TIMEOUT,
    )
    if built.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ServiceError(
            f"building SeaweedFS in {source} failed: {(built.stderr or built.stdout)[-1500:]}"
        )
    partial.replace(target)  # whole or absent
    return target


class ObjectStoreServer(Service):
    """SeaweedFS's ``weed server``: its supervisor runs it (`streaming_jobs.services.lifecycle`)."""

    title = "the S3 server"
    command = "tidemark s3"
    module = "streaming_jobs.services.object_store"
    owner_variable = "TIDEMARK_S3_OWNER_PID"
    port_variable = "TIDEMARK_S3_PORT"
    log_name = "s3.log"
    start_timeout = 120.0
    stop_timeout = 60.0

    @property
    def port(self) -> int:
        return self.cfg.s3.port

    @property
    def info_file(self) -> Path:
        return self.cfg.s3.home / "server.json"

    @property
    def log(self) -> Path:
        return self.cfg.s3.home / self.log_name

    def supervisor_env(self) -> dict[str, str]:
        return {
            "TIDEMARK_S3_HOME": str(self.cfg.s3.home),
            "TIDEMARK_S3_PORT": str(self.port),
            "TIDEMARK_CACHE": str(self.cfg.s3.server_cache),
        }

    def prepare(self) -> None:
        install(self.cfg)  # built (the first time only) before the clock runs
        server_keys(self.cfg)

    def ready(self, info: dict) -> bool:
        """The store takes writes: its master leads, is past its warm-up and has a volume server
        (a new bucket's first write makes a volume there), its filer answers (buckets are its
        folders) and the S3 gateway accepts. Until then the filer and the gateway answer, but a
        write is refused ("no free volumes left") or waits: a new master has no volume server
        until its first heartbeat (about 2.5 s), and a restarted master resumes its state,
        leads after an election and then assigns nothing for 15 s (SeaweedFS's warm-up)."""
        if "master_port" in info:  # a server an older tidemark started does not say
            master = f"http://{HOST}:{info['master_port']}"
            if _status(f"{master}/cluster/healthz") != 200:
                return False  # no leader yet
            # a volume no store has: "not found" (404), or 503 while the master warms up
            if _status(f"{master}/dir/lookup?volumeId={UNUSED_VOLUME}") != 404:
                return False
            if not _volume_slots(f"{master}/dir/status"):
                return False
        if _status(f"http://{HOST}:{info['filer_port']}/") != 200:
            return False
        return accepts(HOST, int(info["port"]))

    def run(self, stop: threading.Event) -> int:
        """The server until ``stop`` (or the owner dies); then SIGTERM, a clean stop."""
        if not port_free(HOST, self.port):
            raise ServiceError(
                f"port {self.port} on {HOST} is taken (another S3 server, or another program); "
                f"stop it, or choose a free port with {self.port_variable}"
            )
        data = self.cfg.s3.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        # SeaweedFS reaches a server's gRPC at its port + 10000: both must be free
        ports = server_ports(self.cfg.s3.home)
        if not port_free(HOST, self.port + GRPC_OFFSET):
            raise ServiceError(
                f"port {self.port + GRPC_OFFSET} on {HOST} (the S3 gateway's gRPC, its port + "
                f"{GRPC_OFFSET}) is taken; choose another {self.port_variable}"
            )
        command = [
            str(binary(self.cfg)),
            # its log goes to the server's log only (by default glog also writes files into
            # the machine's temporary folder, up to 1.8 GB each, one set per start)
            "-logtostderr",
            "server",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-master.port={ports['master']}",
            "-master.volumeSizeLimitMB=256",
            # one master, so no peer to disagree with: a restart resumes its raft state and
            # leads after one election timeout (10 s by default, 16 to 20 s measured; 1.7 s)
            "-master.electionTimeout=1s",
            f"-volume.port={ports['volume']}",
            # one volume per bucket (a bucket is a collection of its own): a test session makes
            # a bucket per test, and 16 ran out ("no free volumes left": every write a 500)
            "-volume.max=256",
            # a stop closes the volume server after 1 s, not 10 (its heartbeat's grace)
            "-volume.preStopSeconds=1",
            "-filer",
            f"-filer.port={ports['filer']}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.config={self.cfg.s3.home / 'identities.json'}",
            # nothing else it could open: the Iceberg and Lance catalogues are off
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            # it reports nothing to anyone (SeaweedFS sends usage statistics by default)
            "-master.telemetry=false",
        ]
        # weed reads master.toml from its working folder: a bucket's first write grows one
        # volume for it, not seven (SeaweedFS's default for a production cluster)
        (self.cfg.s3.home / "master.toml").write_text("[master.volume_growth]\ncopy_1 = 1\n")
        with open(self.log, "ab") as log:
            weed = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cfg.s3.home,
            )
        # SIGTERM closes the volume server and the filer (their files flushed) within seconds,
        # but `weed server` itself lingers in its master's retries: past that, it is killed
        return self.supervise(
            [weed], stop, STOP_GRACE_SECONDS, filer_port=ports["filer"], master_port=ports["master"]
        )


def _answer(url: str) -> tuple[int | None, bytes]:
    """The HTTP status ``url`` answers with and its body, or (None, b"") if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError):
        return None, b""


def _status(url: str) -> int | None:
    return _answer(url)[0]


def _volume_slots(url: str) -> int:
    """The volumes the master's volume servers may hold (its topology's ``Max``; 0 until one
    has reported in), or 0 if the master does not answer."""
    try:
        return int(json.loads(_answer(url)[1])["Topology"]["Max"])
    except (ValueError, KeyError, TypeError):
        return 0


def _server(cfg: TidemarkConfig, info: dict) -> S3Server:
    return S3Server(
        f"http://{HOST}:{info['port']}",
        int(info["port"]),
        int(info["pid"]),
        int(info["filer_port"]),
    )


def discover(cfg: TidemarkConfig) -> S3Server | None:
    """The project's running S3 server, or None."""
    info = ObjectStoreServer(cfg).discover()
    return _server(cfg, info) if info else None


def start(
    cfg: TidemarkConfig,
    *,
    owned: bool = True,
    timeout: float | None = None,
    owner: int | None = None,
) -> S3Server:
    """Start the project's S3 server on ``TIDEMARK_S3_PORT`` unless it runs (building it the
    first time); return it once it serves. ``owned``: it stops when this process ends (or
    ``owner``)."""
    return _server(cfg, ObjectStoreServer(cfg).start(owned=owned, timeout=timeout, owner=owner))


def stop(cfg: TidemarkConfig, timeout: float | None = None) -> bool:
    """Stop the project's S3 server cleanly; False if none ran."""
    return ObjectStoreServer(cfg).stop(timeout)


if __name__ == "__main__":
    raise SystemExit(ObjectStoreServer.main())
