"""Reads, writes and refusals against a real beacond."""

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest

from beacon_signals import Client, ConfigurationError, Entry, Refused, Unavailable, WriteResult
from beacon_signals import beacon_pb2 as pb
from beacon_signals.endpoints import resolve

from conftest import BIN_DIR, Daemon, must, wait_for


def test_writes_reads_and_versions(daemon: Daemon) -> None:
    client = daemon.client()
    first = client.set("app.mode", "auto")
    assert first.version == 1 and not first.replayed
    second = client.set("app.mode", "manual", if_version=1)
    assert second.revision == first.revision + 1 and second.version == 2
    entry = must(client.get("app.mode"))
    assert (entry.value, entry.version, entry.create_revision, entry.mod_revision) == ("manual", 2, first.revision, second.revision)
    assert entry.mod_time_ms > 0
    assert client.get("app.none") is None
    assert client.list("app.") == {"app.mode": entry}
    deleted = client.delete("app.mode", if_version=2)
    assert deleted.versions == (0,)
    assert client.get("app.mode") is None


def test_consistent_reads_at_a_primary_are_its_reads_and_sync_names_its_head(daemon: Daemon) -> None:
    client = daemon.client()
    last = [client.set(f"c.{index}", index) for index in range(3)][-1]
    assert client.sync() == last.revision
    assert must(client.get("c.1", consistent=True)).value == 1
    assert client.get("c.none", consistent=True) is None
    assert sorted(client.list("c.", consistent=True)) == ["c.0", "c.1", "c.2"]


def test_refusals_carry_the_protocols_code_and_details(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("cas.k", 1)
    with pytest.raises(Refused) as conflict:
        client.set("cas.k", 2, if_version=5)
    assert conflict.value.code == "VERSION_CONFLICT" and conflict.value.current_version == 1 and conflict.value.key == "cas.k"
    with pytest.raises(Refused) as exists:
        client.set("cas.k", 2, create_only=True)
    assert exists.value.code == "ALREADY_EXISTS"
    with pytest.raises(Refused) as bad:
        client.set("bad key", 1)
    assert bad.value.code == "INVALID_KEY" and not bad.value.retryable
    with pytest.raises(Refused) as missing:
        client.delete("cas.none")
    assert missing.value.code == "NOT_FOUND"
    txn = client.transaction().set("cas.a", 1).set("cas.k", 9, if_version=7)
    with pytest.raises(Refused) as failed:
        txn.commit()
    assert failed.value.code == "VERSION_CONFLICT" and failed.value.op_index == 1
    assert client.get("cas.a") is None, "nothing of a refused transaction applies"


def test_a_transaction_is_one_revision_and_a_batch_answers_each_request(daemon: Daemon) -> None:
    client = daemon.client()
    with client.transaction() as txn:
        txn.set("t.a", 1).set("t.b", [1, 2]).set("t.c", None)
    assert txn.result.versions == (1, 1, 1)
    assert {entry.mod_revision for entry in client.list("t.").values()} == {txn.result.revision}
    outcomes = client.batch().set("t.d", 4).get("t.a").get("t.none").delete("t.none").send()
    written, read, missing, refused = outcomes
    assert isinstance(written, WriteResult) and written.version == 1 and written.revision == txn.result.revision + 1
    assert isinstance(read, Entry) and read.value == 1 and missing is None
    assert isinstance(refused, Refused) and refused.code == "NOT_FOUND"
    assert client.list("t.", keys_only=True) == ["t.a", "t.b", "t.c", "t.d"]


def test_ttls_and_sessions(daemon: Daemon) -> None:
    client = daemon.client()
    result = client.set("s.ttl", 1, ttl_ms=60_000)
    assert must(client.get("s.ttl")).expires_at_ms > time.time() * 1000
    client.set("s.bound", 1, session="writer-1")
    keys, ends_at = client.keep_alive("writer-1", 5000)
    assert keys == 1 and ends_at > time.time() * 1000
    client.end_session("writer-1")
    assert client.get("s.bound") is None, "an ended session's keys are gone"
    assert result.revision > 0


def test_history_pages_through_every_change(daemon: Daemon) -> None:
    client = daemon.client()
    for start in range(0, 2500, 250):  # more than one page of history
        batch = client.batch()
        for index in range(start, start + 250):
            batch.set(f"h.k{index % 7}", index)
        assert all(not isinstance(outcome, Exception) for outcome in batch.send())
    writes = [client.set("h.x", index).revision for index in range(30)]
    assert [event.value for event in client.history("h.k")] == list(range(2500))
    events = list(client.history("h.x", exact=True))
    assert [event.revision for event in events] == writes
    assert [event.value for event in events] == list(range(30))
    later = list(client.history("h.x", from_revision=writes[10]))
    assert [event.revision for event in later] == writes[10:]


def test_a_write_the_daemon_does_not_answer_is_sent_again_and_applied_once(daemon: Daemon) -> None:
    client = daemon.client(timeout=0.3, write_timeout=30.0)
    client.set("w.k", 0)
    daemon.pause()  # the write is read only once the daemon runs again, after the client gave up on a connection
    outcome: Dict[str, WriteResult] = {}
    writer = threading.Thread(target=lambda: outcome.update(result=client.set("w.k", 1)))
    writer.start()
    wait_for(lambda: client.resends >= 2, what="the client to send the write again")  # on new connections
    daemon.resume()
    writer.join(30)
    assert not writer.is_alive()
    result = outcome["result"]
    history = list(daemon.client().history("w.k", exact=True))
    assert [event.value for event in history] == [0, 1], "applied exactly once"
    assert result.revision == history[-1].revision


def test_a_relays_consistent_read_sees_the_write_its_upstream_acknowledged(make_daemon: Callable[..., Daemon]) -> None:
    primary = make_daemon(name="primary")
    relay = make_daemon("--upstream", f"ipc://{primary.runtime_dir}/beacon.req", name="relay")
    upstream, client = primary.client(), relay.client()
    wait_for(lambda: client.call(ping=pb.Ping()).ping.upstream.reachable, what="the relay to reach its upstream")
    for round in range(50):
        written = upstream.set("r.k", round)
        assert must(client.get("r.k", consistent=True)).mod_revision >= written.revision
    assert client.list("r.", consistent=True)["r.k"].value == 49
    assert client.sync() >= written.revision


def test_a_write_through_a_relay_waits_out_its_upstream_and_is_applied_once(make_daemon: Callable[..., Daemon]) -> None:
    primary = make_daemon(name="primary")
    relay = make_daemon("--upstream", f"ipc://{primary.runtime_dir}/beacon.req", name="relay")
    client = relay.client(timeout=1.0, write_timeout=60.0)
    wait_for(lambda: client.ping() and client.call(ping=pb.Ping()).ping.upstream.reachable, what="the relay to reach its upstream")
    client.set("w.k", 0)
    primary.stop(signal.SIGKILL)
    wait_for(lambda: not client.call(ping=pb.Ping()).ping.upstream.reachable, what="the relay to find its upstream gone")
    outcome: Dict[str, WriteResult] = {}
    writer = threading.Thread(target=lambda: outcome.update(result=client.set("w.k", 1)))
    writer.start()
    wait_for(lambda: client.resends >= 2, what="the relay to answer UPSTREAM_UNAVAILABLE and the client to send again")
    primary.start()
    writer.join(60)
    assert not writer.is_alive()
    history = list(primary.client().history("w.k", exact=True))
    assert [event.value for event in history] == [0, 1], "applied exactly once"
    assert outcome["result"].revision == history[-1].revision


def test_no_daemon_is_unavailable_quickly(tmp_path: Path) -> None:
    client = Client(str(tmp_path), timeout=0.2, write_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        client.get("k")
    with pytest.raises(Unavailable):
        client.set("k", 1)
    assert time.monotonic() - started < 5


def test_endpoints_are_found_as_the_command_line_tool_finds_them(tmp_path: Path) -> None:
    environ = {"BEACON_RUNTIME_DIR": str(tmp_path)}
    assert resolve(environ=environ).request == f"ipc://{tmp_path}/beacon.req"
    environ = {"BEACON_ENDPOINT": "tcp://127.0.0.1:7401", "BEACON_PUB_ENDPOINT": "tcp://127.0.0.1:7402"}
    endpoints = resolve(environ=environ)
    assert (endpoints.request, endpoints.publish) == ("tcp://127.0.0.1:7401", "tcp://127.0.0.1:7402")
    with pytest.raises(ConfigurationError):
        resolve(endpoint="http://x")
    with pytest.raises(ConfigurationError):
        resolve(environ={"BEACON_SERVER_KEY": "x" * 40})


def test_curve_over_tcp_with_a_listed_key(make_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    beacon = os.path.join(BIN_DIR, "beacon")
    for name in ("server", "client"):
        subprocess.run([beacon, "keygen", str(tmp_path / name)], check=True, capture_output=True)
    public = {}
    for name in ("server", "client"):
        for line in open(tmp_path / f"{name}.key"):
            if line.startswith("public"):
                public[name] = line.split("=", 1)[1].strip()
    daemon = make_daemon(config="\n".join([
        "request_endpoint = tcp://127.0.0.1:*", "publish_endpoint = tcp://127.0.0.1:*",
        f"curve_secret_key_file = {tmp_path / 'server.key'}",
        f"allow = uid:{os.getuid()} read=* write=*", f"allow = key:{public['client']} read=c. write=c.",
    ]))
    bound = dict(line.split(" ", 1) for line in open(os.path.join(daemon.runtime_dir, "beacond.endpoints")).read().split("\n")
                 if line.startswith(("request tcp", "publish tcp")))
    client = Client(endpoint=bound["request"], pub_endpoint=bound["publish"], server_key=public["server"],
                    key_file=str(tmp_path / "client.key"), timeout=10)
    assert client.set("c.k", 1).version == 1
    with pytest.raises(Refused) as denied:
        client.set("d.k", 1)
    assert denied.value.code == "PERMISSION_DENIED"


def test_values_written_by_the_cli_read_back_here_and_the_other_way(daemon: Daemon) -> None:
    beacon = [os.path.join(BIN_DIR, "beacon"), "--runtime-dir", daemon.runtime_dir]
    client = daemon.client()
    cases: Dict[str, Tuple[str, Any]] = {"v.int": ("42", 42), "v.double": ("42.0", 42.0), "v.string": ('"42"', "42"), "v.null": ("null", None),
             "v.bool": ("true", True), "v.list": ('[1, 2.5, "x", null]', [1, 2.5, "x", None]),
             "v.map": ('{"a": {"b": [false]}}', {"a": {"b": [False]}})}
    for key, (text, value) in cases.items():
        subprocess.run(beacon + ["set", key, text], check=True, capture_output=True)
        got = must(client.get(key)).value
        assert got == value and type(got) is type(value), key
    subprocess.run(beacon + ["set", "v.bytes", "AAH/", "--type", "bytes"], check=True, capture_output=True)
    assert must(client.get("v.bytes")).value == b"\x00\x01\xff"
    written: Dict[str, Any] = {"p.int": 7, "p.double": 7.0, "p.bytes": b"\x00\xfe", "p.nested": {"l": [1, 1.5, None, b"b", "s"]}}
    for key, value in written.items():
        client.set(key, value)
    lines = subprocess.run(beacon + ["ls", "p.", "--json"], check=True, capture_output=True, text=True).stdout.splitlines()
    printed = {row["key"]: row["value"] for row in map(json.loads, lines)}
    assert printed["p.int"] == 7 and isinstance(printed["p.int"], int)
    assert printed["p.double"] == 7.0 and isinstance(printed["p.double"], float)
    assert printed["p.bytes"] == {"$bytes": "AP4="}
    assert printed["p.nested"] == {"l": [1, 1.5, None, {"$bytes": "Yg=="}, "s"]}


def test_values_keep_their_shape_between_this_client_and_the_swift_librarys_codable_types(daemon: Daemon) -> None:
    """The Swift library maps Codable types (structs, arrays, dictionaries, Data, optionals) to
    wire values; a struct it writes reads back here as the dict it is, and the dict written here
    decodes there as the same struct (beacon-client-probe's Sample)."""
    probe = [os.path.join(BIN_DIR, "beacon-client-probe"), "--runtime-dir", daemon.runtime_dir]
    expected: Dict[str, Any] = {"name": "sensor-7 \u2713", "count": -42, "ratio": 0.25, "enabled": True, "tags": ["a", "b"],
                "limits": {"lo": 1, "hi": 9}, "blob": b"\x00\x01\xfe\xff", "nested": {"level": 3, "points": [1.5, -2.0]}}
    wrote = subprocess.run(probe + ["--codable-write", "cod.swift"], capture_output=True, text=True, timeout=60)
    assert wrote.returncode == 0 and wrote.stdout.startswith("WROTE"), wrote
    client = daemon.client()
    value = must(client.get("cod.swift")).value
    assert value == expected  # the optional left out, as Swift's Codable leaves out a nil
    assert type(value["count"]) is int and type(value["ratio"]) is float and type(value["nested"]["points"][1]) is float
    assert type(value["blob"]) is bytes
    client.set("cod.python", dict(expected, note=None))
    read = subprocess.run(probe + ["--codable-read", "cod.python"], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0 and read.stdout.strip() == "MATCH", read


def test_a_key_file_keeps_the_hash_signs_of_z85_keys(tmp_path: Path) -> None:
    from beacon_signals.endpoints import read_key_file
    key = "a#b" + "c" * 37
    path = tmp_path / "k.key"
    path.write_text(f"# a comment\npublic = {key}   # the public key\nsecret = {'#' * 40}\n")
    assert read_key_file(str(path)) == {"public": key, "secret": "#" * 40}
