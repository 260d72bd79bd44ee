from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
NULL_VALUE: NullValue

class Backup(_message.Message):
    __slots__ = ["offset", "token"]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    offset: int
    token: bytes
    def __init__(self, token: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class BackupReply(_message.Message):
    __slots__ = ["data", "done", "epoch", "offset", "revision", "size", "token"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    done: bool
    epoch: int
    offset: int
    revision: int
    size: int
    token: bytes
    def __init__(self, token: _Optional[bytes] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ..., revision: _Optional[int] = ..., epoch: _Optional[int] = ..., done: bool = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ["requests"]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[Request]
    def __init__(self, requests: _Optional[_Iterable[_Union[Request, _Mapping]]] = ...) -> None: ...

class BatchReply(_message.Message):
    __slots__ = ["replies"]
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[Reply]
    def __init__(self, replies: _Optional[_Iterable[_Union[Reply, _Mapping]]] = ...) -> None: ...

class Bundle(_message.Message):
    __slots__ = ["diffs"]
    DIFFS_FIELD_NUMBER: _ClassVar[int]
    diffs: _containers.RepeatedCompositeFieldContainer[Diff]
    def __init__(self, diffs: _Optional[_Iterable[_Union[Diff, _Mapping]]] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ["create_revision", "expires_at_ms", "key", "kind", "value", "version"]
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    DELETE: Change.Kind
    EXPIRE: Change.Kind
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PUT: Change.Kind
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    create_revision: int
    expires_at_ms: int
    key: str
    kind: Change.Kind
    value: Value
    version: int
    def __init__(self, kind: _Optional[_Union[Change.Kind, str]] = ..., key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., version: _Optional[int] = ..., create_revision: _Optional[int] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class CommitMarker(_message.Message):
    __slots__ = ["epoch", "marks", "parts", "revision"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    marks: _containers.RepeatedCompositeFieldContainer[PrefixMark]
    parts: int
    revision: int
    def __init__(self, epoch: _Optional[int] = ..., revision: _Optional[int] = ..., parts: _Optional[int] = ..., marks: _Optional[_Iterable[_Union[PrefixMark, _Mapping]]] = ...) -> None: ...

class Compact(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class CompactReply(_message.Message):
    __slots__ = ["compacted_revision", "removed"]
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    compacted_revision: int
    removed: int
    def __init__(self, compacted_revision: _Optional[int] = ..., removed: _Optional[int] = ...) -> None: ...

class Delete(_message.Message):
    __slots__ = ["if_version", "key", "write_id"]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    WRITE_ID_FIELD_NUMBER: _ClassVar[int]
    if_version: int
    key: str
    write_id: bytes
    def __init__(self, key: _Optional[str] = ..., if_version: _Optional[int] = ..., write_id: _Optional[bytes] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ["limit", "prefix", "since_revision", "snapshot_if_smaller"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SINCE_REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_IF_SMALLER_FIELD_NUMBER: _ClassVar[int]
    limit: int
    prefix: str
    since_revision: int
    snapshot_if_smaller: bool
    def __init__(self, prefix: _Optional[str] = ..., since_revision: _Optional[int] = ..., limit: _Optional[int] = ..., snapshot_if_smaller: bool = ...) -> None: ...

class Diff(_message.Message):
    __slots__ = ["epoch", "event", "marks"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    event: Event
    marks: _containers.RepeatedCompositeFieldContainer[PrefixMark]
    def __init__(self, epoch: _Optional[int] = ..., event: _Optional[_Union[Event, _Mapping]] = ..., marks: _Optional[_Iterable[_Union[PrefixMark, _Mapping]]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ["code", "compacted_revision", "current_version", "head_revision", "key", "message", "op_index", "retry_after_ms"]
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    ALREADY_EXISTS: Error.Code
    CODE_FIELD_NUMBER: _ClassVar[int]
    COMPACTED: Error.Code
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FUTURE_REVISION: Error.Code
    HEAD_REVISION_FIELD_NUMBER: _ClassVar[int]
    INTERNAL: Error.Code
    INVALID_ARGUMENT: Error.Code
    INVALID_KEY: Error.Code
    INVALID_VALUE: Error.Code
    KEY_FIELD_NUMBER: _ClassVar[int]
    MALFORMED: Error.Code
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND: Error.Code
    OP_INDEX_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_DENIED: Error.Code
    QUOTA_EXCEEDED: Error.Code
    RATE_LIMITED: Error.Code
    READ_ONLY: Error.Code
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    TOO_MANY_OPERATIONS: Error.Code
    UNKNOWN_REQUEST: Error.Code
    UNSPECIFIED: Error.Code
    UPSTREAM_UNAVAILABLE: Error.Code
    VALUE_TOO_LARGE: Error.Code
    VERSION_CONFLICT: Error.Code
    code: Error.Code
    compacted_revision: int
    current_version: int
    head_revision: int
    key: str
    message: str
    op_index: int
    retry_after_ms: int
    def __init__(self, code: _Optional[_Union[Error.Code, str]] = ..., message: _Optional[str] = ..., key: _Optional[str] = ..., current_version: _Optional[int] = ..., compacted_revision: _Optional[int] = ..., head_revision: _Optional[int] = ..., op_index: _Optional[int] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["change", "part", "parts", "revision", "timestamp_ms"]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    change: Change
    part: int
    parts: int
    revision: int
    timestamp_ms: int
    def __init__(self, revision: _Optional[int] = ..., part: _Optional[int] = ..., parts: _Optional[int] = ..., change: _Optional[_Union[Change, _Mapping]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class EventsReply(_message.Message):
    __slots__ = ["compacted_revision", "epoch", "events", "more", "prefix_revision", "revision"]
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_REVISION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    compacted_revision: int
    epoch: int
    events: _containers.RepeatedCompositeFieldContainer[Event]
    more: bool
    prefix_revision: int
    revision: int
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., revision: _Optional[int] = ..., epoch: _Optional[int] = ..., prefix_revision: _Optional[int] = ..., compacted_revision: _Optional[int] = ..., more: bool = ...) -> None: ...

class Get(_message.Message):
    __slots__ = ["consistent", "key"]
    CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    consistent: bool
    key: str
    def __init__(self, key: _Optional[str] = ..., consistent: bool = ...) -> None: ...

class GetReply(_message.Message):
    __slots__ = ["kv", "revision"]
    KV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    kv: KeyValue
    revision: int
    def __init__(self, kv: _Optional[_Union[KeyValue, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ["bundles", "compacted_revision", "epoch", "head_revision", "instance", "interval_ms", "prefixes", "timestamp_ms", "upstream"]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEAD_REVISION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    bundles: bool
    compacted_revision: int
    epoch: int
    head_revision: int
    instance: int
    interval_ms: int
    prefixes: _containers.RepeatedCompositeFieldContainer[PrefixHead]
    timestamp_ms: int
    upstream: UpstreamStatus
    def __init__(self, epoch: _Optional[int] = ..., instance: _Optional[int] = ..., head_revision: _Optional[int] = ..., compacted_revision: _Optional[int] = ..., interval_ms: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., prefixes: _Optional[_Iterable[_Union[PrefixHead, _Mapping]]] = ..., upstream: _Optional[_Union[UpstreamStatus, _Mapping]] = ..., bundles: bool = ...) -> None: ...

class History(_message.Message):
    __slots__ = ["exact", "from_revision", "limit", "prefix", "to_revision"]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    FROM_REVISION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    TO_REVISION_FIELD_NUMBER: _ClassVar[int]
    exact: bool
    from_revision: int
    limit: int
    prefix: str
    to_revision: int
    def __init__(self, prefix: _Optional[str] = ..., exact: bool = ..., from_revision: _Optional[int] = ..., to_revision: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class KeepAlive(_message.Message):
    __slots__ = ["session", "ttl_ms"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    session: bytes
    ttl_ms: int
    def __init__(self, session: _Optional[bytes] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class KeepAliveReply(_message.Message):
    __slots__ = ["expires_at_ms", "keys"]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    expires_at_ms: int
    keys: int
    def __init__(self, keys: _Optional[int] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ["create_revision", "expires_at_ms", "key", "mod_revision", "mod_time_ms", "value", "version"]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    MOD_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    create_revision: int
    expires_at_ms: int
    key: str
    mod_revision: int
    mod_time_ms: int
    value: Value
    version: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., version: _Optional[int] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., mod_time_ms: _Optional[int] = ...) -> None: ...

class List(_message.Message):
    __slots__ = ["consistent", "keys_only", "limit", "prefix", "start_after"]
    CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    KEYS_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    consistent: bool
    keys_only: bool
    limit: int
    prefix: str
    start_after: str
    def __init__(self, prefix: _Optional[str] = ..., limit: _Optional[int] = ..., start_after: _Optional[str] = ..., keys_only: bool = ..., consistent: bool = ...) -> None: ...

class ListReply(_message.Message):
    __slots__ = ["kvs", "more", "revision"]
    KVS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    kvs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    more: bool
    revision: int
    def __init__(self, kvs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., revision: _Optional[int] = ..., more: bool = ...) -> None: ...

class ListValue(_message.Message):
    __slots__ = ["items"]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, items: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class MapValue(_message.Message):
    __slots__ = ["entries"]
    class EntriesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.MessageMap[str, Value]
    def __init__(self, entries: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ["sync"]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    sync: bool
    def __init__(self, sync: bool = ...) -> None: ...

class PingReply(_message.Message):
    __slots__ = ["bundles", "compacted_revision", "consistent_reads", "daemon_version", "epoch", "head_revision", "heartbeat_interval_ms", "instance", "protocol_version", "read_revision", "upstream"]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENT_READS_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEAD_REVISION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    READ_REVISION_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    bundles: bool
    compacted_revision: int
    consistent_reads: bool
    daemon_version: str
    epoch: int
    head_revision: int
    heartbeat_interval_ms: int
    instance: int
    protocol_version: int
    read_revision: int
    upstream: UpstreamStatus
    def __init__(self, protocol_version: _Optional[int] = ..., epoch: _Optional[int] = ..., instance: _Optional[int] = ..., head_revision: _Optional[int] = ..., compacted_revision: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., daemon_version: _Optional[str] = ..., upstream: _Optional[_Union[UpstreamStatus, _Mapping]] = ..., bundles: bool = ..., read_revision: _Optional[int] = ..., consistent_reads: bool = ...) -> None: ...

class PrefixHead(_message.Message):
    __slots__ = ["prefix", "revision"]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    revision: int
    def __init__(self, prefix: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class PrefixMark(_message.Message):
    __slots__ = ["parts", "prefix", "previous_revision"]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_REVISION_FIELD_NUMBER: _ClassVar[int]
    parts: int
    prefix: str
    previous_revision: int
    def __init__(self, prefix: _Optional[str] = ..., previous_revision: _Optional[int] = ..., parts: _Optional[int] = ...) -> None: ...

class Put(_message.Message):
    __slots__ = ["create_only", "if_version", "key", "session", "ttl_ms", "value", "write_id"]
    CREATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    WRITE_ID_FIELD_NUMBER: _ClassVar[int]
    create_only: bool
    if_version: int
    key: str
    session: bytes
    ttl_ms: int
    value: Value
    write_id: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., if_version: _Optional[int] = ..., create_only: bool = ..., ttl_ms: _Optional[int] = ..., write_id: _Optional[bytes] = ..., session: _Optional[bytes] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ["backup", "batch", "compact", "error", "events", "get", "id", "keep_alive", "list", "ping", "snapshot", "stats", "write"]
    BACKUP_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    backup: BackupReply
    batch: BatchReply
    compact: CompactReply
    error: Error
    events: EventsReply
    get: GetReply
    id: int
    keep_alive: KeepAliveReply
    list: ListReply
    ping: PingReply
    snapshot: SnapshotReply
    stats: StatsReply
    write: WriteReply
    def __init__(self, id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., ping: _Optional[_Union[PingReply, _Mapping]] = ..., get: _Optional[_Union[GetReply, _Mapping]] = ..., list: _Optional[_Union[ListReply, _Mapping]] = ..., write: _Optional[_Union[WriteReply, _Mapping]] = ..., snapshot: _Optional[_Union[SnapshotReply, _Mapping]] = ..., events: _Optional[_Union[EventsReply, _Mapping]] = ..., stats: _Optional[_Union[StatsReply, _Mapping]] = ..., compact: _Optional[_Union[CompactReply, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAliveReply, _Mapping]] = ..., batch: _Optional[_Union[BatchReply, _Mapping]] = ..., backup: _Optional[_Union[BackupReply, _Mapping]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ["backup", "batch", "compact", "delete", "delta", "get", "history", "id", "keep_alive", "list", "ping", "put", "snapshot", "stats", "txn"]
    BACKUP_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    backup: Backup
    batch: Batch
    compact: Compact
    delete: Delete
    delta: Delta
    get: Get
    history: History
    id: int
    keep_alive: KeepAlive
    list: List
    ping: Ping
    put: Put
    snapshot: Snapshot
    stats: Stats
    txn: Txn
    def __init__(self, id: _Optional[int] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., get: _Optional[_Union[Get, _Mapping]] = ..., list: _Optional[_Union[List, _Mapping]] = ..., put: _Optional[_Union[Put, _Mapping]] = ..., delete: _Optional[_Union[Delete, _Mapping]] = ..., txn: _Optional[_Union[Txn, _Mapping]] = ..., snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., delta: _Optional[_Union[Delta, _Mapping]] = ..., history: _Optional[_Union[History, _Mapping]] = ..., stats: _Optional[_Union[Stats, _Mapping]] = ..., compact: _Optional[_Union[Compact, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAlive, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., backup: _Optional[_Union[Backup, _Mapping]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ["consistent", "limit", "prefix", "revision", "start_after"]
    CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    consistent: bool
    limit: int
    prefix: str
    revision: int
    start_after: str
    def __init__(self, prefix: _Optional[str] = ..., revision: _Optional[int] = ..., limit: _Optional[int] = ..., start_after: _Optional[str] = ..., consistent: bool = ...) -> None: ...

class SnapshotReply(_message.Message):
    __slots__ = ["compacted_revision", "epoch", "kvs", "more", "prefix_revision", "revision"]
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KVS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_REVISION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    compacted_revision: int
    epoch: int
    kvs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    more: bool
    prefix_revision: int
    revision: int
    def __init__(self, kvs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., revision: _Optional[int] = ..., epoch: _Optional[int] = ..., prefix_revision: _Optional[int] = ..., compacted_revision: _Optional[int] = ..., more: bool = ...) -> None: ...

class Stats(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class StatsReply(_message.Message):
    __slots__ = ["access_denied", "batches", "commits", "compacted_revision", "connections_refused", "connections_shed", "epoch", "head_revision", "instance", "journal_bytes", "keys", "leases_refused", "publications_per_second", "publish_bytes_unsent", "published", "quota_exceeded", "rate_limited", "read_only", "rejected", "reply_bytes_kept", "request_connections", "requests", "sessions", "slow_readers_closed", "slow_subscribers_closed", "subscriber_connections", "subscriptions_refused", "tombstones", "tracked_prefixes", "upstream", "uptime_ms", "writes", "writes_forwarded", "writes_per_second"]
    ACCESS_DENIED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_SHED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEAD_REVISION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    LEASES_REFUSED_FIELD_NUMBER: _ClassVar[int]
    PUBLICATIONS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_BYTES_UNSENT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    REPLY_BYTES_KEPT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SLOW_READERS_CLOSED_FIELD_NUMBER: _ClassVar[int]
    SLOW_SUBSCRIBERS_CLOSED_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    TOMBSTONES_FIELD_NUMBER: _ClassVar[int]
    TRACKED_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    WRITES_FORWARDED_FIELD_NUMBER: _ClassVar[int]
    WRITES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    access_denied: int
    batches: int
    commits: int
    compacted_revision: int
    connections_refused: int
    connections_shed: int
    epoch: int
    head_revision: int
    instance: int
    journal_bytes: int
    keys: int
    leases_refused: int
    publications_per_second: float
    publish_bytes_unsent: int
    published: int
    quota_exceeded: int
    rate_limited: int
    read_only: bool
    rejected: int
    reply_bytes_kept: int
    request_connections: int
    requests: int
    sessions: int
    slow_readers_closed: int
    slow_subscribers_closed: int
    subscriber_connections: int
    subscriptions_refused: int
    tombstones: int
    tracked_prefixes: int
    upstream: UpstreamStatus
    uptime_ms: int
    writes: int
    writes_forwarded: int
    writes_per_second: float
    def __init__(self, epoch: _Optional[int] = ..., instance: _Optional[int] = ..., head_revision: _Optional[int] = ..., compacted_revision: _Optional[int] = ..., keys: _Optional[int] = ..., tombstones: _Optional[int] = ..., journal_bytes: _Optional[int] = ..., writes: _Optional[int] = ..., rejected: _Optional[int] = ..., published: _Optional[int] = ..., requests: _Optional[int] = ..., tracked_prefixes: _Optional[int] = ..., uptime_ms: _Optional[int] = ..., commits: _Optional[int] = ..., read_only: bool = ..., request_connections: _Optional[int] = ..., subscriber_connections: _Optional[int] = ..., writes_per_second: _Optional[float] = ..., publications_per_second: _Optional[float] = ..., connections_refused: _Optional[int] = ..., access_denied: _Optional[int] = ..., rate_limited: _Optional[int] = ..., quota_exceeded: _Optional[int] = ..., subscriptions_refused: _Optional[int] = ..., batches: _Optional[int] = ..., connections_shed: _Optional[int] = ..., sessions: _Optional[int] = ..., leases_refused: _Optional[int] = ..., reply_bytes_kept: _Optional[int] = ..., slow_readers_closed: _Optional[int] = ..., publish_bytes_unsent: _Optional[int] = ..., slow_subscribers_closed: _Optional[int] = ..., upstream: _Optional[_Union[UpstreamStatus, _Mapping]] = ..., writes_forwarded: _Optional[int] = ...) -> None: ...

class Txn(_message.Message):
    __slots__ = ["ops", "write_id"]
    OPS_FIELD_NUMBER: _ClassVar[int]
    WRITE_ID_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[TxnOp]
    write_id: bytes
    def __init__(self, ops: _Optional[_Iterable[_Union[TxnOp, _Mapping]]] = ..., write_id: _Optional[bytes] = ...) -> None: ...

class TxnOp(_message.Message):
    __slots__ = ["delete", "put"]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    delete: Delete
    put: Put
    def __init__(self, put: _Optional[_Union[Put, _Mapping]] = ..., delete: _Optional[_Union[Delete, _Mapping]] = ...) -> None: ...

class UpstreamStatus(_message.Message):
    __slots__ = ["endpoint", "head_revision", "last_heard_ms", "reachable"]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HEAD_REVISION_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARD_MS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    head_revision: int
    last_heard_ms: int
    reachable: bool
    def __init__(self, endpoint: _Optional[str] = ..., reachable: bool = ..., head_revision: _Optional[int] = ..., last_heard_ms: _Optional[int] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ["bool_value", "bytes_value", "double_value", "int_value", "list_value", "map_value", "null_value", "string_value"]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAP_VALUE_FIELD_NUMBER: _ClassVar[int]
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    bool_value: bool
    bytes_value: bytes
    double_value: float
    int_value: int
    list_value: ListValue
    map_value: MapValue
    null_value: NullValue
    string_value: str
    def __init__(self, null_value: _Optional[_Union[NullValue, str]] = ..., bool_value: bool = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bytes_value: _Optional[bytes] = ..., list_value: _Optional[_Union[ListValue, _Mapping]] = ..., map_value: _Optional[_Union[MapValue, _Mapping]] = ...) -> None: ...

class WriteReply(_message.Message):
    __slots__ = ["replayed", "revision", "versions"]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    replayed: bool
    revision: int
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, revision: _Optional[int] = ..., versions: _Optional[_Iterable[int]] = ..., replayed: bool = ...) -> None: ...

class NullValue(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
