#!/usr/bin/python3
"""A Beacon client written from proto/ alone (beacon.proto + PROTOCOL.md), in Python.

Usage: python_client.py RUNTIME_DIR PROTO_DIR
Generates the protobuf module with protoc, then exercises a running beacond over its ipc
sockets: ping, writes, compare-and-set, errors, a transaction, a subscription with its
sequencing marks and commit marker, get and delta. Exits non-zero with a message on any
mismatch.
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import zmq


def load_schema(proto_dir):
    out = tempfile.mkdtemp(prefix="beacon-py-")
    atexit.register(shutil.rmtree, out, True)  # the generated module goes with the process
    proto_dir = os.path.abspath(proto_dir)
    subprocess.run(["protoc", f"-I{proto_dir}", f"--python_out={out}", "beacon.proto"], check=True, cwd=proto_dir)
    sys.path.insert(0, out)
    import beacon_pb2
    return beacon_pb2


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main(runtime_dir, proto_dir):
    pb = load_schema(proto_dir)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"ipc://{runtime_dir}/beacon.req")
    sub = ctx.socket(zmq.SUB)
    sub.connect(f"ipc://{runtime_dir}/beacon.pub")
    sub.setsockopt(zmq.SUBSCRIBE, b"py.")   # the prefix (PROTOCOL.md 6, step 1)
    sub.setsockopt(zmq.SUBSCRIBE, b"!")     # heartbeats and commit markers
    next_id = [0]

    def call(**op):
        next_id[0] += 1
        request = pb.Request(id=next_id[0], **op)
        dealer.send(request.SerializeToString())
        if not dealer.poll(5000):
            check(False, f"no reply to {op}")
        reply = pb.Reply()
        reply.ParseFromString(dealer.recv_multipart()[-1])
        check(reply.id == next_id[0], "reply id matches request id")
        return reply

    ping = call(ping=pb.Ping())
    check(ping.ping.protocol_version == 1, "protocol version 1")

    # Wait until the daemon sequences our prefix: a heartbeat lists it (PROTOCOL.md 5.3).
    snapshot = call(snapshot=pb.Snapshot(prefix="py."))
    check(snapshot.WhichOneof("result") == "snapshot", "snapshot reply")
    through = snapshot.snapshot.revision

    put = call(put=pb.Put(key="py.a", value=pb.Value(int_value=42)))
    check(put.WhichOneof("result") == "write", f"put accepted: {put}")
    revision = put.write.revision
    check(list(put.write.versions) == [1], "first version is 1")

    conflict = call(put=pb.Put(key="py.a", value=pb.Value(string_value="x"), if_version=5))
    check(conflict.error.code == pb.Error.VERSION_CONFLICT and conflict.error.current_version == 1, "CAS conflict")
    bad = call(put=pb.Put(key="bad key", value=pb.Value(bool_value=True)))
    check(bad.error.code == pb.Error.INVALID_KEY, "invalid key refused")
    missing = call(put=pb.Put(key="py.nothing"))
    check(missing.error.code == pb.Error.INVALID_VALUE, "a put without a value is refused")

    txn = call(txn=pb.Txn(ops=[
        pb.TxnOp(put=pb.Put(key="py.b", value=pb.Value(map_value=pb.MapValue(entries={"k": pb.Value(double_value=1.5)})))),
        pb.TxnOp(put=pb.Put(key="other.c", value=pb.Value(null_value=pb.NULL_VALUE))),
        pb.TxnOp(delete=pb.Delete(key="py.a")),
    ]))
    check(txn.WhichOneof("result") == "write" and txn.write.revision == revision + 1, f"transaction: {txn}")

    # Follow the publications (PROTOCOL.md 6): diffs under py. chain through their marks.
    seen = []
    marker = None
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    while marker is None:
        check(poller.poll(5000), "publications arrive")
        topic, body = sub.recv_multipart()
        if topic.startswith(b"!c"):
            marker = pb.CommitMarker()
            marker.ParseFromString(body)
        elif not topic.startswith(b"!"):
            diff = pb.Diff()
            diff.ParseFromString(body)
            check(diff.event.change.key == topic.decode(), "topic is the key")
            seen.append(diff)
    check([d.event.change.key for d in seen] == ["py.a", "py.b", "py.a"], f"diffs: {[d.event.change.key for d in seen]}")
    first = seen[0]
    mark = [m for m in first.marks if m.prefix == "py."]
    check(mark and mark[0].previous_revision <= through and mark[0].parts == 1, f"first diff chains to the snapshot: {first.marks}")
    check(first.event.change.value.int_value == 42 and first.event.change.version == 1, "diff carries value and version")
    txn_marks = [m for m in seen[1].marks if m.prefix == "py."]
    check(txn_marks and txn_marks[0].parts == 2 and txn_marks[0].previous_revision == revision, "transaction mark")
    check(seen[1].event.parts == 3 and seen[2].event.part == 2, "parts of the transaction")
    check(seen[2].event.change.kind == pb.Change.DELETE, "delete diff")
    check(marker.revision == revision + 1 and marker.parts == 3, "commit marker")

    got = call(get=pb.Get(key="py.b"))
    check(got.get.kv.value.map_value.entries["k"].double_value == 1.5, "get returns the map")
    delta = call(delta=pb.Delta(prefix="py.", since_revision=through))
    check([(e.revision, e.change.key) for e in delta.events.events] == [(revision, "py.a"), (revision + 1, "py.b"), (revision + 1, "py.a")],
          f"delta: {delta.events}")
    check(not delta.events.more and delta.events.prefix_revision == revision + 1, "delta bookmark")
    print("python client: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
