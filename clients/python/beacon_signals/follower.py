"""The client rules of PROTOCOL.md §6 for one prefix, as a value: no sockets, no threads.

A :class:`PrefixFollower` is told what arrived (diffs, commit markers, heartbeats) and answers
with the revision it completed, if any; when it finds a gap it sets :attr:`needs` to
``"repair"`` (fetch a delta from :attr:`through`) or ``"resync"`` (take a snapshot), and
discards everything until the driver reports the repair done with :meth:`synced`.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from . import beacon_pb2 as pb


class PrefixFollower:
    """The follower of one prefix (see the module)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        #: The epoch the follower is in (E), and the revision it is complete through (T); None until synced.
        self.epoch: Optional[int] = None
        self.through: Optional[int] = None
        #: None, "repair" or "resync": what the driver must do before anything else is taken in.
        self.needs: Optional[str] = "resync"
        self._collecting: Optional[Tuple[int, int, Dict[int, pb.Event]]] = None  # (revision, parts expected, {part: event})

    def synced(self, epoch: int, revision: int) -> None:
        """A snapshot or delta made the follower complete through `revision` of `epoch`."""
        self.epoch = epoch
        self.through = revision
        self.needs = None
        self._collecting = None

    def _repair(self) -> None:
        self.needs = "repair"
        self._collecting = None  # a partial revision is discarded: the delta brings it whole

    def _resync(self) -> None:
        self.needs = "resync"
        self._collecting = None

    def _taking(self) -> Optional[int]:
        """The revision the follower is complete through, when it takes what arrives (it needs
        nothing); None while it waits for a repair or a resync."""
        if self.needs is not None:
            return None
        assert self.through is not None, "a follower that needs nothing has been synced"
        return self.through

    def _mark(self, marks: Sequence[pb.PrefixMark]) -> Optional[pb.PrefixMark]:
        for mark in marks:
            if mark.prefix == self.prefix:
                return mark
        return None

    def on_diff(self, diff: pb.Diff) -> Optional[List[pb.Event]]:
        """Takes a diff of a key under the prefix (§6 step 3).

        Returns the events of a revision it completed, in part order, or None."""
        through = self._taking()
        if through is None:
            return None
        if diff.epoch != self.epoch:
            self._resync()
            return None
        event = diff.event
        if event.revision <= through:
            return None
        mark = self._mark(diff.marks)
        if mark is None or mark.previous_revision > through:
            self._repair()  # not sequenced yet, or a revision under the prefix was missed
            return None
        if self._collecting is not None and self._collecting[0] != event.revision:
            self._repair()  # parts of the revision being collected were lost
            return None
        if self._collecting is None:
            self._collecting = (event.revision, mark.parts, {})
        revision, expected, parts = self._collecting
        parts[event.part] = event
        if len(parts) < expected:
            return None
        self._collecting = None
        self.through = revision
        return [parts[part] for part in sorted(parts)]

    def on_marker(self, marker: pb.CommitMarker) -> None:
        """Takes a commit marker (§6 step 4)."""
        through = self._taking()
        if through is None:
            return
        if marker.epoch != self.epoch:
            self._resync()
        elif self._collecting is not None and marker.revision >= self._collecting[0]:
            self._repair()  # the revision being collected will never be whole
        elif marker.revision > through and self._mark(marker.marks) is not None:
            self._repair()  # it touched the prefix, and no diff of it came

    def on_heartbeat(self, heartbeat: pb.Heartbeat) -> None:
        """Takes a heartbeat (§6 step 5): a bookmark, or the sign of a gap."""
        through = self._taking()
        if through is None:
            return
        if heartbeat.epoch != self.epoch:
            self._resync()
            return
        if self._collecting is not None:
            self._repair()
            return
        head = next((head for head in heartbeat.prefixes if head.prefix == self.prefix), None)
        if head is None or head.revision > through:
            self._repair()
        else:
            self.through = max(through, heartbeat.head_revision)
