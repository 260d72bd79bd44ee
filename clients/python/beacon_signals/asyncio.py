"""Beacon for asyncio: every request a coroutine, mirrors and history as ``async for``.

>>> from beacon_signals.asyncio import AsyncClient
>>> async def main() -> None:
...     async with AsyncClient() as client:
...         await client.set("app.mode", "auto")
...         async with client.mirror(["app."]) as mirror:
...             await mirror.wait_synced()
...             async for update in mirror.updates():
...                 print(update.revision, update.changes)

The rules are the blocking client's (the same operations run over an asyncio socket): a write
that gets no answer is sent again with its write id, on a new connection, and applied at most
once; a refusal raises :class:`~beacon_signals.Refused`; no answer in time,
:class:`~beacon_signals.Unavailable`. Cancelling a request drops its connection (a late reply
is for nobody) and leaves nothing running; a cancelled write may have been applied (send it
again with the same ``write_id`` to find out). One request at a time per client: concurrent
tasks take turns. Mirrors and history read their sockets on a thread of their own and hand each
update to the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Literal, Optional, Tuple, Type, TypeVar, \
    Union, overload

import zmq
import zmq.asyncio

from . import beacon_pb2 as pb
from . import operations as ops
from .client import Client, RequestIDs, is_upstream_unavailable, request_socket, unavailable, write_unavailable
from .endpoints import Endpoints
from .errors import BeaconError
from .mirror import History, Mirror, Update
from .operations import (Entry, Event, HistoryPage, Outcome, PingInfo, Resync, SessionName, WriteID, WriteResult,
                         delete_op, put_op, write_id_bytes)
from .values import Value

T = TypeVar("T")

__all__ = ["AsyncBatch", "AsyncClient", "AsyncMirror", "AsyncTransaction", "Updates"]


class AsyncClient:
    """A connection to ``beacond``'s request socket for asyncio programs.

    Found, and configured, as :class:`~beacon_signals.Client` is (the same arguments). Create it
    and use it on one event loop; ``async with AsyncClient() as client:`` closes it on leaving.
    """

    def __init__(self, runtime_dir: Optional[str] = None, *, endpoint: Optional[str] = None,
                 pub_endpoint: Optional[str] = None, server_key: Optional[str] = None, key_file: Optional[str] = None,
                 timeout: float = 5.0, write_timeout: float = 30.0, context: Optional[zmq.Context[Any]] = None) -> None:
        # The blocking twin finds the endpoints, and serves mirrors and history (their threads).
        self._blocking = Client(runtime_dir, endpoint=endpoint, pub_endpoint=pub_endpoint, server_key=server_key,
                                key_file=key_file, timeout=timeout, write_timeout=write_timeout, context=context)
        self._context = zmq.asyncio.Context.shadow(self._blocking._context.underlying)
        self._socket: Optional[zmq.asyncio.Socket] = None
        self._turn = asyncio.Lock()
        self._ids = RequestIDs()
        self._closed = False
        #: Writes sent again after a silence (on a new connection, with the same write id).
        self.resends = 0

    @property
    def endpoints(self) -> Endpoints:
        return self._blocking.endpoints

    @property
    def timeout(self) -> float:
        return self._blocking.timeout

    @property
    def write_timeout(self) -> float:
        return self._blocking.write_timeout

    @property
    def blocking(self) -> Client:
        """A blocking :class:`~beacon_signals.Client` of the same daemon, with the same settings."""
        return self._blocking

    # -- connection

    def _reset(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    async def close(self) -> None:
        """Closes the connection (waiting for a request under way to end or be cancelled)."""
        async with self._turn:
            self._reset()
            self._closed = True
        self._blocking.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        await self.close()

    # -- one request, one reply

    async def _exchange(self, request: pb.Request, timeout: float) -> Optional[pb.Reply]:
        """Sends `request` and returns its reply, or None when none came within `timeout` seconds.
        Cancelled, it drops the connection: the reply, if one comes, is for nobody."""
        if self._closed:
            raise BeaconError("the client is closed")
        if self._socket is None:
            self._socket = request_socket(self._context, self.endpoints)
        socket = self._socket
        body = request.SerializeToString()
        try:
            return await asyncio.wait_for(self._send_and_receive(socket, request.id, body), timeout)
        except asyncio.TimeoutError:
            return None
        except BaseException:
            self._reset()
            raise

    @staticmethod
    async def _send_and_receive(socket: zmq.asyncio.Socket, request_id: int, body: bytes) -> pb.Reply:
        await socket.send(body)  # once connected: a request is never queued for a daemon that is not there
        while True:
            frames = await socket.recv_multipart()
            reply = pb.Reply()
            reply.ParseFromString(frames[-1])
            if reply.id == request_id:
                return reply
            # A late reply to an earlier request that was given up on: not this one's.

    async def _perform(self, call: ops.Call) -> pb.Reply:
        async with self._turn:
            request = self._ids.request(call.fields)
            if not call.write:
                timeout = self.timeout if call.timeout is None else call.timeout
                reply = await self._exchange(request, timeout)
                if reply is None:
                    self._reset()
                    raise unavailable(self.endpoints, timeout)
                return reply
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.write_timeout
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise write_unavailable(self.endpoints, self.write_timeout)
                reply = await self._exchange(request, min(self.timeout, left))
                if reply is None:
                    self._reset()  # what the old connection held is gone; the same write, same id, again
                    self.resends += 1
                elif is_upstream_unavailable(reply):
                    await asyncio.sleep(min(0.1, max(left - 0.1, 0)))
                    self.resends += 1
                else:
                    return reply

    async def _run(self, operation: ops.Operation[T]) -> T:
        try:
            call = next(operation)
            while True:
                call = ops.advance(operation, await self._perform(call))
        except StopIteration as done:
            result: T = done.value
            return result

    async def call(self, timeout: Optional[float] = None, **op: Any) -> pb.Reply:
        """Sends one request (``op`` as in ``beacon.v1.Request``) and returns its reply."""
        return await self._run(ops.raw(timeout, op))

    # -- reads

    async def ping(self) -> PingInfo:
        return await self._run(ops.ping())

    async def sync(self) -> int:
        """A read index (see :meth:`beacon_signals.Client.sync`)."""
        return await self._run(ops.sync())

    async def get(self, key: str, *, consistent: bool = False) -> Optional[Entry]:
        """The key's :class:`~beacon_signals.Entry`, or None (see :meth:`beacon_signals.Client.get`)."""
        return await self._run(ops.get(key, consistent))

    @overload
    async def list(self, prefix: str = "", keys_only: Literal[False] = False, *,
                   consistent: bool = False) -> Dict[str, Entry]: ...

    @overload
    async def list(self, prefix: str, keys_only: Literal[True], *, consistent: bool = False) -> List[str]: ...

    async def list(self, prefix: str = "", keys_only: bool = False, *,
                   consistent: bool = False) -> Union[Dict[str, Entry], List[str]]:
        """Every live key under `prefix` (see :meth:`beacon_signals.Client.list`)."""
        if keys_only:
            return await self._run(ops.list_keys(prefix, consistent))
        return await self._run(ops.list_entries(prefix, consistent))

    async def stats(self) -> Dict[str, Any]:
        return await self._run(ops.stats())

    async def snapshot(self, prefix: str = "") -> Resync:
        return await self._run(ops.snapshot(prefix))

    # -- writes

    async def set(self, key: str, value: Value, *, if_version: Optional[int] = None, create_only: bool = False,
                  ttl_ms: int = 0, session: Optional[SessionName] = None, write_id: Optional[WriteID] = None) -> WriteResult:
        """Writes `value` to `key` (see :meth:`beacon_signals.Client.set`)."""
        put = put_op(key, value, if_version, create_only, ttl_ms, session)
        put.write_id = write_id_bytes(write_id)
        return await self._run(ops.write({"put": put}))

    async def delete(self, key: str, *, if_version: Optional[int] = None, write_id: Optional[WriteID] = None) -> WriteResult:
        delete = delete_op(key, if_version)
        delete.write_id = write_id_bytes(write_id)
        return await self._run(ops.write({"delete": delete}))

    def transaction(self) -> AsyncTransaction:
        """``async with client.transaction() as txn:`` commits on leaving the block."""
        return AsyncTransaction(self)

    def batch(self) -> AsyncBatch:
        return AsyncBatch(self)

    async def keep_alive(self, session: SessionName, ttl_ms: int) -> Tuple[int, int]:
        return await self._run(ops.keep_alive(session, ttl_ms))

    async def end_session(self, session: SessionName) -> None:
        await self.keep_alive(session, 0)

    # -- history and mirrors

    async def history_page(self, prefix: str, from_revision: int = 0, to_revision: int = 0, exact: bool = False,
                           limit: int = 0) -> HistoryPage:
        return await self._run(ops.history_page(prefix, from_revision, to_revision, exact, limit))

    @overload
    def history(self, prefix: str = "", from_revision: int = 0, to_revision: int = 0, exact: bool = False,
                follow: Literal[False] = False) -> AsyncIterator[Event]: ...

    @overload
    def history(self, prefix: str = "", from_revision: int = 0, to_revision: int = 0, exact: bool = False, *,
                follow: Literal[True]) -> AsyncIterator[Union[Event, Resync]]: ...

    async def history(self, prefix: str = "", from_revision: int = 0, to_revision: int = 0, exact: bool = False,
                      follow: bool = False) -> AsyncIterator[Union[Event, Resync]]:
        """``async for event in client.history(...)``: as :meth:`beacon_signals.Client.history`."""
        if follow:
            async for item in History(self._blocking, prefix, from_revision=from_revision):
                yield item
            return
        start = from_revision
        while True:
            events, through, more = await self.history_page(prefix, start, to_revision, exact)
            for event in events:
                yield event
            if not more:
                return
            start = through + 1

    def mirror(self, prefixes: Union[str, Iterable[str]], **options: Any) -> AsyncMirror:
        """An :class:`AsyncMirror` of `prefixes` on the running loop (``options`` as for
        :class:`~beacon_signals.Mirror`: ``cache=``, ``receive_hwm=``, …)."""
        return AsyncMirror(self, prefixes, **options)


class AsyncTransaction(ops.TransactionOps):
    """Operations applied at one revision, or not at all (see :meth:`AsyncClient.transaction`)."""

    def __init__(self, client: AsyncClient) -> None:
        super().__init__()
        self._client = client

    async def commit(self, write_id: Optional[WriteID] = None) -> WriteResult:
        return await self._client._run(self._commit(write_id))

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        if kind is None:
            await self.commit()


class AsyncBatch(ops.BatchOps):
    """Requests sent in one ``Batch`` message (see :meth:`AsyncClient.batch`)."""

    def __init__(self, client: AsyncClient) -> None:
        super().__init__()
        self._client = client

    async def send(self) -> List[Outcome]:
        return await self._client._run(self._send())


class Updates(AsyncIterator[Update]):
    """A mirror's updates as an async iterator (see :meth:`AsyncMirror.updates`)."""

    def __init__(self, queues: List[asyncio.Queue[Optional[Update]]]) -> None:
        self._queues = queues
        self._queue: asyncio.Queue[Optional[Update]] = asyncio.Queue()
        queues.append(self._queue)
        self._ended = False

    def __aiter__(self) -> Updates:
        return self

    async def __anext__(self) -> Update:
        if self._ended:
            raise StopAsyncIteration
        update = await self._queue.get()
        if update is None:
            await self.aclose()
            raise StopAsyncIteration
        return update

    async def aclose(self) -> None:
        """Ends the iteration: no more updates are kept for it."""
        self._ended = True
        if self._queue in self._queues:
            self._queues.remove(self._queue)


class AsyncMirror(Mapping[str, Entry]):
    """A :class:`~beacon_signals.Mirror` for asyncio: the same copy, by the same rules, with
    waits that are coroutines and its updates as ``async for update in mirror.updates()``.

    Create it on the event loop it serves (``client.mirror(...)``); ``async with`` closes it.
    It is a read-only mapping of key to :class:`~beacon_signals.Entry`, as a mirror is.
    """

    def __init__(self, client: Union[AsyncClient, Client], prefixes: Union[str, Iterable[str]], *,
                 on_change: Optional[Callable[[Update], Any]] = None, cache: Optional[str] = None,
                 receive_hwm: int = 1000, bundles: bool = True, every_revision: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._queues: List[asyncio.Queue[Optional[Update]]] = []
        self._woken = asyncio.Event()
        blocking = client.blocking if isinstance(client, AsyncClient) else client
        self._mirror = Mirror(blocking, prefixes, on_change=self._deliver, loop=self._loop, cache=cache,
                              receive_hwm=receive_hwm, bundles=bundles, every_revision=every_revision, start=False)
        if on_change is not None:
            self._mirror.on_change(on_change)
        with self._mirror._lock:
            self._mirror._wakers.append(self._wake)
        self._closed = False
        self._mirror.start()

    @property
    def mirror(self) -> Mirror:
        """The blocking :class:`~beacon_signals.Mirror` underneath (its ``counters``, say)."""
        return self._mirror

    def _wake(self) -> None:
        """Called on the mirror's thread when its state, status or error changed."""
        try:
            self._loop.call_soon_threadsafe(self._woken.set)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    def _deliver(self, update: Update) -> None:
        for queue in self._queues:
            queue.put_nowait(update)

    # -- reading

    @property
    def revision(self) -> int:
        return self._mirror.revision

    @property
    def status(self) -> str:
        return self._mirror.status

    def view(self) -> Tuple[int, Dict[str, Entry]]:
        return self._mirror.view()

    def __getitem__(self, key: str) -> Entry:
        return self._mirror[key]

    def __contains__(self, key: object) -> bool:
        return key in self._mirror

    def __len__(self) -> int:
        return len(self._mirror)

    def __iter__(self) -> Iterator[str]:
        return iter(self._mirror)

    async def wait_synced(self, timeout: float = 10.0) -> bool:
        """As :meth:`beacon_signals.Mirror.wait_synced`, without blocking the loop."""
        return await self._wait(self._mirror._synced_condition, timeout)

    async def wait_until(self, revision: int, timeout: float = 10.0) -> bool:
        """As :meth:`beacon_signals.Mirror.wait_until`, without blocking the loop."""
        return await self._wait(self._mirror._through_condition(revision), timeout)

    async def _wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = self._loop.time() + timeout
        while True:
            self._woken.clear()
            if self._mirror._holds(condition):
                return True
            left = deadline - self._loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._woken.wait(), left)
            except asyncio.TimeoutError:
                pass

    def updates(self) -> Updates:
        """Each :class:`~beacon_signals.Update` delivered from this call on, in order, as an async
        iterator that ends when the mirror is closed (or its ``aclose()`` is called). Several
        may be open at once; each gets every update."""
        updates = Updates(self._queues)
        if self._closed:
            updates._queue.put_nowait(None)
        return updates

    # -- closing

    async def close(self) -> None:
        """Stops following; the updates' iterations end, the state stays readable."""
        if self._closed:
            return
        self._closed = True
        for queue in self._queues:
            queue.put_nowait(None)
        await self._loop.run_in_executor(None, self._mirror.close)

    async def __aenter__(self) -> AsyncMirror:
        return self

    async def __aexit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        await self.close()
