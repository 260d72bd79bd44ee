"""Mirrors and followed history against real daemons and real faults: drops at a tiny high-water
mark, a frozen client, kill -9, a replaced journal, a restart from the local cache."""

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from beacon_signals import LIVE, STALE, Event, Mirror, Outcome, Update, WriteResult

from conftest import HERE, Daemon, must, process_state, wait_for

TINY = "publish_hwm = 10\n"


def revision_of(outcome: Outcome) -> int:
    """The revision of a batch's write."""
    assert isinstance(outcome, WriteResult), outcome
    return outcome.revision


class Child:
    """tests/follow_child.py in a process of its own: a mirror or a followed history that prints
    each update as a JSON line."""

    def __init__(self, daemon: Daemon, mode: str, prefixes: List[str], receive_hwm: int = 10) -> None:
        self.process = subprocess.Popen([sys.executable, os.path.join(HERE, "follow_child.py"), daemon.runtime_dir, mode,
                                         str(receive_hwm), *prefixes], stdout=subprocess.PIPE, text=True)
        self.lines: queue.SimpleQueue[Dict[str, Any]] = queue.SimpleQueue()
        self.seen: List[Dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def take(self, until: Callable[[Dict[str, Any]], bool], timeout: float = 60) -> Dict[str, Any]:
        """Collects lines until `until(line)` is true for one of them; returns it."""
        def arrived() -> Optional[Dict[str, Any]]:
            while not self.lines.empty():
                line = self.lines.get()
                self.seen.append(line)
                if until(line):
                    return line
            return None
        return wait_for(arrived, timeout, what="the child's updates")

    def _state(self) -> Optional[str]:
        return process_state(self.process.pid)

    def freeze(self) -> None:
        """Stops the child (SIGSTOP) and waits until it is stopped."""
        self.process.send_signal(signal.SIGSTOP)
        wait_for(lambda: self._state() == "T", what="the child to stop")

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        wait_for(lambda: self._state() != "T", what="the child to run again")

    def stop(self) -> None:
        self.thaw()
        self.process.terminate()
        self.process.wait(30)


def test_a_mirror_follows_and_reads_its_writes(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("app.before", 1)
    updates: List[Update] = []
    with Mirror(client, ["app.", "net."], on_change=updates.append) as mirror:
        assert mirror.wait_synced(30) and mirror.status == LIVE
        assert mirror.get("app.before").value == 1
        write = client.set("app.after", "x")
        assert mirror.wait_until(write.revision, 30)
        assert mirror.get("app.after").value == "x", "read-your-writes: the write is there once the mirror reaches its revision"
        outside = client.set("other.k", 1)
        assert mirror.wait_until(outside.revision, 30), "a heartbeat carries the mirror past revisions outside its prefixes"
        with client.transaction() as txn:
            txn.set("app.t", 1).set("net.t", 2).delete("app.before")
        assert mirror.wait_until(txn.result.revision, 30)
        wait_for(lambda: any(update.revision == txn.result.revision for update in updates))
        whole = next(update for update in updates if update.revision == txn.result.revision)
        assert whole.changes.keys() == {"app.t", "net.t", "app.before"} and whole.changes["app.before"] is None
        revision, state = mirror.view()
        assert revision >= txn.result.revision and set(state) == {"app.after", "app.t", "net.t"}


def test_transactions_arrive_whole_through_drops_and_a_frozen_client(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(config=TINY)
    client = daemon.client()
    child = Child(daemon, "mirror", ["a.", "b."], receive_hwm=10)
    try:
        child.take(lambda line: "synced" in line)
        for round_ in range(6):
            if round_ % 2 == 0:
                child.freeze()  # the daemon drops what the frozen mirror does not read
            for index in range(round_ * 200, round_ * 200 + 200):
                # Large enough that what the frozen mirror does not read overflows the socket buffers.
                value: Dict[str, Any] = {"i": index, "pad": "x" * 2000}
                with client.transaction() as txn:
                    txn.set(f"a.k{index % 13}", value).set(f"b.k{index % 13}", value).set(f"c.k{index % 5}", index)
            child.thaw()
        head = txn.result.revision
        last = child.take(lambda line: bool(line.get("revision", 0) >= head))
        updates = [line for line in child.seen if "revision" in line]
        assert last["counters"]["repairs"] > 0, "drops happened and were repaired"
        revisions = [update["revision"] for update in updates]
        assert revisions == sorted(set(revisions)), "revisions in order, each once"
        for update in updates:
            if update["resync"]:
                continue
            seen = {key[0]: value["i"] for key, value in update["changes"].items()}
            assert seen.keys() == {"a", "b"} and seen["a"] == seen["b"], f"a transaction split: {update['revision']} {seen}"
        mirror_state = {}
        for update in updates:
            for key, value in update["changes"].items():
                if value is None:
                    mirror_state.pop(key, None)
                else:
                    mirror_state[key] = value
        truth = {key: entry.value for prefix in ("a.", "b.") for key, entry in client.list(prefix).items()}
        assert mirror_state == truth
    finally:
        child.stop()


def test_a_followed_history_skips_nothing_through_drops(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(config=TINY)
    client = daemon.client()
    client.set("h.k", -1)
    child = Child(daemon, "history", ["h."], receive_hwm=10)
    try:
        child.take(lambda line: bool(line["revision"] >= 1))
        written = []
        for round_ in range(4):
            child.freeze()
            batch = client.batch()
            for index in range(round_ * 300, round_ * 300 + 300):
                batch.set(f"h.k{index % 3}", index)
            written += [revision_of(outcome) for outcome in batch.send()]
            child.thaw()
        child.take(lambda line: bool(line["revision"] >= written[-1]))
        events = [line for line in child.seen if not line["resync"]]
        assert [event["revision"] for event in events] == [1] + written, "every revision, in order, once"
        assert [event["value"] for event in events[1:]] == list(range(1200))
    finally:
        child.stop()


def test_a_mirror_never_goes_back_across_kill_9_and_a_restart(daemon: Daemon) -> None:
    client = daemon.client()
    updates: List[Update] = []
    with Mirror(client, ["k."], on_change=updates.append) as mirror:
        mirror.wait_synced(30)
        for index in range(50):
            client.set(f"k.{index % 4}", index)
        seen = [mirror.revision]
        daemon.restart(signal.SIGKILL)
        watcher_stop = threading.Event()

        def watch() -> None:
            while not watcher_stop.is_set():
                seen.append(mirror.revision)
                watcher_stop.wait(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        client = daemon.client()
        for index in range(50, 100):
            last = client.set(f"k.{index % 4}", index)
        assert mirror.wait_until(revision_of(last), 30)
        watcher_stop.set()
        watcher.join()
        assert seen == sorted(seen), "the mirror's revision never went back"
        revisions = [update.revision for update in updates]
        assert revisions == sorted(set(revisions))
        assert {key: entry.value for key, entry in mirror.view()[1].items()} == {f"k.{i}": 96 + i for i in range(4)}


def test_a_restarted_client_resumes_from_its_cache_with_a_delta(daemon: Daemon, tmp_path: Path) -> None:
    client = daemon.client()
    cache = str(tmp_path / "mirror.db")
    for index in range(20):
        client.set(f"r.{index}", index)
    with Mirror(client, ["r."], cache=cache) as mirror:
        assert mirror.wait_synced(30) and len(mirror.view()[1]) == 20
    for index in range(20, 30):
        client.set(f"r.{index}", {"n": [index, float(index), b"x"]})
    client.delete("r.0")
    with Mirror(client, ["r."], cache=cache) as resumed:
        assert resumed.wait_synced(30)
        assert resumed.get("r.5").value == 5, "the cached state is there at once"
        head = client.ping().head_revision
        assert resumed.wait_until(head, 30)
        assert resumed.counters["snapshots"] == 0 and resumed.counters["deltas"] >= 1, resumed.counters
        assert {key: entry.value for key, entry in resumed.view()[1].items()} == \
            {key: entry.value for key, entry in client.list("r.").items()}
        assert resumed.get("r.25").value == {"n": [25, 25.0, b"x"]}


def test_a_late_joiner_under_load_loses_nothing(daemon: Daemon) -> None:
    client = daemon.client()
    writer_client = daemon.client()
    stop = threading.Event()

    def write() -> None:
        index = 0
        while not stop.is_set():
            batch = writer_client.batch()
            for _ in range(50):
                batch.set(f"l.k{index % 37}", index)
                index += 1
            batch.send()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_for(lambda: client.ping().head_revision > 2000, what="load")
        updates: List[Update] = []
        with Mirror(client, ["l."], on_change=updates.append) as mirror:
            mirror.wait_synced(30)
            stop.set()
            writer.join()
            head = client.ping().head_revision
            assert mirror.wait_until(head, 60)
            assert {key: entry.value for key, entry in mirror.view()[1].items()} == \
                {key: entry.value for key, entry in client.list("l.").items()}
            revisions = [update.revision for update in updates]
            assert revisions == sorted(set(revisions))
    finally:
        stop.set()
        writer.join()


def test_a_replaced_journal_is_an_explicit_resync(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("j.old", 1)
    updates: List[Update] = []
    with Mirror(client, ["j."], on_change=updates.append) as mirror:
        mirror.wait_synced(30)
        daemon.stop()
        for name in os.listdir(daemon.state_dir):
            os.remove(os.path.join(daemon.state_dir, name))
        daemon.start()
        client = daemon.client()
        client.set("j.new", 2)
        wait_for(lambda: any(update.resync for update in updates[1:]), what="the resync")
        wait_for(lambda: mirror.get("j.new") is not None, what="the new journal's key")
        resync = next(update for update in updates[1:] if update.resync)
        assert resync.changes.get("j.old", "absent") is None, "the old journal's key is gone, said so"
        assert set(mirror.view()[1]) == {"j.new"}


def test_updates_on_an_asyncio_loop_and_a_stale_daemon(daemon: Daemon) -> None:
    client = daemon.client()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        arrived: asyncio.Queue[Update] = asyncio.Queue()
        mirror = Mirror(client, ["x."], loop=loop, on_change=arrived.put_nowait)
        try:
            await loop.run_in_executor(None, mirror.wait_synced, 30)
            await loop.run_in_executor(None, client.set, "x.a", 1)
            first = await asyncio.wait_for(arrived.get(), 30)
            assert first.resync and first.changes == {}, "the first sync: an empty prefix"
            update = await asyncio.wait_for(arrived.get(), 30)
            assert must(update.changes["x.a"]).value == 1 and not update.resync
            daemon.pause()
            await loop.run_in_executor(None, lambda: wait_for(lambda: mirror.status == STALE, what="stale"))
            daemon.resume()
            await loop.run_in_executor(None, lambda: wait_for(lambda: mirror.status == LIVE, what="live again"))
        finally:
            daemon.resume()
            mirror.close()

    asyncio.run(run())


@pytest.mark.parametrize("bundles", [True, False])
def test_bundles_or_diffs_alike(daemon: Daemon, bundles: bool) -> None:
    client = daemon.client()
    with Mirror(client, ["u."], bundles=bundles) as mirror:
        mirror.wait_synced(30)
        batch = client.batch()
        for index in range(500):
            batch.set(f"u.{index % 9}", index)
        last = batch.send()[-1]
        assert mirror.wait_until(revision_of(last), 30)
        last_of_each = {f"u.{index % 9}": index for index in range(500)}
        assert {key: entry.value for key, entry in mirror.view()[1].items()} == last_of_each


def test_a_followed_history_replays_then_goes_live_as_an_iterator_and_an_async_iterator(daemon: Daemon) -> None:
    from beacon_signals import History
    client = daemon.client()
    written = [client.set("f.k", index).revision for index in range(3)]
    history = History(client, "f.", from_revision=written[1])
    seen: List[Tuple[int, Any]] = []
    for event in history:
        assert isinstance(event, Event)
        seen.append((event.revision, event.value))
        if len(seen) == 2:
            written.append(client.set("f.k", 3).revision)  # live, after the replay
        if len(seen) == 3:
            history.close()
    assert seen == [(written[1], 1), (written[2], 2), (written[3], 3)]

    async def follow() -> List[Any]:
        streamed = History(client, "f.", from_revision=written[0])
        values: List[Any] = []
        async for event in streamed:
            assert isinstance(event, Event)
            values.append(event.value)
            if len(values) == 4:
                streamed.close()
        return values

    assert asyncio.run(follow()) == [0, 1, 2, 3]
