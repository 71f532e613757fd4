"""The file operations on a data root's places give the same answers on a local disk and on the
project's real S3-compatible server; a checkpoint Spark wrote on the store is read, and owned,
as a local one is."""

from __future__ import annotations

import json
import threading
import time

import pytest

from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import (
    CheckpointBusy,
    checkpoint_lock,
    clear_temp_files,
    is_running,
    last_committed_batch,
    last_planned_batch,
    owner,
    query_id,
    relocate_state_schemas,
)
from streaming_jobs.core.locations import Location


@pytest.fixture(params=["local", "store"])
def place(request, tmp_path):
    if request.param == "local":
        return Location.of(tmp_path / "root")
    _, s3_cfg, _, bucket = request.getfixturevalue("s3_bucket")
    return Location.of(f"s3://{bucket}/root", s3_cfg.s3)


def test_the_file_operations_agree_on_disk_and_on_the_store(place):
    assert not locations.exists(place) and locations.names(place) == []
    files = {"a/1.json": b"one", "a/b/2.json": b"two!", "a/bc.json": b"3", "top.txt": b""}
    for relative, data in files.items():
        locations.write_bytes(place / relative, data)
    assert locations.names(place) == ["a", "top.txt"]
    assert locations.names(place / "a") == ["1.json", "b", "bc.json"]
    assert locations.is_dir(place / "a/b") and not locations.is_file(place / "a/b")
    assert locations.is_file(place / "a/1.json") and not locations.is_dir(place / "a/1.json")
    assert not locations.exists(place / "a/b/nothing")
    found = locations.entries(place)
    assert {e.relative: e.size for e in found} == {k: len(v) for k, v in files.items()}
    assert all(abs(e.modified - time.time()) < 120 for e in found)
    assert locations.read_text(place / "a/b/2.json") == "two!"
    with pytest.raises(FileNotFoundError):
        locations.read_bytes(place / "a/none.json")

    assert locations.copy_tree(place / "a", place / "copy") == 3
    assert [e.relative for e in locations.entries(place / "copy")] == [
        "1.json",
        "b/2.json",
        "bc.json",
    ]
    locations.delete_tree(place / "a")
    assert locations.names(place) == ["copy", "top.txt"]
    locations.delete(place / "top.txt")
    locations.delete(place / "top.txt")  # nothing there: no error
    assert locations.names(place) == ["copy"]


def test_a_made_folder_outlives_its_last_file(place):
    """A stream's landing folder is made when its query starts, often while files are in it;
    retention may then archive every one. On a store a folder is only its keys' prefix, and a
    file source restarting on a missing folder fails ("Option 'basePath' not found")."""
    landing = place / "landing" / "transactions"
    locations.write_bytes(landing / "1.jsonl", b"{}\n")
    locations.make_folder(landing)
    locations.delete(landing / "1.jsonl")
    assert locations.is_dir(landing)
    assert locations.names(landing) == [] and locations.entries(landing) == []  # no marker shown
    locations.make_folder(landing)  # made again: nothing changes
    assert locations.is_dir(landing)


def test_a_checkpoint_is_read_and_cleared_alike(place):
    checkpoint = place / "checkpoints" / "orders"
    assert last_committed_batch(checkpoint) is None and query_id(checkpoint) is None
    locations.write_bytes(checkpoint / "metadata", b'{"id":"5f0c"}')
    for batch in (0, 1, 2):
        locations.write_bytes(checkpoint / "offsets" / str(batch), b"v1")
    for batch in (0, 1):
        locations.write_bytes(checkpoint / "commits" / str(batch), b"v1")
    locations.write_bytes(checkpoint / "offsets" / ".3.9f1e.tmp", b"half")
    assert (last_planned_batch(checkpoint), last_committed_batch(checkpoint)) == (2, 1)
    assert query_id(checkpoint) == "5f0c"
    assert clear_temp_files(checkpoint) == ["offsets/.3.9f1e.tmp"]
    assert locations.names(checkpoint / "offsets") == ["0", "1", "2"]


def test_a_copied_checkpoints_keyed_state_names_its_own_schema_files(place):
    """The operator metadata a keyed-state job's checkpoint holds (format v2, as Spark 4.2
    writes it) names its schema files by absolute path; after a copy (a swap, a restore) each
    names the copy's file. The end to end: test_job_changes.py (a keyed job rebuilt and swapped
    in by a continuous run, then run on)."""
    made, copy = place / "rebuilds" / "j" / "shadow" / "checkpoint", place / "checkpoints" / "j"
    made_root = made.spark if made.on_store else f"file:{made.spark}"
    copy_root = copy.spark if copy.on_store else f"file:{copy.spark}"
    schema = "/state/0/_stateSchema/default/0_43f5be50"
    older = "s3a://elsewhere/root/checkpoints/j/state/0/_stateSchema/default/2_cb3cfb12"
    properties = '{"timeMode":"EventTime","outputMode":"Update"}'
    body = {
        "operatorInfo": {"operatorId": 0, "operatorName": "transformWithStateInPandasExec"},
        "stateStoreInfo": [
            {
                "storeName": "default",
                "numColsPrefixKey": 0,
                "numPartitions": 2,
                "stateSchemaFilePaths": [made_root + schema, older],
            }
        ],
        "operatorPropertiesJson": properties,
    }
    locations.write_bytes(made / "state/0/_metadata/v2/3", f"v2\n{json.dumps(body)}".encode())
    locations.write_bytes(made / "state/0/_metadata/v2/.3.crc", b"crc of the old text")
    locations.write_bytes(made / "state/1/_metadata/metadata", b"v1 metadata: no paths")
    locations.copy_tree(made, copy)

    assert relocate_state_schemas(copy) == 1
    head, _, text = locations.read_text(copy / "state/0/_metadata/v2/3").partition("\n")
    assert head == "v2"
    [store] = json.loads(text)["stateStoreInfo"]
    assert store["stateSchemaFilePaths"] == [
        copy_root + schema,
        copy_root + "/state/0/_stateSchema/default/2_cb3cfb12",
    ]
    assert json.loads(text)["operatorPropertiesJson"] == properties
    assert locations.names(copy / "state/0/_metadata/v2") == ["3"]  # the stale checksum gone
    assert relocate_state_schemas(copy) == 0  # once is enough
    assert locations.read_bytes(made / "state/0/_metadata/v2/.3.crc")  # the source untouched


def test_a_checkpoint_on_the_store_has_one_owner(s3_bucket):
    _, s3_cfg, _, bucket = s3_bucket
    checkpoint = Location.of(f"s3://{bucket}/checkpoints/orders", s3_cfg.s3)
    refused: list[str] = []
    with checkpoint_lock(checkpoint, "run-1", takes_savepoint_requests=True) as held:
        held.check()
        assert is_running(checkpoint) and owner(checkpoint)["holder"] == "run-1"
        assert owner(checkpoint)["takes_savepoint_requests"] is True

        def contend():
            try:
                with checkpoint_lock(checkpoint, "run-2"):
                    pass
            except CheckpointBusy as busy:
                refused.append(str(busy))

        other = threading.Thread(target=contend)
        other.start()
        other.join(timeout=60)
    assert len(refused) == 1 and "owned by run-1" in refused[0]
    assert not is_running(checkpoint) and owner(checkpoint)["released"] is True
    with checkpoint_lock(checkpoint, "run-2"):
        assert owner(checkpoint)["holder"] == "run-2" and owner(checkpoint)["token"] == 2


def test_a_sink_refuses_to_commit_once_its_checkpoint_lease_is_taken(s3_bucket, tmp_path):
    import json

    import obstore

    from streaming_jobs.core.checkpoints import lease_location, still_owned
    from streaming_jobs.core.leases import Fenced

    _, s3_cfg, _, bucket = s3_bucket
    checkpoint = Location.of(f"s3://{bucket}/checkpoints/orders", s3_cfg.s3)
    with checkpoint_lock(checkpoint, "run-1"):
        still_owned(checkpoint)  # held, and the record is this run's
        # another machine takes the lease over (as it does once this run's term has run out
        # without a renewal): a record with the next fencing token
        lease = lease_location(checkpoint)
        record = json.loads(locations.read_bytes(lease))
        taken = {**record, "holder": "run-2", "token": record["token"] + 1, "pid": 1}
        obstore.put(locations.store_of(lease), lease.key, json.dumps(taken).encode())
        with pytest.raises(Fenced, match="run-2"):
            still_owned(checkpoint)
    # not held here any more (and a checkpoint on a local disk has an flock that cannot be lost)
    still_owned(checkpoint)
    with checkpoint_lock(tmp_path / "orders", "run-3"):
        still_owned(tmp_path / "orders")
