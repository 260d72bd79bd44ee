"""The blocking client: reads, writes, transactions, batches, sessions, history pages."""

from __future__ import annotations

import random
import threading
import time
from types import TracebackType
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple, Type, TypeVar, Union, overload

import zmq

from . import beacon_pb2 as pb
from . import operations as ops
from .endpoints import Endpoints, resolve
from .errors import BeaconError, Unavailable
from .operations import (Entry, Event, HistoryPage, Outcome, PingInfo, Resync, SessionName, WriteID, WriteResult,
                         delete_op, put_op, write_id_bytes)
from .values import Value

T = TypeVar("T")

__all__ = ["Batch", "Client", "Entry", "Event", "PingInfo", "Resync", "Transaction", "WriteResult"]


S = TypeVar("S", bound="zmq.Socket[Any]")


def request_socket(context: zmq.Context[S], endpoints: Endpoints) -> S:
    """A DEALER of `context` (blocking or asyncio) connected to the daemon's request endpoint,
    as every client request goes."""
    socket: S = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    # Only to a connected peer: a request is never queued for a daemon that is not there.
    socket.setsockopt(zmq.IMMEDIATE, 1)
    socket.setsockopt(zmq.RCVHWM, 0)
    curve = endpoints.curve
    if curve and endpoints.request.startswith("tcp://"):
        socket.curve_serverkey = curve.server_key.encode()
        socket.curve_publickey = curve.public_key.encode()
        socket.curve_secretkey = curve.secret_key.encode()
    socket.connect(endpoints.request)
    return socket


class RequestIDs:
    """Request ids for one client: counting up from a random start, never 0."""

    def __init__(self) -> None:
        self._next = random.getrandbits(32)

    def request(self, fields: Dict[str, Any]) -> pb.Request:
        self._next = (self._next + 1) & ((1 << 64) - 1) or 1
        return pb.Request(id=self._next, **fields)


def unavailable(endpoints: Endpoints, timeout: float) -> Unavailable:
    return Unavailable(f"no reply from the daemon at {endpoints.request} within {timeout} s (is beacond running?)")


def write_unavailable(endpoints: Endpoints, timeout: float) -> Unavailable:
    return Unavailable(f"no answer from the daemon at {endpoints.request} within {timeout} s; "
                       "the write may have been applied: send it again with the same write_id to find out")


def is_upstream_unavailable(reply: pb.Reply) -> bool:
    return reply.WhichOneof("result") == "error" and reply.error.code == pb.Error.UPSTREAM_UNAVAILABLE


class Client:
    """A connection to ``beacond``'s request socket.

    Found as the ``beacon`` tool finds the daemon: ``endpoint``/``pub_endpoint`` (or
    ``$BEACON_ENDPOINT``/``$BEACON_PUB_ENDPOINT``), else the ipc sockets of ``runtime_dir`` (or
    ``$BEACON_RUNTIME_DIR``, the per-user directory, ``/run/beacon``); CURVE for tcp from
    ``server_key`` and ``key_file`` (or ``$BEACON_SERVER_KEY``, ``$BEACON_KEY_FILE``).

    Every write carries a write id. A write that gets no answer within ``timeout`` seconds is
    sent again, with the same id, on a new connection until ``write_timeout`` seconds have passed
    (and so is one a relay answers ``UPSTREAM_UNAVAILABLE``, on the same connection): the daemon
    applies it at most once, and a retry of one it applied answers with that one's result.
    Reads wait ``timeout`` seconds and raise :class:`Unavailable`. Refusals raise
    :class:`Refused`. One request at a time: threads that share a client take turns.

    A context manager: leaving the block closes it (:meth:`close`).
    """

    def __init__(self, runtime_dir: Optional[str] = None, *, endpoint: Optional[str] = None,
                 pub_endpoint: Optional[str] = None, server_key: Optional[str] = None, key_file: Optional[str] = None,
                 timeout: float = 5.0, write_timeout: float = 30.0, context: Optional[zmq.Context[Any]] = None) -> None:
        self.endpoints: Endpoints = resolve(runtime_dir, endpoint, pub_endpoint, server_key, key_file)
        self.timeout = timeout
        self.write_timeout = write_timeout
        self._context: zmq.Context[Any] = context or zmq.Context.instance()
        self._lock = threading.Lock()
        self._socket: Optional[zmq.Socket[Any]] = None
        self._ids = RequestIDs()
        self._closed = False
        #: Writes sent again after a silence (on a new connection, with the same write id).
        self.resends = 0

    # -- connection

    def _reset(self) -> None:
        """Drops the connection and whatever it held; the next request connects anew."""
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def close(self) -> None:
        """Closes the connection; a request after it raises :class:`BeaconError`."""
        with self._lock:
            self._reset()
            self._closed = True

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.close()

    # -- one request, one reply

    def _exchange(self, request: pb.Request, timeout: float) -> Optional[pb.Reply]:
        """Sends `request` and returns its reply, or None when none came within `timeout` seconds."""
        if self._closed:
            raise BeaconError("the client is closed")
        if self._socket is None:
            self._socket = request_socket(self._context, self.endpoints)
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

    def _perform(self, call: ops.Call) -> pb.Reply:
        """The reply to `call` (a refusal included); a write is sent until it is answered."""
        with self._lock:
            request = self._ids.request(call.fields)
            if not call.write:
                timeout = self.timeout if call.timeout is None else call.timeout
                reply = self._exchange(request, timeout)
                if reply is None:
                    self._reset()  # its reply, if one comes, is for nobody
                    raise unavailable(self.endpoints, timeout)
                return reply
            deadline = time.monotonic() + self.write_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise write_unavailable(self.endpoints, self.write_timeout)
                reply = self._exchange(request, min(self.timeout, left))
                if reply is None:
                    self._reset()  # what the old connection held is gone; the same write, same id, again
                    self.resends += 1
                elif is_upstream_unavailable(reply):
                    # A relay that cannot reach its upstream now: perhaps applied. The same write
                    # again, shortly, until it is answered or the time is up.
                    time.sleep(min(0.1, max(left - 0.1, 0)))
                    self.resends += 1
                else:
                    return reply

    def _run(self, operation: ops.Operation[T]) -> T:
        """Runs `operation` to its result: each call it yields is sent, its reply given back."""
        try:
            call = next(operation)
            while True:
                call = ops.advance(operation, self._perform(call))
        except StopIteration as done:
            result: T = done.value
            return result

    def call(self, timeout: Optional[float] = None, **op: Any) -> pb.Reply:
        """Sends one request (``op`` as in ``beacon.v1.Request``: ``get=pb.Get(key=...)``) and
        returns its ``beacon.v1.Reply``; a refusal raises :class:`Refused`."""
        return self._run(ops.raw(timeout, op))

    # -- reads

    def ping(self) -> PingInfo:
        """What the daemon says of itself."""
        return self._run(ops.ping())

    def sync(self) -> int:
        """A read index: waits until the daemon holds every write acknowledged anywhere before the
        call (at every front of its etcd cluster too) and returns that revision."""
        return self._run(ops.sync())

    def get(self, key: str, *, consistent: bool = False) -> Optional[Entry]:
        """The key's :class:`Entry`, or None if it does not exist. With ``consistent``, the read
        sees every write acknowledged anywhere before it, at any etcd front too (PROTOCOL.md §4.8)."""
        return self._run(ops.get(key, consistent))

    @overload
    def list(self, prefix: str = "", keys_only: Literal[False] = False, *, consistent: bool = False) -> Dict[str, Entry]: ...

    @overload
    def list(self, prefix: str, keys_only: Literal[True], *, consistent: bool = False) -> List[str]: ...

    def list(self, prefix: str = "", keys_only: bool = False, *,
             consistent: bool = False) -> Union[Dict[str, Entry], List[str]]:
        """Every live key under `prefix`: a dict of :class:`Entry` by key (with ``keys_only``, a
        list of keys), read page by page; ``consistent`` as for :meth:`get`, for each page."""
        if keys_only:
            return self._run(ops.list_keys(prefix, consistent))
        return self._run(ops.list_entries(prefix, consistent))

    def stats(self) -> Dict[str, Any]:
        """The daemon's counters and state (``Stats``), as a dict."""
        return self._run(ops.stats())

    # -- writes

    def set(self, key: str, value: Value, *, if_version: Optional[int] = None, create_only: bool = False, ttl_ms: int = 0,
            session: Optional[SessionName] = None, write_id: Optional[WriteID] = None) -> WriteResult:
        """Writes `value` to `key`. ``if_version``: only if the key is at that version (0: absent);
        ``create_only``: only if it does not exist; ``ttl_ms``: deleted that long after; ``session``:
        deleted when that session ends (:meth:`keep_alive`); ``write_id``: the id that makes a
        retry of this write apply once (random when not given)."""
        put = put_op(key, value, if_version, create_only, ttl_ms, session)
        put.write_id = write_id_bytes(write_id)
        return self._run(ops.write({"put": put}))

    def delete(self, key: str, *, if_version: Optional[int] = None, write_id: Optional[WriteID] = None) -> WriteResult:
        """Deletes `key` (``if_version``: only if it is at that version)."""
        delete = delete_op(key, if_version)
        delete.write_id = write_id_bytes(write_id)
        return self._run(ops.write({"delete": delete}))

    def transaction(self) -> Transaction:
        """A transaction: its operations all apply at one revision, or none does.

        ``with client.transaction() as txn: txn.set(...); txn.delete(...)`` commits on leaving
        the block (``txn.result`` is then its :class:`WriteResult`); or call ``commit()``."""
        return Transaction(self)

    def batch(self) -> Batch:
        """Several requests in one message, each with its own reply (and a write its own revision)."""
        return Batch(self)

    def keep_alive(self, session: SessionName, ttl_ms: int) -> Tuple[int, int]:
        """Renews `session` for `ttl_ms` (keys written with it are deleted when it ends).
        Returns ``(live keys bound to it, Unix ms it ends at)``."""
        return self._run(ops.keep_alive(session, ttl_ms))

    def end_session(self, session: SessionName) -> None:
        """Ends `session` now: its keys are deleted in one revision."""
        self.keep_alive(session, 0)

    # -- history

    def history_page(self, prefix: str, from_revision: int = 0, to_revision: int = 0, exact: bool = False,
                     limit: int = 0) -> HistoryPage:
        """One page of history: ``(events, complete_through, more)``."""
        return self._run(ops.history_page(prefix, from_revision, to_revision, exact, limit))

    def snapshot(self, prefix: str = "") -> Resync:
        """Every live key under `prefix` at one revision (paged, read as one), as a :class:`Resync`."""
        return self._run(ops.snapshot(prefix))

    @overload
    def history(self, prefix: str = "", from_revision: int = 0, to_revision: int = 0, exact: bool = False,
                follow: Literal[False] = False) -> Iterator[Event]: ...

    @overload
    def history(self, prefix: str = "", from_revision: int = 0, to_revision: int = 0, exact: bool = False, *,
                follow: Literal[True]) -> Iterator[Union[Event, Resync]]: ...

    def history(self, prefix: str = "", from_revision: int = 0, to_revision: int = 0, exact: bool = False,
                follow: bool = False) -> Union[Iterator[Event], Iterator[Union[Event, Resync]]]:
        """Every change under `prefix` (or to the key `prefix`, ``exact``) from `from_revision`
        (0: the oldest kept) through `to_revision` (0: the head), both included, page by page, as
        :class:`Event` values. With ``follow``, it goes on live afterwards (a history of a prefix
        only), and reports a :class:`Resync` where history cannot continue (see
        :class:`beacon_signals.mirror.History`)."""
        if follow:
            from .mirror import History
            return iter(History(self, prefix, from_revision=from_revision))
        return self._pages(prefix, from_revision, to_revision, exact)

    def _pages(self, prefix: str, from_revision: int, to_revision: int, exact: bool) -> Iterator[Event]:
        start = from_revision
        while True:
            events, through, more = self.history_page(prefix, start, to_revision, exact)
            yield from events
            if not more:
                return
            start = through + 1


class Transaction(ops.TransactionOps):
    """Operations applied at one revision, or not at all (see :meth:`Client.transaction`)."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self._client = client

    def commit(self, write_id: Optional[WriteID] = None) -> WriteResult:
        """Applies the operations at one revision, or raises :class:`Refused` and applies none."""
        return self._client._run(self._commit(write_id))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if kind is None:
            self.commit()


class Batch(ops.BatchOps):
    """Requests sent in one ``Batch`` message (see :meth:`Client.batch`)."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self._client = client

    def send(self) -> List[Outcome]:
        """Each request's outcome, in order: a :class:`WriteResult`, an :class:`Entry` (None for
        a key that does not exist), or the :class:`Refused` it met (not raised)."""
        return self._client._run(self._send())
