"""What goes wrong, as exceptions."""

from __future__ import annotations

from . import beacon_pb2 as pb


class BeaconError(Exception):
    """Any Beacon failure."""


class Refused(BeaconError):
    """The daemon refused a request; ``code`` is the protocol's error code (``"VERSION_CONFLICT"``…).

    The details the daemon gave are attributes: ``key``, ``current_version`` (a version
    conflict, an existing key), ``compacted_revision`` (history compacted away), ``head_revision``,
    ``op_index`` (which operation of a transaction), ``retry_after_ms`` (a rate limit).
    """

    def __init__(self, error: pb.Error) -> None:
        self.code: str = pb.Error.Code.Name(error.code)
        self.message = error.message
        self.key = error.key
        self.current_version = error.current_version
        self.compacted_revision = error.compacted_revision
        self.head_revision = error.head_revision
        self.op_index = error.op_index
        self.retry_after_ms = error.retry_after_ms
        super().__init__(f"{self.code}: {self.message}")

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later as it is (READ_ONLY, RATE_LIMITED, UPSTREAM_UNAVAILABLE)."""
        return self.code in ("READ_ONLY", "RATE_LIMITED", "UPSTREAM_UNAVAILABLE")


class Unavailable(BeaconError):
    """No daemon answered in time (none runs there, or it is stopped or restarting)."""


class ConfigurationError(BeaconError, ValueError):
    """An endpoint, key or option that cannot be used."""
