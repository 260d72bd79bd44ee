"""The rules of PROTOCOL.md §6 for one prefix, fed by hand: no daemon."""

from typing import Optional

from beacon_signals import beacon_pb2 as pb
from beacon_signals.follower import PrefixFollower

EPOCH = 7


def diff(revision: int, previous: Optional[int], parts: int = 1, part: int = 0, key: str = "p.k", epoch: int = EPOCH,
         prefix: str = "p.") -> pb.Diff:
    made = pb.Diff(epoch=epoch, event=pb.Event(revision=revision, part=part, parts=parts, change=pb.Change(key=key)))
    if previous is not None:
        made.marks.append(pb.PrefixMark(prefix=prefix, previous_revision=previous, parts=parts))
    return made


def heartbeat(head: int, prefix_head: Optional[int], epoch: int = EPOCH) -> pb.Heartbeat:
    made = pb.Heartbeat(epoch=epoch, head_revision=head)
    if prefix_head is not None:
        made.prefixes.append(pb.PrefixHead(prefix="p.", revision=prefix_head))
    return made


def synced(through: int = 10) -> PrefixFollower:
    follower = PrefixFollower("p.")
    follower.synced(EPOCH, through)
    return follower


def test_a_chained_diff_completes_its_revision_and_an_older_one_is_discarded() -> None:
    follower = synced()
    assert follower.on_diff(diff(9, 8)) is None, "at or below T: already applied"
    events = follower.on_diff(diff(12, 10))
    assert events is not None
    assert [event.revision for event in events] == [12] and follower.through == 12 and follower.needs is None


def test_a_revision_of_several_parts_is_whole_only_with_all_of_them() -> None:
    follower = synced()
    assert follower.on_diff(diff(11, 10, parts=2, part=1, key="p.b")) is None
    events = follower.on_diff(diff(11, 10, parts=2, part=0, key="p.a"))
    assert events is not None
    assert [event.part for event in events] == [0, 1]


def test_a_missed_revision_a_lost_part_and_a_missing_mark_each_call_for_a_repair() -> None:
    follower = synced()
    follower.on_diff(diff(13, 11))  # 11 was never seen
    assert follower.needs == "repair"
    follower = synced()
    follower.on_diff(diff(11, 10, parts=2, part=0))
    follower.on_diff(diff(12, 11))  # another revision while 11 lacks a part
    assert follower.needs == "repair"
    follower = synced()
    follower.on_diff(diff(11, None))  # the daemon does not sequence the prefix yet
    assert follower.needs == "repair"


def test_a_repairing_follower_takes_in_nothing_until_synced() -> None:
    follower = synced()
    follower.on_diff(diff(13, 11))
    assert follower.on_diff(diff(14, 13)) is None and follower.through == 10
    follower.synced(EPOCH, 14)
    assert follower.needs is None and follower.through == 14


def test_another_epoch_calls_for_a_resync() -> None:
    follower = synced()
    follower.on_diff(diff(11, 10, epoch=EPOCH + 1))
    assert follower.needs == "resync"
    follower = synced()
    follower.on_heartbeat(heartbeat(20, 5, epoch=EPOCH + 1))
    assert follower.needs == "resync"


def test_commit_markers_find_lost_parts_and_unseen_revisions() -> None:
    follower = synced()
    follower.on_diff(diff(11, 10, parts=2, part=0))
    follower.on_marker(pb.CommitMarker(epoch=EPOCH, revision=11, parts=3))
    assert follower.needs == "repair", "the marker came; the revision's other part never will"
    follower = synced()
    follower.on_marker(pb.CommitMarker(epoch=EPOCH, revision=12, parts=2, marks=[pb.PrefixMark(prefix="p.", parts=1)]))
    assert follower.needs == "repair", "it touched the prefix and no diff came"
    follower = synced()
    follower.on_marker(pb.CommitMarker(epoch=EPOCH, revision=12, parts=2, marks=[pb.PrefixMark(prefix="q.", parts=2)]))
    assert follower.needs is None, "another prefix's revision"


def test_a_heartbeat_is_a_bookmark_or_the_sign_of_a_gap() -> None:
    follower = synced()
    follower.on_heartbeat(heartbeat(30, 10))
    assert follower.needs is None and follower.through == 30, "nothing under the prefix after T: through the head"
    follower.on_heartbeat(heartbeat(25, 10))
    assert follower.through == 30, "T never moves back"
    follower.on_heartbeat(heartbeat(40, 35))
    assert follower.needs == "repair", "a change under the prefix after T was missed"
    follower = synced()
    follower.on_heartbeat(heartbeat(40, None))
    assert follower.needs == "repair", "the daemon lost track of the prefix"
