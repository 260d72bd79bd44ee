"""What each request of the client API sends and makes of its replies, without sockets.

Every operation is a generator: it yields the calls (:class:`Call`) it needs, one at a time, is sent
each reply (or has the :class:`~beacon_signals.errors.Refused` of a refusal thrown into it), and
returns its result. :class:`~beacon_signals.Client` runs them over a blocking socket,
:class:`beacon_signals.asyncio.AsyncClient` over an asyncio one: the protocol's rules are written
once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Generator, List, Optional, Tuple, TypeVar, Union

from . import beacon_pb2 as pb
from .errors import Refused
from .values import Value, from_wire, to_wire

T = TypeVar("T")
TxnT = TypeVar("TxnT", bound="TransactionOps")
BatchT = TypeVar("BatchT", bound="BatchOps")

CHANGE_KINDS = {pb.Change.PUT: "put", pb.Change.DELETE: "delete", pb.Change.EXPIRE: "expire"}

#: A session name, as ``session=`` and :meth:`~beacon_signals.Client.keep_alive` take it.
SessionName = Union[str, bytes]
#: A write id, as ``write_id=`` takes it (a ``str`` is sent as its UTF-8 bytes).
WriteID = Union[str, bytes]


@dataclass(frozen=True)
class Call:
    """One request to send: its ``beacon.v1.Request`` fields (``get=pb.Get(...)``), and whether
    it is a write (sent again, with its write id, after a silence: at most once applied)."""

    fields: Dict[str, Any]
    write: bool = False
    timeout: Optional[float] = None


#: An operation: yields calls, is sent their replies, returns a ``T``.
Operation = Generator[Call, "pb.Reply", T]


@dataclass(frozen=True)
class Entry:
    """A key's current value and its versions (``expires_at_ms``: 0 for never)."""

    key: str
    #: A :data:`~beacon_signals.Value` (typed ``Any``, as ``json.loads`` is: narrow it where used).
    value: Any
    version: int
    create_revision: int
    mod_revision: int
    expires_at_ms: int = 0
    mod_time_ms: int = 0

    @classmethod
    def from_wire(cls, kv: pb.KeyValue) -> Entry:
        return cls(kv.key, from_wire(kv.value) if kv.HasField("value") else None, kv.version, kv.create_revision,
                   kv.mod_revision, kv.expires_at_ms, kv.mod_time_ms)


@dataclass(frozen=True)
class WriteResult:
    """Where a write landed: its revision and each operation's key version (0 for a delete);
    ``replayed``: the write was a retry of one already applied, and this is that one's result."""

    revision: int
    versions: Tuple[int, ...]
    replayed: bool = False

    @property
    def version(self) -> int:
        """The key's version after a one-key write."""
        return self.versions[0]


@dataclass(frozen=True)
class Event:
    """One change of a revision, as history and mirrors report it."""

    revision: int
    key: str
    kind: str  # "put", "delete" or "expire"
    value: Any  # a Value; None unless a put
    version: int
    create_revision: int
    expires_at_ms: int
    timestamp_ms: int
    part: int = 0
    parts: int = 1

    @classmethod
    def from_wire(cls, event: pb.Event) -> Event:
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
    state: Dict[str, Entry]


@dataclass(frozen=True)
class PingInfo:
    """What a daemon says of itself (``Ping``)."""

    protocol_version: int
    epoch: int
    instance: int
    head_revision: int
    compacted_revision: int
    heartbeat_interval_ms: int
    daemon_version: str
    bundles: bool


#: One page of history: its events, the revision it is complete through, and whether more follow.
HistoryPage = Tuple[List[Event], int, bool]


def advance(operation: Operation[T], reply: pb.Reply) -> Call:
    """Gives `operation` the reply to its last call (a refusal is raised in it) and returns its
    next call; raises ``StopIteration`` with its result when it has one."""
    if reply.WhichOneof("result") == "error":
        return operation.throw(Refused(reply.error))
    return operation.send(reply)


def session_bytes(session: SessionName) -> bytes:
    return session.encode() if isinstance(session, str) else bytes(session)


def write_id_bytes(write_id: Optional[WriteID]) -> bytes:
    """The write id to send: `write_id`'s bytes, or 16 random ones."""
    if write_id is None:
        return os.urandom(16)
    return write_id.encode() if isinstance(write_id, str) else bytes(write_id)


def put_op(key: str, value: Value, if_version: Optional[int], create_only: bool, ttl_ms: int,
           session: Optional[SessionName]) -> pb.Put:
    put = pb.Put(key=key, value=to_wire(value), create_only=create_only, ttl_ms=ttl_ms)
    if if_version is not None:
        put.if_version = if_version
    if session is not None:
        put.session = session_bytes(session)
    return put


def delete_op(key: str, if_version: Optional[int]) -> pb.Delete:
    delete = pb.Delete(key=key)
    if if_version is not None:
        delete.if_version = if_version
    return delete


def write_result(reply: pb.Reply) -> WriteResult:
    return WriteResult(reply.write.revision, tuple(reply.write.versions), reply.write.replayed)


# -- the operations


def raw(timeout: Optional[float], fields: Dict[str, Any]) -> Operation[pb.Reply]:
    return (yield Call(fields, timeout=timeout))


def ping() -> Operation[PingInfo]:
    reply = (yield Call({"ping": pb.Ping()})).ping
    return PingInfo(reply.protocol_version, reply.epoch, reply.instance, reply.head_revision, reply.compacted_revision,
                    reply.heartbeat_interval_ms, reply.daemon_version, reply.bundles)


def require_consistent_reads() -> Operation[None]:
    """Refuses (``INVALID_ARGUMENT``) when the daemon mirrors another (a relay or a front) and
    predates consistent reads; a plain daemon's reads all are consistent."""
    reply = (yield Call({"ping": pb.Ping()})).ping
    if not reply.consistent_reads and reply.HasField("upstream"):
        raise Refused(pb.Error(code=pb.Error.INVALID_ARGUMENT, message=(
            f"beacond {reply.daemon_version} mirrors {reply.upstream.endpoint} and cannot serve a consistent read: "
            "read with consistent=False, or at its upstream")))


def sync() -> Operation[int]:
    yield from require_consistent_reads()
    return (yield Call({"ping": pb.Ping(sync=True)})).ping.read_revision


def get(key: str, consistent: bool) -> Operation[Optional[Entry]]:
    if consistent:
        yield from require_consistent_reads()
    try:
        reply = yield Call({"get": pb.Get(key=key, consistent=consistent)})
    except Refused as refused:
        if refused.code == "NOT_FOUND":
            return None
        raise
    return Entry.from_wire(reply.get.kv)


def list_entries(prefix: str, consistent: bool) -> Operation[Dict[str, Entry]]:
    entries: Dict[str, Entry] = {}
    for kv in (yield from _list_pages(prefix, False, consistent)):
        entries[kv.key] = Entry.from_wire(kv)
    return entries


def list_keys(prefix: str, consistent: bool) -> Operation[List[str]]:
    return [kv.key for kv in (yield from _list_pages(prefix, True, consistent))]


def _list_pages(prefix: str, keys_only: bool, consistent: bool) -> Operation[List[pb.KeyValue]]:
    if consistent:
        yield from require_consistent_reads()
    kvs: List[pb.KeyValue] = []
    after = ""
    while True:
        page = (yield Call({"list": pb.List(prefix=prefix, start_after=after, keys_only=keys_only, limit=1000,
                                            consistent=consistent)})).list
        kvs.extend(page.kvs)
        if not page.more or not page.kvs:
            return kvs
        after = page.kvs[-1].key


def stats() -> Operation[Dict[str, Any]]:
    reply = (yield Call({"stats": pb.Stats()})).stats
    return {field.name: getattr(reply, field.name) for field in reply.DESCRIPTOR.fields if field.message_type is None}


def write(fields: Dict[str, Any]) -> Operation[WriteResult]:
    return write_result((yield Call(fields, write=True)))


def keep_alive(session: SessionName, ttl_ms: int) -> Operation[Tuple[int, int]]:
    reply = (yield Call({"keep_alive": pb.KeepAlive(session=session_bytes(session), ttl_ms=ttl_ms)})).keep_alive
    return reply.keys, reply.expires_at_ms


def history_page(prefix: str, from_revision: int, to_revision: int, exact: bool, limit: int) -> Operation[HistoryPage]:
    reply = (yield Call({"history": pb.History(prefix=prefix, exact=exact, from_revision=from_revision,
                                               to_revision=to_revision, limit=limit)})).events
    return [Event.from_wire(event) for event in reply.events], reply.revision, reply.more


def snapshot(prefix: str) -> Operation[Resync]:
    """The state under `prefix` now, every page of it at one revision."""
    reply = (yield Call({"snapshot": pb.Snapshot(prefix=prefix)})).snapshot
    kvs = list(reply.kvs)
    revision, epoch = reply.revision, reply.epoch
    while reply.more:
        reply = (yield Call({"snapshot": pb.Snapshot(prefix=prefix, revision=revision, start_after=kvs[-1].key)})).snapshot
        kvs.extend(reply.kvs)
    return Resync(revision, epoch, {kv.key: Entry.from_wire(kv) for kv in kvs})


class TransactionOps:
    """The operations of a transaction, collected (see :meth:`beacon_signals.Client.transaction`)."""

    def __init__(self) -> None:
        self._ops: List[pb.TxnOp] = []
        self._result: Optional[WriteResult] = None

    def set(self: TxnT, key: str, value: Value, *, if_version: Optional[int] = None, create_only: bool = False,
            ttl_ms: int = 0, session: Optional[SessionName] = None) -> TxnT:
        """Adds a put (the options as for :meth:`beacon_signals.Client.set`); returns the transaction."""
        self._ops.append(pb.TxnOp(put=put_op(key, value, if_version, create_only, ttl_ms, session)))
        return self

    def delete(self: TxnT, key: str, *, if_version: Optional[int] = None) -> TxnT:
        """Adds a delete; returns the transaction."""
        self._ops.append(pb.TxnOp(delete=delete_op(key, if_version)))
        return self

    @property
    def result(self) -> WriteResult:
        """The committed transaction's :class:`WriteResult`; ``BeaconError`` before it is committed."""
        if self._result is None:
            from .errors import BeaconError
            raise BeaconError("the transaction has not been committed")
        return self._result

    @property
    def committed(self) -> bool:
        return self._result is not None

    def _commit(self, write_id: Optional[WriteID]) -> Operation[WriteResult]:
        result = yield from write({"txn": pb.Txn(ops=self._ops, write_id=write_id_bytes(write_id))})
        self._result = result
        return result


#: What a batch's request came to: a write's result, a read's entry (None: no such key), or its refusal.
Outcome = Union[WriteResult, Optional[Entry], Refused]


class BatchOps:
    """Requests collected to be sent in one ``Batch`` message (see :meth:`beacon_signals.Client.batch`)."""

    def __init__(self) -> None:
        self._requests: List[pb.Request] = []
        self._kinds: List[str] = []

    def _add(self: BatchT, kind: str, **fields: Any) -> BatchT:
        self._requests.append(pb.Request(id=len(self._requests) + 1, **fields))
        self._kinds.append(kind)
        return self

    def set(self: BatchT, key: str, value: Value, *, if_version: Optional[int] = None, create_only: bool = False,
            ttl_ms: int = 0, session: Optional[SessionName] = None) -> BatchT:
        """Adds a write (with a write id of its own); returns the batch."""
        put = put_op(key, value, if_version, create_only, ttl_ms, session)
        put.write_id = os.urandom(16)
        return self._add("write", put=put)

    def delete(self: BatchT, key: str, *, if_version: Optional[int] = None) -> BatchT:
        """Adds a delete; returns the batch."""
        delete = delete_op(key, if_version)
        delete.write_id = os.urandom(16)
        return self._add("write", delete=delete)

    def get(self: BatchT, key: str) -> BatchT:
        """Adds a read; returns the batch."""
        return self._add("get", get=pb.Get(key=key))

    def _send(self) -> Operation[List[Outcome]]:
        reply = yield Call({"batch": pb.Batch(requests=self._requests)}, write=True)
        outcomes: List[Outcome] = []
        for kind, answer in zip(self._kinds, reply.batch.replies):
            if answer.WhichOneof("result") == "error":
                refused = Refused(answer.error)
                outcomes.append(None if kind == "get" and refused.code == "NOT_FOUND" else refused)
            elif kind == "get":
                outcomes.append(Entry.from_wire(answer.get.kv))
            else:
                outcomes.append(write_result(answer))
        return outcomes
