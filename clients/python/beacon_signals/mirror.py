"""Mirrors: a local, read-only copy of one or more prefixes, kept by the rules of PROTOCOL.md §6,
that changes only by whole revisions."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Type, TypeVar, Union

import zmq

from . import beacon_pb2 as pb
from .cache import MirrorCache
from .client import Client
from .errors import BeaconError, ConfigurationError, Refused, Unavailable
from .follower import PrefixFollower
from .operations import Entry, Event, Resync
from .values import from_wire

C = TypeVar("C", bound=Callable[["Update"], Any])

CONNECTING, SYNCING, LIVE, STALE = "connecting", "syncing", "live", "stale"


@dataclass(frozen=True)
class Update:
    """What one revision changed in a mirror: each key's new :class:`Entry`, or None where it
    was deleted. ``resync``: the mirror took the daemon's state anew (its first sync, a new
    journal, history compacted away) and this is the difference, all at once."""

    revision: int
    changes: Dict[str, Optional[Entry]]
    resync: bool = False
    events: Tuple[Event, ...] = field(default=(), repr=False)


@dataclass
class _Pending:
    """A revision collected by the followers of the prefixes it touched, waiting to be whole."""

    events: Dict[Tuple[int, int], pb.Event] = field(default_factory=dict)  # (revision, part) -> event
    snapshots: List[Tuple[str, Dict[str, Entry]]] = field(default_factory=list)  # taken at this revision


def _entry(key: str, event: pb.Event) -> Optional[Entry]:
    change = event.change
    if change.kind != pb.Change.PUT:
        return None
    return Entry(key, from_wire(change.value), change.version, change.create_revision, event.revision,
                 change.expires_at_ms, event.timestamp_ms)


class Mirror(Mapping[str, Entry]):
    """A read-only copy of the keys under `prefixes`, following the daemon live.

    A read-only mapping of each key to its :class:`Entry`: ``mirror["k"]`` (``KeyError`` for a
    key it does not hold), ``"k" in mirror``, ``len(mirror)``, ``for key in mirror`` (the keys
    of one revision), ``keys()``, ``items()``, ``values()``. A mirror of an exact key is a
    mirror of a prefix that is that key: it holds that key and any key that starts with it.

    It subscribes, takes a snapshot (or, with a ``cache`` file that holds an earlier copy, only
    the changes since), repairs every gap it detects from the journal, and applies each revision
    only once it is whole for every prefix it touched: a transaction written elsewhere is never
    seen in part. ``on_change`` callbacks get one :class:`Update` per revision, in order, on the
    mirror's delivery thread, or on ``loop`` (an asyncio event loop) when one is given.

    ``get``, ``view``, ``revision`` and the mapping read the state as of the last revision applied.
    Every method may be called from any thread.
    ``status`` is ``"connecting"`` (no state yet), ``"syncing"`` (repairing), ``"live"`` or
    ``"stale"`` (the daemon has not been heard from for three heartbeat intervals).

    A gap is repaired with the changes since, or — when they outnumber the keys — with the
    state anew (an :class:`Update` with ``resync``); with ``every_revision`` always with the
    changes, so that every revision is delivered (history needs that; a mirror seldom does).
    """

    def __init__(self, client: Client, prefixes: Union[str, Iterable[str]], *,
                 on_change: Optional[Callable[[Update], Any]] = None, loop: Optional[asyncio.AbstractEventLoop] = None,
                 cache: Optional[str] = None, receive_hwm: int = 1000, bundles: bool = True, every_revision: bool = False,
                 start: bool = True) -> None:
        if isinstance(prefixes, str):
            prefixes = [prefixes]
        if client.endpoints.publish is None:
            raise ConfigurationError(f"a mirror needs the daemon's publish endpoint, which {client.endpoints.request} does not imply: "
                                     "give pub_endpoint= (or $BEACON_PUB_ENDPOINT)")
        self._prefixes = list(dict.fromkeys(prefixes))
        self._requests = Client(context=client._context, endpoint=client.endpoints.request,
                                pub_endpoint=client.endpoints.publish, timeout=client.timeout,
                                write_timeout=client.write_timeout)
        self._requests.endpoints = client.endpoints  # the same daemon, the same credentials
        self._publish: str = client.endpoints.publish
        self._context = client._context
        self._receive_hwm = receive_hwm
        self._want_bundles = bundles
        self._every_revision = every_revision
        self._loop = loop
        self._callbacks: List[Callable[[Update], Any]] = [on_change] if on_change else []
        self._cache = MirrorCache(cache, self._prefixes) if cache else None
        self._followers = {prefix: PrefixFollower(prefix) for prefix in self._prefixes}
        self._pending: Dict[int, _Pending] = {}
        self._pending_epoch: Optional[int] = None
        self._lock = threading.Condition()
        self._state: Dict[str, Entry] = {}
        self._revision = 0
        self._epoch: Optional[int] = None
        self._status = CONNECTING
        # Whether the state has been the daemon's own (live) since start: a cache's copy is not.
        self._synced = False
        self._last_heard = time.monotonic()
        self._heartbeat_interval = 1.0
        self._deliveries: queue.SimpleQueue[Optional[Update]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._error: Optional[BeaconError] = None
        # Told, under the lock, whenever the state, the status or the error changed (asyncio waiters).
        self._wakers: List[Callable[[], None]] = []
        #: What the mirror did, for tests and diagnostics.
        self.counters = {"snapshots": 0, "deltas": 0, "repairs": 0, "resyncs": 0, "revisions": 0}
        self._thread = threading.Thread(target=self._run, name="beacon-mirror", daemon=True)
        self._delivery_thread = threading.Thread(target=self._deliver, name="beacon-mirror-delivery", daemon=True)
        if start:
            self.start()

    # -- public

    def start(self) -> None:
        """Starts following (done at construction unless ``start=False``)."""
        self._thread.start()
        if self._loop is None:
            self._delivery_thread.start()

    def close(self) -> None:
        """Stops following; the state read so far stays readable. Callbacks already due have
        run when it returns (without ``loop=``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._deliveries.put(None)
        if self._delivery_thread.is_alive():
            self._delivery_thread.join()
        self._requests.close()
        if self._cache:
            self._cache.close()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.close()

    def on_change(self, callback: C) -> C:
        """Adds a callback for each :class:`Update` from now on; returns it (usable as a decorator)."""
        self._callbacks.append(callback)
        return callback

    @property
    def revision(self) -> int:
        """The revision the mirror's state is complete through."""
        with self._lock:
            return self._revision

    @property
    def status(self) -> str:
        """``"connecting"``, ``"syncing"``, ``"live"`` or ``"stale"``."""
        with self._lock:
            if self._status == LIVE and time.monotonic() - self._last_heard > 3 * self._heartbeat_interval:
                return STALE
            return self._status

    def get(self, key: str, default: Any = None) -> Any:
        """The key's :class:`Entry` in the mirror, or `default`."""
        with self._lock:
            return self._state.get(key, default)

    def __getitem__(self, key: str) -> Entry:
        with self._lock:
            return self._state[key]

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._state

    def __len__(self) -> int:
        with self._lock:
            return len(self._state)

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._state))

    def view(self) -> Tuple[int, Dict[str, Entry]]:
        """``(revision, {key: Entry})``: a copy of the whole state at one revision."""
        with self._lock:
            return self._revision, dict(self._state)

    def wait_until(self, revision: int, timeout: float = 10.0) -> bool:
        """Waits until the mirror is in sync with the daemon and complete through `revision` (a
        write's, to read it back). Returns True then, at once if it already is; False if
        `timeout` seconds passed first. Raises what stopped the mirror, if it stopped."""
        return self._wait(self._through_condition(revision), timeout)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        """Waits until the mirror's state is the daemon's: its first snapshot, or a cache's copy
        brought up to date (or replaced, if it came from another journal). Returns True then;
        False if `timeout` seconds passed first."""
        return self._wait(self._synced_condition, timeout)

    def _synced_condition(self) -> bool:
        return self._synced

    def _through_condition(self, revision: int) -> Callable[[], bool]:
        return lambda: self._synced and self._revision >= revision

    def _holds(self, condition: Callable[[], bool]) -> bool:
        """Whether `condition()` holds now; raises what stopped the mirror."""
        with self._lock:
            if condition():
                return True
            if self._error is not None:
                raise self._error
            return False

    def _wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Waits, holding the lock between checks, until `condition()`; raises what stopped the mirror."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not condition():
                if self._error is not None:
                    raise self._error
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.1))
            return True

    # -- the I/O thread

    def _run(self) -> None:
        socket: Optional[zmq.Socket[Any]] = None
        try:
            while not self._stop.is_set():
                try:
                    socket = self._open(socket)
                    self._follow(socket)
                except Unavailable:
                    self._set_status(SYNCING if self._status != CONNECTING else CONNECTING)
                    self._stop.wait(0.1)  # the daemon is away: try again
        except BaseException as error:  # a refusal, or a bug: say so to whoever waits
            with self._lock:
                self._error = error if isinstance(error, BeaconError) else BeaconError(f"the mirror stopped: {error!r}")
                self._changed()
            if not isinstance(error, BeaconError):
                raise  # a bug: its traceback too
        finally:
            if socket is not None:
                socket.close(linger=0)

    def _open(self, socket: Optional[zmq.Socket[Any]]) -> zmq.Socket[Any]:
        if socket is not None:
            return socket
        ping = self._requests.ping()
        self._heartbeat_interval = max(ping.heartbeat_interval_ms, 10) / 1000
        bundles = self._want_bundles and ping.bundles
        socket = self._context.socket(zmq.SUB)
        assert socket is not None
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, self._receive_hwm)
        curve = self._requests.endpoints.curve
        if curve and self._publish.startswith("tcp://"):
            socket.curve_serverkey = curve.server_key.encode()
            socket.curve_publickey = curve.public_key.encode()
            socket.curve_secretkey = curve.secret_key.encode()
        socket.setsockopt(zmq.SUBSCRIBE, b"!")
        for prefix in self._prefixes:
            socket.setsockopt(zmq.SUBSCRIBE, f"#{prefix}#".encode() if bundles else prefix.encode())
        socket.connect(self._publish)
        # Resume from the cache's copy (a delta), or take the state anew (snapshots).
        if self._cache and self._epoch is None:
            cached = self._cache.load()
            if cached is not None:
                epoch, revision, state = cached
                with self._lock:
                    self._epoch, self._revision, self._state = epoch, revision, state
                for follower in self._followers.values():
                    follower.synced(epoch, revision)
                    follower.needs = "repair"
        return socket

    def _follow(self, socket: zmq.Socket[Any]) -> None:
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        while not self._stop.is_set():
            self._catch_up()
            if dict(poller.poll(100)).get(socket):
                for _ in range(1000):  # a run of messages, then the followers' needs again
                    try:
                        topic, body = socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._take(topic, body)
                    if any(follower.needs for follower in self._followers.values()):
                        break
            self._release()

    def _take(self, topic: bytes, body: bytes) -> None:
        self._last_heard = time.monotonic()
        if topic.startswith(b"!h"):
            heartbeat = pb.Heartbeat()
            heartbeat.ParseFromString(body)
            self._heartbeat_interval = max(heartbeat.interval_ms, 10) / 1000
            for follower in self._followers.values():
                follower.on_heartbeat(heartbeat)
        elif topic.startswith(b"!c"):
            marker = pb.CommitMarker()
            marker.ParseFromString(body)
            for follower in self._followers.values():
                follower.on_marker(marker)
        elif topic.startswith(b"#"):
            bundle = pb.Bundle()
            bundle.ParseFromString(body)
            for diff in bundle.diffs:
                self._take_diff(diff)
        elif not topic.startswith(b"!"):
            diff = pb.Diff()
            diff.ParseFromString(body)
            self._take_diff(diff)

    def _take_diff(self, diff: pb.Diff) -> None:
        key = diff.event.change.key
        for prefix, follower in self._followers.items():
            if key.startswith(prefix):
                events = follower.on_diff(diff)
                if events:
                    self._collect(events)

    def _collect(self, events: List[pb.Event]) -> None:
        pending = self._pending.setdefault(events[0].revision, _Pending())
        for event in events:
            pending.events[(event.revision, event.part)] = event

    def _catch_up(self) -> None:
        """Does what the followers need: a delta from where one stopped, or a snapshot."""
        for prefix, follower in self._followers.items():
            if follower.needs is None:
                continue
            if self._status == LIVE:
                self._set_status(SYNCING)
            if follower.needs == "repair" and follower.through is not None:
                self.counters["repairs"] += 1
                self._repair(follower)
            else:
                self._resync(prefix, follower)
        if all(follower.needs is None for follower in self._followers.values()) and self._status == SYNCING:
            self._set_status(LIVE)

    def _repair(self, follower: PrefixFollower) -> None:
        while follower.needs == "repair":
            try:
                reply = self._requests.call(delta=pb.Delta(prefix=follower.prefix, since_revision=follower.through,
                                                           snapshot_if_smaller=not self._every_revision))
            except Refused as refused:
                if refused.code in ("COMPACTED", "FUTURE_REVISION"):
                    follower.needs = "resync"
                    return
                raise
            self.counters["deltas"] += 1
            if reply.WhichOneof("result") == "snapshot":
                self._take_snapshot(follower, reply.snapshot)
                return
            events = reply.events
            if events.epoch != follower.epoch:
                follower.needs = "resync"
                return
            revision_events: List[pb.Event] = []
            for event in events.events:
                if revision_events and revision_events[0].revision != event.revision:
                    self._collect(revision_events)
                    revision_events = []
                revision_events.append(event)
            if revision_events:
                self._collect(revision_events)
            assert follower.epoch is not None and follower.through is not None  # a repair starts from a synced state
            follower.synced(follower.epoch, max(follower.through, events.revision))
            if events.more:
                follower.needs = "repair"

    def _resync(self, prefix: str, follower: PrefixFollower) -> None:
        self.counters["resyncs"] += 1
        reply = self._requests.call(snapshot=pb.Snapshot(prefix=prefix))
        snapshot = reply.snapshot
        kvs = list(snapshot.kvs)
        while snapshot.more:  # a paged snapshot: the rest at the same revision
            snapshot = self._requests.call(snapshot=pb.Snapshot(prefix=prefix, revision=snapshot.revision,
                                                                start_after=kvs[-1].key)).snapshot
            kvs.extend(snapshot.kvs)
        snapshot.ClearField("kvs")
        snapshot.kvs.extend(kvs)
        self._take_snapshot(follower, snapshot)

    def _take_snapshot(self, follower: PrefixFollower, snapshot: pb.SnapshotReply) -> None:
        self.counters["snapshots"] += 1
        if self._pending_epoch != snapshot.epoch:
            self._pending.clear()  # another journal: nothing collected from the old one stands
            self._pending_epoch = snapshot.epoch
        state = {kv.key: Entry.from_wire(kv) for kv in snapshot.kvs}
        self._pending.setdefault(snapshot.revision, _Pending()).snapshots.append((follower.prefix, state))
        follower.synced(snapshot.epoch, snapshot.revision)
        with self._lock:
            if self._epoch is not None and self._epoch != snapshot.epoch:
                self._revision = 0  # another journal's revisions start again
            self._epoch = snapshot.epoch

    # -- releasing whole revisions

    def _release(self) -> None:
        """Applies, in order, every revision every follower is complete through. A prefix taken
        anew from a snapshot at S stands for its parts of the revisions up to S: those are held
        and applied with the snapshot, as one update, once every follower is through S."""
        throughs = [follower.through for follower in self._followers.values() if follower.through is not None]
        if len(throughs) < len(self._followers):
            return  # not every prefix has its first state yet
        floor = min(throughs)
        updates: List[Update] = []
        limit = floor
        while True:
            ready = sorted(revision for revision in self._pending if revision <= floor)
            snapshot = next((revision for revision in sorted(self._pending)
                             if self._pending[revision].snapshots and ready and revision >= ready[0]), None)
            if snapshot is None:
                updates += [self._apply(revision, self._pending.pop(revision)) for revision in ready]
                break
            if snapshot > floor:
                if ready:
                    limit = ready[0] - 1  # held with the snapshot: the mirror is not through them yet
                break
            merged = _Pending()
            for revision in [revision for revision in ready if revision <= snapshot]:
                pending = self._pending.pop(revision)
                merged.events.update(pending.events)
                merged.snapshots += pending.snapshots
            updates.append(self._apply(snapshot, merged))
        self._advance_to(limit, updates)

    def _apply(self, revision: int, pending: _Pending) -> Update:
        changes: Dict[str, Optional[Entry]] = {}
        events = [pending.events[position] for position in sorted(pending.events)]
        with self._lock:
            for event in events:
                key = event.change.key
                entry = _entry(key, event)
                changes[key] = entry
                if entry is None:
                    self._state.pop(key, None)
                else:
                    self._state[key] = entry
            for prefix, state in pending.snapshots:
                for key in [key for key in self._state if key.startswith(prefix) and key not in state]:
                    del self._state[key]
                    changes[key] = None
                for key, entry in state.items():
                    if self._state.get(key) != entry:
                        self._state[key] = entry
                        changes[key] = entry
            # Every revision before it was applied: what a reader sees now is complete through it.
            self._revision = max(self._revision, revision)
        self.counters["revisions"] += 1
        return Update(revision, changes, resync=bool(pending.snapshots),
                      events=tuple(Event.from_wire(event) for event in events))

    def _advance_to(self, floor: int, updates: List[Update]) -> None:
        with self._lock:
            first = self._status == CONNECTING
            advanced = floor > self._revision
            self._revision = max(self._revision, floor)
            if first:
                self._status = LIVE if all(f.needs is None for f in self._followers.values()) else SYNCING
            # Synced once live with everything the followers took from this daemon applied.
            if not self._synced and self._status == LIVE and floor >= min(f.through or 0 for f in self._followers.values()):
                self._synced = True
                self._changed()
            if advanced or updates or first:
                self._changed()
            revision, epoch = self._revision, self._epoch
            state = dict(self._state) if self._cache and (updates or first) else None
        if state is not None and self._cache is not None:
            self._cache.save(epoch, revision, state)
        for update in updates:
            if not (update.changes or update.resync):
                continue
            if self._loop is None:
                self._deliveries.put(update)
            else:
                self._loop.call_soon_threadsafe(self._call, update)

    def _changed(self) -> None:
        """Wakes whoever waits for the state, the status or an error (call with the lock held)."""
        self._lock.notify_all()
        for wake in self._wakers:
            wake()

    def _set_status(self, status: str) -> None:
        with self._lock:
            self._status = status
            self._changed()

    # -- delivery

    def _call(self, update: Update) -> None:
        for callback in list(self._callbacks):
            callback(update)

    def _deliver(self) -> None:
        while True:
            update = self._deliveries.get()
            if update is None:
                return
            self._call(update)


class History:
    """A prefix's history from a revision, then live: :class:`Event` values, and a :class:`Resync`
    where it cannot go on from where it was (history compacted away, another journal).

    Every kept change from `from_revision` on (0: the oldest kept; the revision itself included)
    is replayed page by page, then every later one as it is made, each once and in order, for as
    long as it is iterated: it never ends by itself. ``client.history(prefix, follow=True)`` is
    the same. An iterator (``for event in History(...)``) and an async iterator
    (``async for``); :meth:`close` ends either, and breaking off or cancelling an ``async for``
    leaves no thread behind."""

    def __init__(self, client: Client, prefix: str, from_revision: int = 0, receive_hwm: int = 1000) -> None:
        if client.endpoints.publish is None:
            raise ConfigurationError(f"history that follows live needs the daemon's publish endpoint, which {client.endpoints.request} "
                                     "does not imply: give pub_endpoint= (or $BEACON_PUB_ENDPOINT)")
        self._client = client
        self._receive_hwm = receive_hwm
        self._prefix = prefix
        self._from = from_revision
        self._queue: queue.SimpleQueue[Optional[Update]] = queue.SimpleQueue()
        self._mirror: Optional[Mirror] = None
        self._through: Optional[Tuple[int, int]] = None

    def _replay(self) -> Iterator[Optional[Event]]:
        """Replays the pages kept (None where history was compacted away: resync from a
        snapshot), noting the revision to follow from and its epoch."""
        start = self._from
        epoch = self._client.ping().epoch
        while True:
            try:
                events, through, more = self._client.history_page(self._prefix, start)
            except Refused as refused:
                if refused.code != "COMPACTED":
                    raise
                yield None
                return
            yield from events
            start = through + 1
            if not more:
                self._through = (epoch, through)
                return

    def _follow(self, epoch: int, through: int) -> Mirror:
        mirror = Mirror(self._client, [self._prefix], start=False, every_revision=True, receive_hwm=self._receive_hwm)
        for follower in mirror._followers.values():
            follower.synced(epoch, through)
            follower.needs = "repair"
        with mirror._lock:
            mirror._epoch, mirror._revision = epoch, through
        mirror.on_change(self._queue.put)
        self._mirror = mirror
        mirror.start()
        return mirror

    def __iter__(self) -> Iterator[Union[Event, Resync]]:
        self._through = None
        for item in self._replay():
            if item is None:
                resync = self._client.snapshot(self._prefix)
                yield resync
                self._through = (resync.epoch, resync.revision)
                break
            yield item
        assert self._through is not None
        mirror = self._follow(*self._through)
        try:
            while True:
                update = self._queue.get()
                if update is None:  # closed
                    return
                if update.resync:
                    _, state = mirror.view()
                    yield Resync(update.revision, mirror._epoch or 0,
                                 {key: entry for key, entry in state.items() if key.startswith(self._prefix)})
                else:
                    yield from update.events
        finally:
            mirror.close()

    def close(self) -> None:
        """Ends the iteration (a loop waiting for the next event returns) and stops following."""
        self._queue.put(None)
        if self._mirror:
            self._mirror.close()

    def __aiter__(self) -> AsyncIterator[Union[Event, Resync]]:
        iterator = iter(self)
        loop = asyncio.get_running_loop()
        done = object()

        async def generate() -> AsyncIterator[Union[Event, Resync]]:
            try:
                while True:
                    item = await loop.run_in_executor(None, next, iterator, done)
                    if item is done:
                        return
                    assert isinstance(item, (Event, Resync))
                    yield item
            finally:
                # Cancelled, broken off or done: the executor's thread, waiting in next() for the
                # next event, returns, and the iterator stops following; nothing is left blocked.
                self._queue.put(None)

        return generate()
