"""What docs/PYTHON.md promises and an outside check found broken: a mirror found through
``$BEACON_ENDPOINT`` alone, values of other types refused, a cancelled ``async for`` over a
history that lets the program end, and a mirror started from another journal's cache that says
it is synced only once it shows this daemon's state."""

import asyncio
import threading
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

from beacon_signals import LIVE, Client, ConfigurationError, History, Mirror
from beacon_signals.endpoints import resolve

from conftest import Daemon


def test_with_only_beacon_endpoint_set_a_mirror_sees_live_changes(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BEACON_PUB_ENDPOINT", "BEACON_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BEACON_ENDPOINT", f"ipc://{daemon.runtime_dir}/beacon.req")
    client = Client()
    assert client.endpoints.publish == f"ipc://{daemon.runtime_dir}/beacon.pub"
    with Mirror(client, ["e."]) as mirror:
        assert mirror.wait_synced(30)
        written = client.set("e.k", "live")
        assert mirror.wait_until(written.revision, 30)
        assert mirror.get("e.k").value == "live"
        assert mirror.status == LIVE


def test_a_request_endpoint_implies_its_publish_endpoint_or_a_mirror_is_refused(tmp_path: Path) -> None:
    assert resolve(endpoint="tcp://127.0.0.1:7401", environ={}).publish == "tcp://127.0.0.1:7402"
    assert resolve(endpoint="tcp://127.0.0.1:7401", pub_endpoint="tcp://127.0.0.1:9000", environ={}).publish == "tcp://127.0.0.1:9000"
    odd = Client(endpoint=f"ipc://{tmp_path}/odd.sock")
    assert odd.endpoints.publish is None
    with pytest.raises(ConfigurationError, match="pub_endpoint"):
        Mirror(odd, ["e."])
    with pytest.raises(ConfigurationError, match="pub_endpoint"):
        History(odd, "e.")


@pytest.mark.parametrize("value", [(1, 2), bytearray(b"ab"), memoryview(b"ab"), [1, (2,)], {"k": bytearray(b"x")}])
def test_a_value_of_another_type_is_refused_and_nothing_is_stored(daemon: Daemon, value: Any) -> None:
    client = daemon.client()
    with pytest.raises(TypeError):
        client.set("t.k", value)
    assert client.get("t.k") is None


def test_cancelling_an_async_for_over_a_history_lets_the_program_end(daemon: Daemon) -> None:
    client = daemon.client()
    client.set("h.k", 1)
    outcome: Dict[str, bool] = {}

    async def consume() -> None:
        async for _ in History(client, "h."):
            pass  # one event, then it waits for live ones that never come

    def program() -> None:
        async def main() -> None:
            try:
                await asyncio.wait_for(consume(), 1)
            except asyncio.TimeoutError:
                outcome["timed_out"] = True
        asyncio.run(main())
        outcome["ended"] = True

    thread = threading.Thread(target=program, daemon=True)
    thread.start()
    thread.join(30)
    assert outcome == {"timed_out": True, "ended": True}, "asyncio.run() did not return after the cancellation"


def test_a_mirror_from_another_journals_cache_is_synced_only_with_this_daemons_state(make_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    caches = [str(tmp_path / "synced.db"), str(tmp_path / "until.db")]
    first = make_daemon(name="first")
    old = first.client()
    for index in range(50):
        old.set(f"c.{index}", index)
    for cache in caches:
        with Mirror(old, ["c."], cache=cache) as mirror:
            assert mirror.wait_synced(30) and len(mirror.view()[1]) == 50
    first.stop()
    second = make_daemon(name="second")
    new = second.client()
    written = new.set("c.new", "here")
    with Mirror(new, ["c."], cache=caches[0]) as mirror:
        assert mirror.wait_synced(30)
        assert set(mirror.view()[1]) == {"c.new"}, "the old journal's keys are gone once it says it is synced"
        assert mirror.status == LIVE
    with Mirror(new, ["c."], cache=caches[1]) as mirror:
        assert mirror.wait_until(1, 30)
        assert set(mirror.view()[1]) == {"c.new"} and mirror.revision >= written.revision
