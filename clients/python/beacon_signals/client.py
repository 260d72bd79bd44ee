"""Requests and replies: reads, writes, transactions, batches, sessions, history pages."""

import os
import random
import threading
import time
from dataclasses import dataclass

import zmq

from . import beacon_pb2 as pb
from .endpoints import resolve
from .errors import BeaconError, Refused, Unavailable
from .values import from_wire, to_wire

CHANGE_KINDS = {pb.Change.PUT: "put", pb.Change.DELETE: "delete", pb.Change.EXPIRE: "expire"}


@dataclass(frozen=True)
class Entry:
    """A key's current value and its versions (``expires_at_ms``: 0 for never)."""

    key: str
    value: object
    version: int
    create_revision: int
    mod_revision: int
    expires_at_ms: int = 0
    mod_time_ms: int = 0

    @classmethod
    def from_wire(cls, kv):
        return cls(kv.key, from_wire(kv.value) if kv.HasField("value") else None, kv.version, kv.create_revision,
                   kv.mod_revision, kv.expires_at_ms, kv.mod_time_ms)


@dataclass(frozen=True)
class WriteResult:
    """Where a write landed: its revision and each operation's key version (0 for a delete);
    ``replayed``: the write was a retry of one already applied, and this is that one's result."""

    revision: int
    versions: tuple
    replayed: bool = False

    @property
    def version(self):
        """The key's version after a one-key write."""
        return self.versions[0]


@dataclass(frozen=True)
class Event:
    """One change of a revision, as history and mirrors report it."""

    revision: int
    key: str
    kind: str  # "put", "delete" or "expire"
    value: object
    version: int
    create_revision: int
    expires_at_ms: int
    timestamp_ms: int
    part: int = 0
    parts: int = 1

    @classmethod
    def from_wire(cls, event):
        change = event.change
        return cls(event.revision, change.key, CHANGE_KINDS.get(change.kind, "delete"),
                   from_wire(change.value) if change.kind == pb.Change.PUT else None,
                   change.version, change.create_revision, change.expires_at_ms, event.timestamp_ms, event.part, event.parts)


@dataclass(frozen=True)
class Resync:
    """History could not continue from where it was (compacted away, or a new journal): what is
    current at ``revision`` under the prefix replaces everything before."""

    revision: int
    epoch: int
    state: dict


@dataclass(frozen=True)
class PingInfo:
    protocol_version: int
    epoch: int
    instance: int
    head_revision: int
    compacted_revision: int
    heartbeat_interval_ms: int
    daemon_version: str
    bundles: bool


def _put(key, value, if_version, create_only, ttl_ms, session):
    put = pb.Put(key=key, value=to_wire(value), create_only=create_only, ttl_ms=ttl_ms)
    if if_version is not None:
        put.if_version = if_version
    if session is not None:
        put.session = session.encode() if isinstance(session, str) else bytes(session)
    return put


def _delete(key, if_version):
    delete = pb.Delete(key=key)
    if if_version is not None:
        delete.if_version = if_version
    return delete


def _write_result(reply):
    return WriteResult(reply.write.revision, tuple(reply.write.versions), reply.write.replayed)


class Client:
    """A connection to ``beacond``'s request socket.

    Found as the ``beacon`` tool finds the daemon: ``endpoint``/``pub_endpoint`` (or
    ``$BEACON_ENDPOINT``/``$BEACON_PUB_ENDPOINT``), else the ipc sockets of ``runtime_dir`` (or
    ``$BEACON_RUNTIME_DIR``, the per-user directory, ``/run/beacon``); CURVE for tcp from
    ``server_key`` and ``key_file`` (or ``$BEACON_SERVER_KEY``, ``$BEACON_KEY_FILE``).

    Every write carries a write id. A write that gets no answer within ``timeout`` seconds is
    sent again, with the same id, on a new connection until ``write_timeout`` seconds have passed
    (and so is one a relay answers ``UPSTREAM_UNAVAILABLE``, on the same connection): the daemon
    applies it at most once, and a retry of one it applied answers with that one's result. Reads wait ``timeout`` seconds and raise :class:`Unavailable`. Refusals raise
    :class:`Refused`. One request at a time per client; it may be shared between threads.
    """

    def __init__(self, runtime_dir=None, *, endpoint=None, pub_endpoint=None, server_key=None, key_file=None,
                 timeout=5.0, write_timeout=30.0, context=None):
        self.endpoints = resolve(runtime_dir, endpoint, pub_endpoint, server_key, key_file)
        self.timeout = timeout
        self.write_timeout = write_timeout
        self._context = context or zmq.Context.instance()
        self._lock = threading.Lock()
        self._socket = None
        self._next_id = random.getrandbits(32)
        self._closed = False
        #: Writes sent again after a silence (on a new connection, with the same write id).
        self.resends = 0

    # -- connection

    def _connect(self):
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        # Only to a connected peer: a request is never queued for a daemon that is not there.
        socket.setsockopt(zmq.IMMEDIATE, 1)
        socket.setsockopt(zmq.RCVHWM, 0)
        curve = self.endpoints.curve
        if curve and self.endpoints.request.startswith("tcp://"):
            socket.curve_serverkey = curve.server_key.encode()
            socket.curve_publickey = curve.public_key.encode()
            socket.curve_secretkey = curve.secret_key.encode()
        socket.connect(self.endpoints.request)
        return socket

    def _reset(self):
        """Drops the connection and whatever it held; the next request connects anew."""
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def close(self):
        with self._lock:
            self._reset()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one request, one reply

    def _exchange(self, request, timeout):
        """Sends `request` and returns its reply, or None when none came within `timeout` seconds."""
        if self._closed:
            raise BeaconError("the client is closed")
        if self._socket is None:
            self._socket = self._connect()
        socket = self._socket
        deadline = time.monotonic() + timeout
        body = request.SerializeToString()
        while True:
            try:
                socket.send(body, zmq.NOBLOCK)
                break
            except zmq.Again:  # not connected (yet)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                socket.poll(min(left, 0.05) * 1000, zmq.POLLOUT)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not socket.poll(left * 1000, zmq.POLLIN):
                return None
            frames = socket.recv_multipart()
            reply = pb.Reply()
            reply.ParseFromString(frames[-1])
            if reply.id == request.id:
                return reply
            # A late reply to an earlier request that was given up on: not this one's.

    def _new_request(self, **op):
        self._next_id = (self._next_id + 1) & ((1 << 64) - 1)
        return pb.Request(id=self._next_id, **op)

    def call(self, timeout=None, **op):
        """Sends one request (``op`` as in ``beacon.v1.Request``: ``get=pb.Get(key=...)``) and
        returns its ``beacon.v1.Reply``; a refusal raises :class:`Refused`."""
        with self._lock:
            request = self._new_request(**op)
            reply = self._exchange(request, self.timeout if timeout is None else timeout)
            if reply is None:
                self._reset()  # its reply, if one comes, is for nobody
                raise Unavailable(f"no reply from the daemon at {self.endpoints.request} within {timeout or self.timeout} s "
                                  "(is beacond running?)")
        if reply.WhichOneof("result") == "error":
            raise Refused(reply.error)
        return reply

    def _write(self, **op):
        """Sends a write (its write id set) until it is answered, on new connections after each
        silence, for up to ``write_timeout`` seconds."""
        deadline = time.monotonic() + self.write_timeout
        with self._lock:
            request = self._new_request(**op)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(f"no answer from the daemon at {self.endpoints.request} within {self.write_timeout} s; "
                                      "the write may have been applied: send it again with the same write_id to find out")
                reply = self._exchange(request, min(self.timeout, left))
                if reply is None:
                    self._reset()  # what the old connection held is gone; the same write, same id, again
                    self.resends += 1
                elif reply.WhichOneof("result") == "error" and reply.error.code == pb.Error.Code.UPSTREAM_UNAVAILABLE:
                    # A relay that cannot reach its upstream now: perhaps applied. The same write
                    # again, shortly, until it is answered or the time is up.
                    time.sleep(min(0.1, max(left - 0.1, 0)))
                    self.resends += 1
                else:
                    break
        if reply.WhichOneof("result") == "error":
            raise Refused(reply.error)
        return reply

    @staticmethod
    def _write_id(write_id):
        if write_id is None:
            return os.urandom(16)
        return write_id.encode() if isinstance(write_id, str) else bytes(write_id)

    # -- reads

    def ping(self):
        reply = self.call(ping=pb.Ping()).ping
        return PingInfo(reply.protocol_version, reply.epoch, reply.instance, reply.head_revision, reply.compacted_revision,
                        reply.heartbeat_interval_ms, reply.daemon_version, reply.bundles)

    def _require_consistent_reads(self):
        """Raises :class:`Refused` (``INVALID_ARGUMENT``) when the daemon mirrors another (a relay
        or a front) and predates consistent reads; a plain daemon's reads all are consistent."""
        reply = self.call(ping=pb.Ping()).ping
        if not reply.consistent_reads and reply.HasField("upstream"):
            raise Refused(pb.Error(code=pb.Error.INVALID_ARGUMENT, message=(
                f"beacond {reply.daemon_version} mirrors {reply.upstream.endpoint} and cannot serve a consistent read: "
                "read with consistent=False, or at its upstream")))

    def sync(self):
        """A read index: waits until the daemon holds every write acknowledged anywhere before the
        call (at every front of its etcd cluster too) and returns that revision."""
        self._require_consistent_reads()
        return self.call(ping=pb.Ping(sync=True)).ping.read_revision

    def get(self, key, *, consistent=False):
        """The key's :class:`Entry`, or None if it does not exist. With ``consistent``, the read
        sees every write acknowledged anywhere before it, at any etcd front too (PROTOCOL.md §4.8)."""
        if consistent:
            self._require_consistent_reads()
        try:
            return Entry.from_wire(self.call(get=pb.Get(key=key, consistent=consistent)).get.kv)
        except Refused as refused:
            if refused.code == "NOT_FOUND":
                return None
            raise

    def list(self, prefix="", keys_only=False, *, consistent=False):
        """Every live key under `prefix`: a dict of :class:`Entry` by key (with ``keys_only``, a
        list of keys), read page by page; ``consistent`` as for :meth:`get`, for each page."""
        if consistent:
            self._require_consistent_reads()
        entries = {} if not keys_only else []
        after = ""
        while True:
            page = self.call(list=pb.List(prefix=prefix, start_after=after, keys_only=keys_only, limit=1000,
                                          consistent=consistent)).list
            for kv in page.kvs:
                if keys_only:
                    entries.append(kv.key)
                else:
                    entries[kv.key] = Entry.from_wire(kv)
            if not page.more or not page.kvs:
                return entries
            after = page.kvs[-1].key

    def stats(self):
        """The daemon's counters and state (``Stats``), as a dict."""
        reply = self.call(stats=pb.Stats()).stats
        return {field.name: getattr(reply, field.name) for field in reply.DESCRIPTOR.fields if field.message_type is None}

    # -- writes

    def set(self, key, value, *, if_version=None, create_only=False, ttl_ms=0, session=None, write_id=None):
        """Writes `value` to `key`. ``if_version``: only if the key is at that version (0: absent);
        ``create_only``: only if it does not exist; ``ttl_ms``: deleted that long after; ``session``:
        deleted when that session ends (:meth:`keep_alive`)."""
        put = _put(key, value, if_version, create_only, ttl_ms, session)
        put.write_id = self._write_id(write_id)
        return _write_result(self._write(put=put))

    def delete(self, key, *, if_version=None, write_id=None):
        delete = _delete(key, if_version)
        delete.write_id = self._write_id(write_id)
        return _write_result(self._write(delete=delete))

    def transaction(self):
        """A transaction: its operations all apply at one revision, or none does.

        ``with client.transaction() as txn: txn.set(...); txn.delete(...)`` commits on leaving
        the block (``txn.result`` is then its :class:`WriteResult`); or call ``commit()``."""
        return Transaction(self)

    def batch(self):
        """Several requests in one message, each with its own reply (and a write its own revision)."""
        return Batch(self)

    def keep_alive(self, session, ttl_ms):
        """Renews `session` for `ttl_ms` (keys written with it are deleted when it ends).
        Returns ``(live keys bound to it, Unix ms it ends at)``."""
        session = session.encode() if isinstance(session, str) else bytes(session)
        reply = self.call(keep_alive=pb.KeepAlive(session=session, ttl_ms=ttl_ms)).keep_alive
        return reply.keys, reply.expires_at_ms

    def end_session(self, session):
        """Ends `session` now: its keys are deleted in one revision."""
        self.keep_alive(session, 0)

    # -- history

    def history_page(self, prefix, from_revision=0, to_revision=0, exact=False, limit=0):
        """One page of history: ``(events, complete_through, more)``."""
        reply = self.call(history=pb.History(prefix=prefix, exact=exact, from_revision=from_revision,
                                             to_revision=to_revision, limit=limit)).events
        return [Event.from_wire(event) for event in reply.events], reply.revision, reply.more

    def history(self, prefix="", from_revision=0, to_revision=0, exact=False, follow=False):
        """Every change under `prefix` (or to the key `prefix`, ``exact``) from `from_revision`
        (0: the oldest kept) through `to_revision` (0: the head), page by page, as :class:`Event`s.
        With ``follow``, it goes on live afterwards (a history of a prefix only), and reports a
        :class:`Resync` where history cannot continue (see :class:`beacon_signals.mirror.History`)."""
        if follow:
            from .mirror import History
            return iter(History(self, prefix, from_revision=from_revision))
        return self._pages(prefix, from_revision, to_revision, exact)

    def _pages(self, prefix, from_revision, to_revision, exact):
        start = from_revision
        while True:
            events, through, more = self.history_page(prefix, start, to_revision, exact)
            yield from events
            if not more:
                return
            start = through + 1


class Transaction:
    """Operations applied at one revision, or not at all (see :meth:`Client.transaction`)."""

    def __init__(self, client):
        self._client = client
        self._ops = []
        self.result = None

    def set(self, key, value, *, if_version=None, create_only=False, ttl_ms=0, session=None):
        self._ops.append(pb.TxnOp(put=_put(key, value, if_version, create_only, ttl_ms, session)))
        return self

    def delete(self, key, *, if_version=None):
        self._ops.append(pb.TxnOp(delete=_delete(key, if_version)))
        return self

    def commit(self, write_id=None):
        txn = pb.Txn(ops=self._ops, write_id=Client._write_id(write_id))
        self.result = _write_result(self._client._write(txn=txn))
        return self.result

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is None:
            self.commit()


class Batch:
    """Requests sent in one ``Batch`` message (see :meth:`Client.batch`)."""

    def __init__(self, client):
        self._client = client
        self._requests = []
        self._kinds = []

    def set(self, key, value, *, if_version=None, create_only=False, ttl_ms=0, session=None):
        put = _put(key, value, if_version, create_only, ttl_ms, session)
        put.write_id = os.urandom(16)
        self._requests.append(pb.Request(id=len(self._requests) + 1, put=put))
        self._kinds.append("write")
        return self

    def delete(self, key, *, if_version=None):
        delete = _delete(key, if_version)
        delete.write_id = os.urandom(16)
        self._requests.append(pb.Request(id=len(self._requests) + 1, delete=delete))
        self._kinds.append("write")
        return self

    def get(self, key):
        self._requests.append(pb.Request(id=len(self._requests) + 1, get=pb.Get(key=key)))
        self._kinds.append("get")
        return self

    def send(self):
        """Each request's outcome, in order: a :class:`WriteResult`, an :class:`Entry` (None for
        a key that does not exist), or the :class:`Refused` it met (not raised)."""
        reply = self._client._write(batch=pb.Batch(requests=self._requests))
        outcomes = []
        for kind, answer in zip(self._kinds, reply.batch.replies):
            if answer.WhichOneof("result") == "error":
                refused = Refused(answer.error)
                outcomes.append(None if kind == "get" and refused.code == "NOT_FOUND" else refused)
            elif kind == "get":
                outcomes.append(Entry.from_wire(answer.get.kv))
            else:
                outcomes.append(_write_result(answer))
        return outcomes
