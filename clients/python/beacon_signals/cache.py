"""A mirror's copy on disk (the standard library's sqlite3): where it starts after a restart,
asking the daemon only for what changed since."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Dict, Iterable, Optional, Tuple

from .operations import Entry
from .values import Value


class MirrorCache:
    """The state of a mirror of `prefixes`, its epoch and the revision it is complete through, in
    one SQLite file. A file written for other prefixes is not used (the mirror takes the state anew)."""

    def __init__(self, path: str, prefixes: Iterable[str]) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, entry TEXT NOT NULL)")
        self._prefixes = json.dumps(sorted(prefixes))
        self._saved: Dict[str, Entry] = {}

    def load(self) -> Optional[Tuple[int, int, Dict[str, Entry]]]:
        """``(epoch, revision, {key: Entry})``, or None when the file holds no copy of these prefixes."""
        meta = dict(self._db.execute("SELECT name, value FROM meta"))
        if meta.get("prefixes") != self._prefixes or "epoch" not in meta:
            return None
        state: Dict[str, Entry] = {}
        for key, text in self._db.execute("SELECT key, entry FROM entries"):
            fields = json.loads(text)
            fields["value"] = _decode(fields["value"])
            state[key] = Entry(key=key, **fields)
        self._saved = dict(state)
        return int(meta["epoch"]), int(meta["revision"]), state

    def save(self, epoch: Optional[int], revision: int, state: Dict[str, Entry]) -> None:
        """Writes what changed since the last save, with the revision it is complete through."""
        changed = [(key, entry) for key, entry in state.items() if self._saved.get(key) is not entry]
        removed = [key for key in self._saved if key not in state]
        self._db.execute("BEGIN")
        try:
            self._db.executemany("DELETE FROM entries WHERE key = ?", [(key,) for key in removed])
            self._db.executemany("INSERT OR REPLACE INTO entries (key, entry) VALUES (?, ?)",
                                 [(key, json.dumps(_fields(entry))) for key, entry in changed])
            self._db.executemany("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                                 [("prefixes", self._prefixes), ("epoch", str(epoch)), ("revision", str(revision))])
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._saved = dict(state)

    def close(self) -> None:
        self._db.close()


def _fields(entry: Entry) -> Dict[str, Any]:
    return {"value": _encode(entry.value), "version": entry.version, "create_revision": entry.create_revision,
            "mod_revision": entry.mod_revision, "expires_at_ms": entry.expires_at_ms, "mod_time_ms": entry.mod_time_ms}


def _encode(value: Value) -> Dict[str, Any]:
    """JSON that keeps every Beacon type apart (bytes, int and float, nested lists and maps)."""
    if isinstance(value, bytes):
        return {"b": value.hex()}
    if isinstance(value, float):
        return {"f": repr(value)}
    if isinstance(value, list):
        return {"l": [_encode(item) for item in value]}
    if isinstance(value, dict):
        return {"m": {key: _encode(item) for key, item in value.items()}}
    return {"v": value}  # None, bool, int, str


def _decode(tagged: Dict[str, Any]) -> Value:
    ((tag, value),) = tagged.items()
    if tag == "b":
        return bytes.fromhex(value)
    if tag == "f":
        return float(value)
    if tag == "l":
        return [_decode(item) for item in value]
    if tag == "m":
        return {key: _decode(item) for key, item in value.items()}
    result: Value = value  # None, bool, int, str
    return result
