"""Real beacond processes for the tests: each on its own directories, stopped however the test ends."""

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package as it is in the tree

from beacon_signals import Client, Unavailable  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BIN_DIR = os.environ.get("BEACON_BIN_DIR") or os.path.join(REPO, ".build", "debug")


def _die_with_parent():
    """The daemon is killed when the test process ends, however it ends."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def wait_for(condition, timeout=30.0, what="the condition"):
    """Waits until `condition()` is true; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def process_state(pid):
    """A process's state letter in /proc (``T``: stopped), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class Daemon:
    """A beacond on `directory`'s run/ and state/ directories."""

    def __init__(self, directory, *args, config=None):
        self.directory = str(directory)
        self.runtime_dir = os.path.join(self.directory, "run")
        self.state_dir = os.path.join(self.directory, "state")
        self.args = list(args)
        if config:
            path = os.path.join(self.directory, "beacond.conf")
            with open(path, "w") as file:
                file.write(config)
            self.args += ["--config", path]
        self.process = None
        self.start()

    def start(self):
        log = open(os.path.join(self.directory, "beacond.log"), "ab")
        self.process = subprocess.Popen(
            [os.path.join(BIN_DIR, "beacond"), "--runtime-dir", self.runtime_dir, "--state-dir", self.state_dir,
             "--heartbeat-ms", "100", *self.args],
            stdout=log, stderr=log, preexec_fn=_die_with_parent)
        client = Client(self.runtime_dir, timeout=1.0)
        try:
            def answers():
                if self.process.poll() is not None:
                    pytest.fail(f"beacond exited with {self.process.returncode}: {self.log()[-2000:]}")
                try:
                    return client.ping()
                except Unavailable:
                    return None
            wait_for(answers, what="beacond to answer")
        finally:
            client.close()

    def log(self):
        with open(os.path.join(self.directory, "beacond.log"), errors="replace") as file:
            return file.read()

    def client(self, **options):
        return Client(self.runtime_dir, timeout=options.pop("timeout", 10.0), **options)

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def restart(self, sig=signal.SIGTERM):
        self.stop(sig)
        self.start()

    def _state(self):
        return process_state(self.process.pid)

    def pause(self):
        """Stops the daemon (SIGSTOP) and waits until the kernel says it is stopped: a signal is
        delivered after `kill` returns, and a request can still be answered meanwhile."""
        self.process.send_signal(signal.SIGSTOP)
        wait_for(lambda: self._state() == "T", what="beacond to stop")

    def resume(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            wait_for(lambda: self._state() != "T", what="beacond to run again")


@pytest.fixture
def daemon(tmp_path):
    started = Daemon(tmp_path)
    yield started
    started.resume()
    started.stop()


@pytest.fixture
def make_daemon(tmp_path):
    """Starts daemons with arguments and configuration of the test's choosing."""
    daemons = []

    def make(*args, config=None, name="d"):
        directory = tmp_path / f"{name}{len(daemons)}"
        directory.mkdir()
        made = Daemon(directory, *args, config=config)
        daemons.append(made)
        return made

    yield make
    for made in daemons:
        made.resume()
        made.stop()
