"""Beacon for Python: read, write and mirror the signals a ``beacond`` daemon keeps.

>>> from beacon_signals import Client, Mirror
>>> client = Client()                      # the daemon of this machine, found as `beacon` finds it
>>> client.set("app.mode", "auto")
>>> with Mirror(client, ["app.", "net."]) as mirror:
...     mirror.on_change(lambda update: print(update.revision, update.changes))

For asyncio programs, :mod:`beacon_signals.asyncio` has the same client as coroutines.
"""

from .client import Batch, Client, Transaction
from .endpoints import Curve, Endpoints
from .errors import BeaconError, ConfigurationError, Refused, Unavailable
from .mirror import CONNECTING, LIVE, STALE, SYNCING, History, Mirror, Update
from .operations import Entry, Event, Outcome, PingInfo, Resync, WriteResult
from .values import Value, from_wire, to_wire

__version__ = "0.1.0"

__all__ = [
    "Batch", "BeaconError", "Client", "ConfigurationError", "Curve", "Endpoints", "Entry", "Event", "History", "Mirror",
    "Outcome", "PingInfo", "Refused", "Resync", "Transaction", "Unavailable", "Update", "Value", "WriteResult", "from_wire",
    "to_wire",
    "CONNECTING", "SYNCING", "LIVE", "STALE",
]
