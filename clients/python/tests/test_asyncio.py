"""The asyncio client against real daemons: every request as a coroutine, mirrors and history as
``async for``, cancellation that leaves nothing running, kill -9 and a restart; and a mirror as a
read-only mapping."""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any, Awaitable, Callable, Dict, List, TypeVar

import pytest

from beacon_signals import Entry, Event, Mirror, Refused, Resync, Update, WriteResult
from beacon_signals import beacon_pb2 as pb
from beacon_signals.asyncio import AsyncClient, AsyncMirror

from conftest import Daemon, must

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Runs `main` on a fresh event loop in a thread of its own, and fails the test if
    ``asyncio.run`` has not returned 60 s later (something left blocked)."""
    outcome: Dict[str, Any] = {}

    def program() -> None:
        try:
            outcome["result"] = asyncio.run(main())  # type: ignore[arg-type]
        except BaseException as error:  # noqa: B902 - handed to the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=program, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "asyncio.run() did not return: something was left blocked"
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["result"]
    return result


async def until(condition: Callable[[], bool]) -> None:
    """Lets the loop run until `condition()` holds (30 s at most)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not condition():
        assert loop.time() < deadline, "timed out waiting for a condition"
        await asyncio.sleep(0.01)


def test_every_request_is_a_coroutine(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.runtime_dir) as client:
            first = await client.set("a.mode", "auto")
            assert first.version == 1
            second = await client.set("a.mode", "manual", if_version=1)
            entry = must(await client.get("a.mode"))
            assert (entry.value, entry.version, entry.mod_revision) == ("manual", 2, second.revision)
            assert await client.get("a.none") is None
            with pytest.raises(Refused) as refused:
                await client.set("a.mode", "x", if_version=1)
            assert refused.value.code == "VERSION_CONFLICT" and refused.value.current_version == 2
            async with client.transaction() as txn:
                txn.set("a.t1", 1).set("a.t2", [1, 2])
            assert txn.result.versions == (1, 1)
            assert await client.list("a.", True) == ["a.mode", "a.t1", "a.t2"]
            entries = await client.list("a.")
            assert entries["a.t2"].value == [1, 2] and entries["a.t1"].mod_revision == txn.result.revision
            written, read, missing = await client.batch().set("a.b", 4).get("a.t1").get("a.zz").send()
            assert isinstance(written, WriteResult) and written.revision == txn.result.revision + 1
            assert isinstance(read, Entry) and read.value == 1 and missing is None
            assert await client.sync() == written.revision
            assert must(await client.get("a.b", consistent=True)).value == 4
            keys, _ = await client.keep_alive("a.session", 10_000)
            await client.set("a.owned", True, session="a.session")
            await client.end_session("a.session")
            assert keys == 0 and await client.get("a.owned") is None
            deleted = await client.delete("a.mode", if_version=2)
            assert deleted.versions == (0,)
            events = [event async for event in client.history("a.mode", exact=True)]
            assert [event.kind for event in events] == ["put", "put", "delete"]
            assert [event.value for event in events if isinstance(event, Event)] == ["auto", "manual", None]
            assert (await client.ping()).head_revision == (await client.stats())["head_revision"]

    run(main)


def test_concurrent_tasks_on_one_client_take_turns(daemon: Daemon) -> None:
    async def main() -> List[WriteResult]:
        async with AsyncClient(daemon.runtime_dir) as client:
            return await asyncio.gather(*(client.set(f"c.{index}", index) for index in range(50)))

    results = run(main)
    assert sorted(result.revision for result in results) == list(range(1, 51))
    assert daemon.client().list("c.", True) == sorted(f"c.{index}" for index in range(50))


def test_a_cancelled_request_ends_at_once_and_leaves_the_client_usable(daemon: Daemon) -> None:
    daemon.client().set("x.k", "before")

    async def main() -> None:
        async with AsyncClient(daemon.runtime_dir, timeout=30) as client:
            await client.ping()
            daemon.pause()  # it reads nothing: the request waits for an answer that does not come
            request = asyncio.ensure_future(client.get("x.k"))
            await until(lambda: client._turn.locked())  # under way
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            assert client._socket is None, "its connection is dropped with it"
            daemon.resume()  # the frozen daemon answers the cancelled request too: to nobody
            await client.set("x.k", "after")
            assert must(await client.get("x.k")).value == "after"

    run(main)


def test_a_write_sent_while_the_daemon_is_killed_lands_once_after_its_restart(daemon: Daemon) -> None:
    daemon.client().set("k.k", 0)

    async def main() -> WriteResult:
        async with AsyncClient(daemon.runtime_dir, timeout=0.3, write_timeout=60) as client:
            daemon.stop(signal.SIGKILL)
            write = asyncio.ensure_future(client.set("k.k", 1))
            await until(lambda: client.resends >= 2)  # sent again, on new connections
            daemon.start()
            return await write

    result = run(main)
    history = list(daemon.client().history("k.k", exact=True))
    assert [event.value for event in history] == [0, 1], "applied exactly once"
    assert result.revision == history[-1].revision


def test_an_async_mirror_yields_whole_revisions_across_kill_9_and_is_a_mapping(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("m.before", 1)

    async def main() -> None:
        async with AsyncClient(daemon.runtime_dir) as remote:
            async with remote.mirror(["m."]) as mirror:
                assert isinstance(mirror, AsyncMirror)
                assert await mirror.wait_synced(30)
                assert mirror["m.before"].value == 1 and "m.before" in mirror and len(mirror) == 1
                updates = mirror.updates()
                async with remote.transaction() as txn:
                    txn.set("m.a", "x").set("m.b", "y")
                whole = await updates.__anext__()
                while whole.revision < txn.result.revision:  # the first sync's, if it came after updates()
                    whole = await updates.__anext__()
                assert whole.revision == txn.result.revision and set(whole.changes) == {"m.a", "m.b"}
                assert await mirror.wait_until(txn.result.revision, 30)
                assert sorted(mirror) == ["m.a", "m.b", "m.before"] and dict(mirror.items())["m.a"].value == "x"

                daemon.stop(signal.SIGKILL)
                daemon.start()
                written = await remote.set("m.after", "restart")
                update = await updates.__anext__()
                while "m.after" not in update.changes:
                    update = await updates.__anext__()
                assert must(update.changes["m.after"]).value == "restart"
                assert await mirror.wait_until(written.revision, 30)
                assert mirror["m.after"].value == "restart"
                assert not await mirror.wait_until(written.revision + 1000, 0.05), "False once the time is up"
                await updates.aclose()

    run(main)


def test_cancelling_an_async_for_over_a_mirror_or_a_history_ends_cleanly(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("h.k", 1)

    async def main() -> List[Any]:
        seen: List[Any] = []
        async with AsyncClient(daemon.runtime_dir) as remote, remote.mirror("h.") as mirror:

            async def watch() -> None:
                async for update in mirror.updates():
                    seen.append(update)

            async def follow() -> None:
                async for item in remote.history("h.", follow=True):
                    seen.append(item)

            watching, following = asyncio.ensure_future(watch()), asyncio.ensure_future(follow())
            await until(lambda: any(isinstance(item, Update) for item in seen) and any(isinstance(item, Event) for item in seen))
            watching.cancel()
            following.cancel()
            for task in (watching, following):
                with pytest.raises(asyncio.CancelledError):
                    await task
        return seen

    seen = run(main)  # returns: nothing was left blocked
    assert any(isinstance(item, Event) and item.value == 1 for item in seen)


def test_a_mirror_is_a_read_only_mapping(daemon: Daemon) -> None:
    client = daemon.client()
    for index in range(3):
        client.set(f"r.{index}", index)
    client.set("r.1x", "longer")  # a mirror of the exact key "r.1" holds the keys that start with it
    with Mirror(client, ["r."]) as mirror, Mirror(client, ["r.1"]) as exact:
        assert mirror.wait_synced(30) and exact.wait_synced(30)
        assert mirror["r.1"].value == 1 and "r.2" in mirror and "r.9" not in mirror and len(mirror) == 4
        with pytest.raises(KeyError):
            mirror["r.9"]
        assert list(mirror) == sorted(mirror.keys()) or set(mirror) == {"r.0", "r.1", "r.1x", "r.2"}
        assert {key: entry.value for key, entry in mirror.items()} == {"r.0": 0, "r.1": 1, "r.1x": "longer", "r.2": 2}
        assert mirror.get("r.9", "default") == "default"
        assert set(exact) == {"r.1", "r.1x"} and exact["r.1"].value == 1
        with pytest.raises(TypeError):
            mirror["r.1"] = None  # type: ignore[index]


def test_history_without_follow_ends_and_with_follow_reports_a_resync_where_history_was_compacted(daemon: Daemon) -> None:
    client = daemon.client()
    revisions = [client.set("p.k", index).revision for index in range(5)]
    client.call(compact=pb.Compact(revision=revisions[2]))

    async def main() -> List[Any]:
        items: List[Any] = []
        async with AsyncClient(daemon.runtime_dir) as remote:
            async for event in remote.history("p.k", exact=True, from_revision=revisions[3]):
                items.append(event)
            async for item in remote.history("p.", from_revision=1, follow=True):
                items.append(item)
                if isinstance(item, Resync):
                    break
        return items

    items = run(main)
    assert [event.revision for event in items[:2]] == revisions[3:], "from_revision included, through the head"
    resync = items[2]
    assert isinstance(resync, Resync) and resync.state["p.k"].value == 4
