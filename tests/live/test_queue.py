"""The scheduling queue: back-off after a failed bind, parked gangs and when every gang is due again."""

from __future__ import annotations

from gangsolve.live.messages import Event, Resync
from gangsolve.live.queue import BACKOFF_MAX, SchedulingQueue
from gangsolve.live.store import ClusterStore
from gangsolve.solver import Gang, GangResult, Pod
from tests.builders import k8s_pod
from tests.live.resources import POD


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def with_uid(obj: dict, uid: str) -> dict:
    obj["metadata"]["uid"] = uid
    return obj


def test_a_failed_bind_backs_the_pod_off_doubling_to_ten_seconds():
    clock = Clock()
    q = SchedulingQueue(clock=clock)
    s = ClusterStore()
    s.apply(Resync(POD, [with_uid(k8s_pod("p"), "u")]))
    waits = []
    for _ in range(6):
        s.assume("g", [("default/p", "u", "n1")])
        s.forget("default/p", "u")
        q.back_off("default/p", "u")
        waits.append(q.backing_off()["default/p"])
        assert [x["metadata"]["name"] for x in s.view(leave_out=q.backing_off()).snapshot.pods] == []
        clock.now += waits[-1]
        assert [x["metadata"]["name"] for x in s.view(leave_out=q.backing_off()).snapshot.pods] == ["p"]
    assert waits == [1, 2, 4, 8, BACKOFF_MAX, BACKOFF_MAX]


def test_a_pod_recreated_or_bound_starts_without_back_off():
    q = SchedulingQueue(clock=Clock())
    s = ClusterStore()
    s.apply(Resync(POD, [with_uid(k8s_pod("p"), "old"), with_uid(k8s_pod("b"), "ub")]))
    q.back_off("default/p", "old")
    q.back_off("default/b", "ub")
    assert set(q.backing_off()) == {"default/p", "default/b"}
    s.apply(Event(POD, "MODIFIED", with_uid(k8s_pod("p"), "new")))  # deleted and created again under its name
    s.apply(Event(POD, "MODIFIED", with_uid(k8s_pod("b", node_name="n1"), "ub")))  # bound after all
    q.prune(s.pod)
    assert q.backing_off() == {}
    assert q.held() == 0
    q.back_off("default/p", "new")
    s.apply(Event(POD, "DELETED", s.pod("default/p")))
    q.prune(s.pod)
    assert q.held() == 0


def _gang(name: str) -> Gang:
    return Gang(name, (Pod(f"{name}-0", {"nvidia.com/gpu": 1}),), min_member=1)


def _pending(name: str) -> GangResult:
    return GangResult(name, placed=False, min_member=1, pods=1, placed_pods=0, priority=0, reason="no room")


def test_a_parked_gang_is_solved_again_when_it_changes_or_room_is_freed():
    clock = Clock()
    q = SchedulingQueue(resync_period=60, clock=clock)
    a, b = _gang("a"), _gang("b")
    assert q.full_due(freed=0)  # nothing solved yet
    q.solved([], [("a", ("sig-a",), _pending("a")), ("b", ("sig-b",), _pending("b"))], False, 0, None)
    assert not q.full_due(freed=0)
    never = lambda g: False  # noqa: E731
    assert q.to_solve([a, b], {"a": ("sig-a",), "b": ("sig-b",)}, never, full=False) == ()
    assert q.to_solve([a, b], {"a": ("sig-a",), "b": ("changed",)}, never, full=False) == (b,)
    assert q.to_solve([a, b], {"a": ("sig-a",), "b": ("sig-b",)}, lambda g: g is a, full=False) == (a,)
    assert q.full_due(freed=1)  # room may have been made
    clock.now += 60
    assert q.full_due(freed=0)  # the resync period passed


def test_gangs_left_pending_by_a_cycle_that_placed_others_are_solved_again_at_once():
    q = SchedulingQueue(clock=Clock())
    q.solved([], [("a", ("sig-a",), _pending("a"))], placed_any=True, full_freed=0, grace_ends=None)
    assert q.again
    assert q.parked("a") is None  # not parked: the next cycle solves it
    q.solved([], [("a", ("sig-a",), _pending("a"))], placed_any=False, full_freed=0, grace_ends=None)
    assert not q.again
    assert q.parked("a") is not None
