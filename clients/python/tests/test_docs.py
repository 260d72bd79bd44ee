"""Every promise of docs/PYTHON.md, and the test that holds it (this module's, or the one named).

Introduction
- typed, ``py.typed``, ``mypy --strict`` on the package, its tests and the examples:
  test_mypy_strict_passes_on_the_package_its_tests_and_the_examples,
  test_the_install_builds_outside_the_tree_and_ships_its_types
- revision order, each change once, gaps repaired, no part of a transaction, never back, resume
  from a cache with the changes since: test_mirror.py (test_transactions_arrive_whole_through_drops_and_a_frozen_client,
  test_a_followed_history_skips_nothing_through_drops, test_a_mirror_never_goes_back_across_kill_9_and_a_restart,
  test_a_restarted_client_resumes_from_its_cache_with_a_delta, test_a_late_joiner_under_load_loses_nothing)

Install
- the build writes nothing into the checkout: test_the_install_builds_outside_the_tree_and_ships_its_types

Example
- it runs as written; the callback sees the transaction as one update; after the block every
  callback has run: test_the_examples_run_as_written

Connecting
- found as ``beacon`` finds the daemon; the request endpoint implies the publish endpoint, or a
  Mirror/History refuses: test_client.py::test_endpoints_are_found_as_the_command_line_tool_finds_them,
  test_contract.py::test_with_only_beacon_endpoint_set_a_mirror_sees_live_changes,
  test_contract.py::test_a_request_endpoint_implies_its_publish_endpoint_or_a_mirror_is_refused
- CURVE over tcp from a key and a key file: test_client.py::test_curve_over_tcp_with_a_listed_key,
  test_client.py::test_a_key_file_keeps_the_hash_signs_of_z85_keys
- a context manager; close(); a request after it raises BeaconError; threads take turns:
  test_a_closed_client_refuses_requests_and_threads_that_share_one_take_turns

Reads and writes
- get/list/set/delete/versions: test_client.py::test_writes_reads_and_versions
- consistent reads and sync: test_client.py::test_consistent_reads_at_a_primary_are_its_reads_and_sync_names_its_head,
  test_client.py::test_a_relays_consistent_read_sees_the_write_its_upstream_acknowledged (etcd fronts:
  Tests/BeaconEndToEndTests/EtcdConsistencyTests.swift, through the same wire fields)
- transactions (txn.result once committed) and batches: test_client.py::test_a_transaction_is_one_revision_and_a_batch_answers_each_request,
  test_a_transactions_result_is_there_once_it_is_committed
- sessions and TTLs: test_client.py::test_ttls_and_sessions
- history page by page: test_client.py::test_history_pages_through_every_change
- snapshot: test_a_snapshot_is_every_key_at_one_revision
- values both ways, other types refused with nothing written, Codable: test_values.py,
  test_contract.py::test_a_value_of_another_type_is_refused_and_nothing_is_stored,
  test_client.py::test_values_keep_their_shape_between_this_client_and_the_swift_librarys_codable_types,
  test_client.py::test_values_written_by_the_cli_read_back_here_and_the_other_way
- a write sent again after a silence, applied once; write_timeout then Unavailable; a relay's
  UPSTREAM_UNAVAILABLE sent again: test_client.py::test_a_write_the_daemon_does_not_answer_is_sent_again_and_applied_once,
  test_client.py::test_no_daemon_is_unavailable_quickly,
  test_client.py::test_a_write_through_a_relay_waits_out_its_upstream_and_is_applied_once
- a write the program sends again with the same write_id is answered with that write's result
  (replayed), str or bytes: test_a_write_id_sent_again_is_answered_with_that_writes_result
- reads wait timeout seconds and raise Unavailable: test_client.py::test_no_daemon_is_unavailable_quickly
- history ranges include both ends; exact is one key: test_history_ranges_include_both_ends_and_exact_is_one_key

Errors
- Refused's code and details, retryable: test_client.py::test_refusals_carry_the_protocols_code_and_details,
  test_retryable_is_true_for_read_only
- all are BeaconErrors; ConfigurationError for an endpoint that cannot be used: test_every_error_is_a_beacon_error

Mirrors
- whole revisions, one update per revision in order, the first sync one resync update:
  test_mirror.py::test_a_mirror_follows_and_reads_its_writes, test_mirror.py::test_transactions_arrive_whole_through_drops_and_a_frozen_client
- a slow callback misses nothing: test_mirror.py::test_transactions_arrive_whole_through_drops_and_a_frozen_client
- callbacks on an asyncio loop with loop=: test_mirror.py::test_updates_on_an_asyncio_loop_and_a_stale_daemon
- any thread: test_a_mirror_is_read_from_many_threads_while_it_follows
- a read-only mapping: test_asyncio.py::test_a_mirror_is_a_read_only_mapping
- wait_synced/wait_until True, False after the timeout, raise what stopped the mirror:
  test_waits_return_false_once_the_time_is_up_and_raise_what_stopped_the_mirror,
  test_contract.py::test_a_mirror_from_another_journals_cache_is_synced_only_with_this_daemons_state
- status, stale after three heartbeats: test_mirror.py::test_updates_on_an_asyncio_loop_and_a_stale_daemon
- cache: test_mirror.py::test_a_restarted_client_resumes_from_its_cache_with_a_delta
- gaps and every_revision: test_mirror.py::test_a_followed_history_skips_nothing_through_drops
- a new journal is a resync: test_mirror.py::test_a_replaced_journal_is_an_explicit_resync
- one key's name as a prefix: test_asyncio.py::test_a_mirror_is_a_read_only_mapping
- start=False; close() keeps the state readable: test_a_mirror_made_with_start_false_follows_once_started

History
- replay then live, each once, in order; close(); async for: test_mirror.py::test_a_followed_history_replays_then_goes_live_as_an_iterator_and_an_async_iterator
- a Resync where history was compacted; without follow it ends at the head:
  test_asyncio.py::test_history_without_follow_ends_and_with_follow_reports_a_resync_where_history_was_compacted

asyncio
- the same requests as coroutines, async with: test_asyncio.py::test_every_request_is_a_coroutine
- concurrent tasks take turns: test_asyncio.py::test_concurrent_tasks_on_one_client_take_turns
- a cancelled request ends at once and drops its connection: test_asyncio.py::test_a_cancelled_request_ends_at_once_and_leaves_the_client_usable
- writes sent again across kill -9: test_asyncio.py::test_a_write_sent_while_the_daemon_is_killed_lands_once_after_its_restart
- AsyncMirror, updates(), waits: test_asyncio.py::test_an_async_mirror_yields_whole_revisions_across_kill_9_and_is_a_mapping
- breaking off or cancelling leaves nothing behind: test_asyncio.py::test_cancelling_an_async_for_over_a_mirror_or_a_history_ends_cleanly,
  test_contract.py::test_cancelling_an_async_for_over_a_history_lets_the_program_end
- the example runs as written: test_the_examples_run_as_written
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from beacon_signals import BeaconError, Client, ConfigurationError, Mirror, Refused, Unavailable, WriteResult
from beacon_signals import beacon_pb2 as pb

from conftest import HERE, REPO, Daemon, must

PACKAGE = os.path.dirname(HERE)
DOCS = os.path.join(REPO, "docs", "PYTHON.md")


def examples() -> List[str]:
    """The docs' Python examples, in order."""
    with open(DOCS, encoding="utf-8") as file:
        return [block.split("```", 1)[0] for block in file.read().split("```python\n")[1:]]


def test_the_examples_run_as_written(daemon: Daemon) -> None:
    first, asynchronous = examples()
    environment = dict(os.environ, BEACON_RUNTIME_DIR=daemon.runtime_dir, PYTHONPATH=PACKAGE)
    for key in ("BEACON_ENDPOINT", "BEACON_PUB_ENDPOINT"):
        environment.pop(key, None)
    run = subprocess.run([sys.executable, "-c", first], env=environment, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == "0 {}" and lines[2] == "online", lines
    assert lines[1].endswith("{'net.wifi.ssid': 'lab', 'app.mode': 'online'}"), "the transaction, whole, in one update"
    run = subprocess.run([sys.executable, "-c", asynchronous], env=environment, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    written = must(daemon.client().get("sensor.t"))
    assert run.stdout.splitlines() == [f"{written.mod_revision} {{'sensor.t': 21.5}}"]


def test_mypy_strict_passes_on_the_package_its_tests_and_the_examples(tmp_path: Path) -> None:
    mypy = shutil.which("mypy")
    assert mypy, "mypy is needed (Debian's mypy package; make deps installs it)"
    paths = []
    for index, example in enumerate(examples()):
        path = tmp_path / f"example_{index}.py"
        path.write_text(example, encoding="utf-8")
        paths.append(str(path))
    checked = subprocess.run([mypy, "--strict", "--cache-dir", str(tmp_path / "cache"), "beacon_signals", "tests", *paths],
                             cwd=PACKAGE, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_install_builds_outside_the_tree_and_ships_its_types(tmp_path: Path) -> None:
    before = subprocess.run(["git", "status", "--porcelain", "--ignored", "."], cwd=PACKAGE, capture_output=True, text=True).stdout
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."],
                           cwd=PACKAGE, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    after = subprocess.run(["git", "status", "--porcelain", "--ignored", "."], cwd=PACKAGE, capture_output=True, text=True).stdout
    assert after == before, "the build wrote into the checkout"
    (wheel,) = tmp_path.glob("beacon_signals-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(name for name in names if name.endswith("METADATA"))).decode()
    assert {"beacon_signals/py.typed", "beacon_signals/asyncio.py", "beacon_signals/beacon_pb2.pyi"} <= names
    assert "Classifier: Typing :: Typed" in metadata and "Requires-Dist: pyzmq" in metadata


def test_a_closed_client_refuses_requests_and_threads_that_share_one_take_turns(daemon: Daemon) -> None:
    with daemon.client() as client:
        results: List[WriteResult] = []
        lock = threading.Lock()

        def write(start: int) -> None:
            for index in range(start, start + 25):
                result = client.set(f"t.{index}", index)
                with lock:
                    results.append(result)

        threads = [threading.Thread(target=write, args=(start,)) for start in range(0, 100, 25)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(result.revision for result in results) == list(range(1, 101))
        assert client.list("t.", True) == sorted(f"t.{index}" for index in range(100))
    with pytest.raises(BeaconError, match="closed"):
        client.get("t.1")


def test_a_write_id_sent_again_is_answered_with_that_writes_result(daemon: Daemon) -> None:
    client = daemon.client()
    first = client.set("w.k", 1, write_id="order-17")
    client.set("w.k", 2)
    again = client.set("w.k", 1, write_id=b"order-17")  # the same id, as bytes
    assert again.replayed and (again.revision, again.version) == (first.revision, first.version)
    assert must(client.get("w.k")).value == 2, "not applied twice"
    deleted = client.delete("w.k", write_id="drop-1")
    assert client.delete("w.k", write_id="drop-1") == WriteResult(deleted.revision, deleted.versions, True)
    txn = client.transaction().set("w.t", 1)
    committed = txn.commit(write_id="txn-1")
    assert client.transaction().set("w.t", 1).commit(write_id="txn-1").replayed and committed.revision > 0


def test_a_transactions_result_is_there_once_it_is_committed(daemon: Daemon) -> None:
    txn = daemon.client().transaction().set("r.k", 1)
    assert not txn.committed
    with pytest.raises(BeaconError, match="not been committed"):
        txn.result
    assert txn.commit() == txn.result and txn.committed


def test_a_snapshot_is_every_key_at_one_revision(daemon: Daemon) -> None:
    client = daemon.client()
    for start in range(0, 2500, 500):  # more than one page
        batch = client.batch()
        for index in range(start, start + 500):
            batch.set(f"s.{index:04}", index)
        batch.send()
    client.set("other.k", 1)
    snapshot = client.snapshot("s.")
    assert len(snapshot.state) == 2500 and snapshot.state["s.2499"].value == 2499
    assert snapshot.revision == client.ping().head_revision and snapshot.epoch == client.ping().epoch


def test_history_ranges_include_both_ends_and_exact_is_one_key(daemon: Daemon) -> None:
    client = daemon.client()
    revisions = [client.set("h.k" if index % 2 == 0 else "h.kk", index).revision for index in range(6)]
    between = list(client.history("h.", from_revision=revisions[1], to_revision=revisions[4]))
    assert [event.revision for event in between] == revisions[1:5]
    exact = list(client.history("h.k", exact=True))
    assert [event.key for event in exact] == ["h.k"] * 3
    assert [event.revision for event in client.history("h.")] == revisions, "0 and 0: the oldest kept through the head"


def test_retryable_is_true_for_read_only() -> None:
    assert Refused(pb.Error(code=pb.Error.READ_ONLY)).retryable
    assert Refused(pb.Error(code=pb.Error.RATE_LIMITED)).retryable
    assert Refused(pb.Error(code=pb.Error.UPSTREAM_UNAVAILABLE)).retryable
    assert not Refused(pb.Error(code=pb.Error.PERMISSION_DENIED)).retryable


def test_every_error_is_a_beacon_error(tmp_path: Path) -> None:
    assert issubclass(Refused, BeaconError) and issubclass(Unavailable, BeaconError)
    with pytest.raises(ConfigurationError) as refused:
        Client(endpoint="udp://nowhere")
    assert isinstance(refused.value, BeaconError) and isinstance(refused.value, ValueError)


def test_a_mirror_is_read_from_many_threads_while_it_follows(daemon: Daemon) -> None:
    client = daemon.client()
    with Mirror(client, "m.") as mirror:
        assert mirror.wait_synced(30)
        problems: List[str] = []
        stop = threading.Event()

        def read() -> None:
            last = 0
            while not stop.is_set():
                revision, state = mirror.view()
                if revision < last:
                    problems.append(f"went back from {last} to {revision}")
                if state and max(entry.mod_revision for entry in state.values()) > revision:
                    problems.append("a view holds a change past its revision")
                last = revision
                len(mirror), list(mirror), "m.0" in mirror

        readers = [threading.Thread(target=read) for _ in range(4)]
        for reader in readers:
            reader.start()
        last = None
        for index in range(300):
            last = client.set(f"m.{index % 7}", index)
        assert last is not None and mirror.wait_until(last.revision, 30)
        stop.set()
        for reader in readers:
            reader.join(30)
        assert problems == []


def test_waits_return_false_once_the_time_is_up_and_raise_what_stopped_the_mirror(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(config="allow = uid:0 read=open. write=open.\n")
    client = daemon.client()
    with Mirror(client, "open.") as mirror:
        assert mirror.wait_synced(30)
        assert not mirror.wait_until(mirror.revision + 1000, 0.05)
    with Mirror(client, "closed.") as refused:
        with pytest.raises(Refused) as stopped:
            refused.wait_synced(30)
        assert stopped.value.code == "PERMISSION_DENIED"
        with pytest.raises(Refused):
            refused.wait_until(1, 30)


def test_a_mirror_made_with_start_false_follows_once_started(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("q.k", 1)
    seen: Dict[int, bool] = {}
    mirror = Mirror(client, "q.", start=False)
    mirror.on_change(lambda update: seen.update({update.revision: update.resync}))
    assert not mirror.wait_synced(0.2) and mirror.status == "connecting" and len(mirror) == 0
    mirror.start()
    assert mirror.wait_synced(30) and mirror["q.k"].value == 1
    written = client.set("q.k", 2)
    assert mirror.wait_until(written.revision, 30)
    mirror.close()
    assert seen and all(revision <= written.revision for revision in seen), "every callback due has run"
    assert written.revision in seen and mirror["q.k"].value == 2, "the state read so far stays readable"
