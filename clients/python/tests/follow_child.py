"""A mirror (or a followed history) in a process of its own, so that a test can freeze it with
SIGSTOP. Prints one JSON line per update (or event), with the mirror's counters."""

import json
import os
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from beacon_signals import Client, History, Mirror, Update  # noqa: E402


def encode(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def main() -> None:
    runtime_dir, mode, receive_hwm, *prefixes = sys.argv[1:]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    client = Client(runtime_dir, timeout=10)
    out = sys.stdout
    if mode == "history":
        for item in History(client, prefixes[0], receive_hwm=int(receive_hwm)):
            out.write(json.dumps({"revision": item.revision, "key": getattr(item, "key", None),
                                  "value": encode(getattr(item, "value", None)), "resync": not hasattr(item, "key")}) + "\n")
            out.flush()
        return
    mirror = Mirror(client, prefixes, receive_hwm=int(receive_hwm), start=False)

    def report(update: Update) -> None:
        out.write(json.dumps({"revision": update.revision, "resync": update.resync,
                              "changes": {key: None if entry is None else encode(entry.value) for key, entry in update.changes.items()},
                              "counters": mirror.counters}) + "\n")
        out.flush()

    mirror.on_change(report)
    mirror.start()
    mirror.wait_synced(30)
    out.write(json.dumps({"synced": mirror.revision}) + "\n")
    out.flush()
    signal.pause()


if __name__ == "__main__":
    main()
