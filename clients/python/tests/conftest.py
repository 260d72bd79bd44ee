"""Real beacond processes for the tests: each on its own directories, stopped however the test ends."""

import concurrent.futures
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterator, List, Optional, TypeVar, Union

import pytest

T = TypeVar("T")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package as it is in the tree

from beacon_signals import Client, PingInfo, Unavailable  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BIN_DIR = os.environ.get("BEACON_BIN_DIR") or os.path.join(REPO, ".build", "debug")


def _die_with_parent() -> None:
    """The daemon is killed when the test process ends, however it ends."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# PR_SET_PDEATHSIG fires when the *thread* that forked exits: daemons are started on this one
# thread, which lives as long as the test process, whichever thread asks (an asyncio test's own).
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")


def spawn(arguments: List[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Starts `arguments` with its output to `log`, killed when the test process ends."""
    return _SPAWNER.submit(lambda: subprocess.Popen(arguments, stdout=log, stderr=log, preexec_fn=_die_with_parent)).result()


def wait_for(condition: Callable[[], Optional[T]], timeout: float = 30.0, what: str = "the condition") -> T:
    """Waits until `condition()` is true; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def must(value: Optional[T]) -> T:
    """`value`, which the test expects to be there (a key's entry, say)."""
    assert value is not None
    return value


def process_state(pid: int) -> Optional[str]:
    """A process's state letter in /proc: ``T`` once every thread of it has stopped (Linux stops
    them one by one, after `kill` returns), else its first thread's; None when it is gone."""
    try:
        states = []
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/stat") as file:
                states.append(file.read().rsplit(")", 1)[1].split()[0])
    except (OSError, IndexError):
        return None
    if states and all(state in ("T", "t") for state in states):
        return "T"
    return next((state for state in states if state not in ("T", "t")), None)


class Daemon:
    """A beacond on `directory`'s run/ and state/ directories."""

    def __init__(self, directory: Union[str, Path], *args: str, config: Optional[str] = None) -> None:
        self.directory = str(directory)
        self.runtime_dir = os.path.join(self.directory, "run")
        self.state_dir = os.path.join(self.directory, "state")
        self.args = list(args)
        if config:
            path = os.path.join(self.directory, "beacond.conf")
            with open(path, "w") as file:
                file.write(config)
            self.args += ["--config", path]
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    @property
    def running(self) -> subprocess.Popen[bytes]:
        """The daemon's process (started)."""
        assert self.process is not None
        return self.process

    def start(self) -> None:
        log = open(os.path.join(self.directory, "beacond.log"), "ab")
        self.process = spawn([os.path.join(BIN_DIR, "beacond"), "--runtime-dir", self.runtime_dir, "--state-dir", self.state_dir,
                              "--heartbeat-ms", "100", *self.args], log)
        client = Client(self.runtime_dir, timeout=1.0)
        try:
            def answers() -> Optional[PingInfo]:
                if self.running.poll() is not None:
                    pytest.fail(f"beacond exited with {self.running.returncode}: {self.log()[-2000:]}")
                try:
                    return client.ping()
                except Unavailable:
                    return None
            wait_for(answers, what="beacond to answer")
        finally:
            client.close()

    def log(self) -> str:
        with open(os.path.join(self.directory, "beacond.log"), errors="replace") as file:
            return file.read()

    def client(self, **options: Any) -> Client:
        return Client(self.runtime_dir, timeout=options.pop("timeout", 10.0), **options)

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode if self.process else None

    def restart(self, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        self.start()

    def _state(self) -> Optional[str]:
        return process_state(self.running.pid)

    def pause(self) -> None:
        """Stops the daemon (SIGSTOP) and waits until the kernel says it is stopped: a signal is
        delivered after `kill` returns, and a request can still be answered meanwhile."""
        self.running.send_signal(signal.SIGSTOP)
        wait_for(lambda: self._state() == "T", what="beacond to stop")

    def resume(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            wait_for(lambda: self._state() != "T", what="beacond to run again")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    started = Daemon(tmp_path)
    yield started
    started.resume()
    started.stop()


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Starts daemons with arguments and configuration of the test's choosing."""
    daemons: List[Daemon] = []

    def make(*args: str, config: Optional[str] = None, name: str = "d") -> Daemon:
        directory = tmp_path / f"{name}{len(daemons)}"
        directory.mkdir()
        made = Daemon(directory, *args, config=config)
        daemons.append(made)
        return made

    yield make
    for made in daemons:
        made.resume()
        made.stop()
