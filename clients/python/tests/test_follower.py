"""The rules of PROTOCOL.md §6 for one prefix, fed by hand: no daemon."""

from beacon_signals import beacon_pb2 as pb
from beacon_signals.follower import PrefixFollower

EPOCH = 7


def diff(revision, previous, parts=1, part=0, key="p.k", epoch=EPOCH, prefix="p."):
    made = pb.Diff(epoch=epoch, event=pb.Event(revision=revision, part=part, parts=parts, change=pb.Change(key=key)))
    if previous is not None:
        made.marks.append(pb.PrefixMark(prefix=prefix, previous_revision=previous, parts=parts))
    return made


def heartbeat(head, prefix_head, epoch=EPOCH):
    made = pb.Heartbeat(epoch=epoch, head_revision=head)
    if prefix_head is not None:
        made.prefixes.append(pb.PrefixHead(prefix="p.", revision=prefix_head))
    return made


def synced(through=10):
    follower = PrefixFollower("p.")
    follower.synced(EPOCH, through)
    return follower


def test_a_chained_diff_completes_its_revision_and_an_older_one_is_discarded():
    follower = synced()
    assert follower.on_diff(diff(9, 8)) is None, "at or below T: already applied"
    events = follower.on_diff(diff(12, 10))
    assert [event.revision for event in events] == [12] and follower.through == 12 and follower.needs is None


def test_a_revision_of_several_parts_is_whole_only_with_all_of_them():
    follower = synced()
    assert follower.on_diff(diff(11, 10, parts=2, part=1, key="p.b")) is None
    events = follower.on_diff(diff(11, 10, parts=2, part=0, key="p.a"))
    assert [event.part for event in events] == [0, 1]


def test_a_missed_revision_a_lost_part_and_a_missing_mark_each_call_for_a_repair():
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


def test_a_repairing_follower_takes_in_nothing_until_synced():
    follower = synced()
    follower.on_diff(diff(13, 11))
    assert follower.on_diff(diff(14, 13)) is None and follower.through == 10
    follower.synced(EPOCH, 14)
    assert follower.needs is None and follower.through == 14


def test_another_epoch_calls_for_a_resync():
    follower = synced()
    follower.on_diff(diff(11, 10, epoch=EPOCH + 1))
    assert follower.needs == "resync"
    follower = synced()
    follower.on_heartbeat(heartbeat(20, 5, epoch=EPOCH + 1))
    assert follower.needs == "resync"


def test_commit_markers_find_lost_parts_and_unseen_revisions():
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


def test_a_heartbeat_is_a_bookmark_or_the_sign_of_a_gap():
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
