"""Planning in time: the plan (reservations for the first gangs that cannot start, forecasts for the next), the
promises it keeps from cycle to cycle, and the backfill rule that keeps them.

A cycle places gangs now. Walking the queue (priority, starving gangs first, then the longest waiting), each gang
that cannot start gets a *reservation*, up to `SolveConfig.reservations` of them: the earliest time at which
running pods' estimated ends (and those of gangs started or planned earlier in the walk) free enough capacity
for it for its whole runtime, and the nodes it would take then. The last cycle's reservations come back as
`Cluster.promised` and are held before the walk, so a gang keeps its start unless it can start sooner. Gangs
started now may use a reserved node only where they leave the reservation whole: they are expected to end by its
start, or they take only what the reservation does not need (Slurm's backfill, per node and resource). The gangs
past the depth get a *forecast*, the start the same rule gives them, which holds nothing.

The rule becomes one capacity limit per reservation start T: on every node, the gangs started now that still
run at T must fit in what is free at T once the reservations active at T are held. A gang of a higher priority
than every reservation active at T is not held back (a reservation never delays a higher-priority gang). The
greedy passes apply the limits through `Limits`, CP-SAT as linear constraints (`GangModel.limit`).

Only declared runtimes are held to. Where an estimate is a guess (learned from history or the default:
`Gang.guessed`, `Running.guessed`), a gang whose own runtime is one, or whose start counts on a guessed end on
its nodes, gets a forecast instead of a reservation; and a gang with a guessed runtime started now is never
counted on to end before a reservation's start. So no reservation waits for a guess.

Without the last cycle's plan (after a restart), reservations are a function of the cycle's input (the queue,
running pods and their estimated ends), so they are rebuilt from the cluster.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence

import numpy as np

from gangsolve.solver.greedy import GPU_WEIGHT, Scorer, greedy, node_scores, place_colocated, place_gang
from gangsolve.solver.limits import (
    FOREVER,
    Check,
    Limits,
    Plan,
    Planned,
    WholeGpus,
    reserved_at_checks,
    runtime_of,
)
from gangsolve.solver.model import GPU, SHARE, WHOLE, Resources
from gangsolve.solver.problem import Counts, GangCounts, Problem, Rows

# A pod that outran its estimate is expected to run on for half the time it has run so far, at least this
# long: an estimate is extended, never trusted to end anything.
MIN_EXTENSION = 60.0
# A GPU free now that a reservation holds for later weighs as much as two GPUs of best-fit slack.
IDLE_WEIGHT = 2 * GPU_WEIGHT
# A busy cluster has a release time per running gang (thousands at 1,000 nodes); trying a placement at each
# would take seconds per planned gang. Past this many, the first time it fits is found by bisection, as if
# what frees only ever grew (a reservation starting inside the gang's run can make an earlier time the first):
# the start found always fits, and is the earliest but for that.
MOST_CANDIDATE_TIMES = 128


def overran(start: float, estimate: float | None, now: float) -> bool:
    """Whether a pod started at `start` has outrun its runtime `estimate` at `now` (`expected_end` extends it)."""
    return estimate is not None and start + estimate <= now


def expected_end(start: float, estimate: float | None, now: float) -> float | None:
    """When a pod started at `start` with a runtime `estimate` is expected to end, seen at `now` (always
    after `now`); None without an estimate."""
    if estimate is None:
        return None
    return now + max(MIN_EXTENSION, 0.5 * (now - start)) if overran(start, estimate, now) else start + estimate


class Timeline:
    """What is free on each node over time: free now plus capacity changes (releases at estimated ends,
    reservations taking and giving back), each at the first cycle at or after it (`resolution` seconds apart
    from now; 0: when it happens)."""

    def __init__(self, problem: Problem, free: np.ndarray, resolution: float = 0.0) -> None:
        self.problem = problem
        self.now = problem.cluster.now
        self.resolution = resolution
        self.free = free  # shared with the pass that fills it
        self.events: list[tuple[float, int, np.ndarray]] = []  # (time, node, change)
        self._sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.unknown = np.zeros_like(free)  # held by running pods without an estimated end
        # Per node, the first time a guessed end (`Running.guessed`, `Gang.guessed`) gives capacity back there.
        self.guessed_from = np.full(len(free), math.inf)
        # By requests: running pods repeat a few shapes (the vectors are never written to); a large cluster
        # runs 100,000 pods or more, so those without an end are summed per node in one step.
        shapes: dict[tuple[tuple[str, int], ...], int] = {}
        unknown_nodes: list[int] = []
        unknown_shapes: list[int] = []
        vectors: list[np.ndarray] = []
        for pod in problem.cluster.running:
            n = problem.node_index.get(pod.node)
            if n is None:
                continue
            shape = tuple(pod.requests.items())
            s = shapes.get(shape)
            if s is None:
                s = shapes[shape] = len(vectors)
                vectors.append(_vector(problem, pod.requests))
            if pod.end is None:
                unknown_nodes.append(n)
                unknown_shapes.append(s)
            else:
                self.events.append((self.cycle(pod.end), n, vectors[s]))
                if pod.guessed:
                    self.guessed_from[n] = min(self.guessed_from[n], self.cycle(pod.end))
        if unknown_nodes:
            np.add.at(self.unknown, np.array(unknown_nodes), np.stack(vectors)[unknown_shapes])
        # GPUs that running shares hold part of, whole again when their last share ends (`_whole_again`): (time,
        # node, GPU index or None where the node's shares do not say which, change). Kept apart from `events`
        # because a share this pass starts on such a GPU moves that time later (`_arrays`).
        self.whole_again: list[tuple[float, int, int | None, np.ndarray]] = []
        self._whole_again()
        # With shares pending: each node's whole GPUs and what is left on each of its GPUs as `reopen` last saw
        # them; per node the GPUs shares this pass started opened, with the end of the last of those shares (when
        # they are whole again); per node and GPU already shared, the end of the last share this pass put there.
        self.whole_seen = free[:, problem.res_index[GPU]].copy() if problem.shared else None
        self.rooms_seen = free[:, problem.devices].copy() if problem.shared else None
        self.reopened: dict[int, tuple[int, float]] = {}  # node -> (GPUs, when)
        self.shared_until: dict[int, dict[int, float]] = {}  # node -> GPU index -> when

    def _whole_again(self) -> None:
        """A GPU that shares hold part of is out of the GPU column (`Problem.free`: whole-GPU pods never take
        it) until the last share on it ends; then it comes back. Without this a gang of whole GPUs would never
        fit, in the plan, on a node holding a share, and would get no start at all."""
        problem = self.problem
        if not problem.table.shared().any():
            return
        shares: dict[int, list[tuple[int | None, int, float | None]]] = {}  # node -> (GPU, milli, end)
        for pod in problem.cluster.running:
            n = problem.node_index.get(pod.node)
            if n is not None and pod.requests.get(SHARE, 0) > 0 and not pod.requests.get(GPU, 0):
                shares.setdefault(n, []).append((pod.gpu, pod.requests[SHARE], pod.end))
        gpu = problem.res_index[GPU]
        share = problem.res_index.get(SHARE) if problem.shared else None
        for n, pods in shares.items():
            held = problem.nodes[n].gpu_shares
            named = {d for d, _m, _e in pods if d is not None}
            unnamed = [(m, e) for d, m, e in pods if d is None]
            # One GPU per named index, one of its own per share that names none (edge/shares.py); where the pods
            # do not match the node's GPUs so, all of the node's shared GPUs come back when its last share ends.
            # An unnamed share's GPU has no room a new share could take (`devices`): it needs no index here.
            if named == {d for d in held if d >= 0} and len(unnamed) == sum(1 for d in held if d < 0):
                groups = [[(m, e) for d2, m, e in pods if d2 == d] for d in sorted(named)] + [[u] for u in unnamed]
                counted = [max(WHOLE - held[d], 0) for d in sorted(named)] + [0] * len(unnamed)
                devices = [1] * len(groups)
                indices: list[int | None] = [*sorted(named), *[-1] * len(unnamed)]
            else:
                groups = [[(m, e) for _d, m, e in pods]]
                counted = [sum(max(WHOLE - t, 0) for d, t in held.items() if d >= 0)]
                devices = [len(held)]
                indices = [None]
            for group, room, count, index in zip(groups, counted, devices, indices, strict=True):
                back = np.zeros(len(problem.resources), dtype=np.int64)
                back[gpu] = count
                if share is not None:  # its shares give back their milli as they end; the rest comes with it
                    back[share] = max(WHOLE * count - room - sum(m for m, _e in group), 0)
                ends = [e for _m, e in group if e is not None]
                if len(ends) < len(group):  # a share nobody gave an end: whole again only once it ends
                    self.unknown[n] += back
                else:
                    self.whole_again.append((self.cycle(max(ends)), n, index, back))

    def reopen(self, g: int, counts: GangCounts, end: float) -> None:
        """Gang g started now on `counts` until `end`. A share that opens a whole GPU takes it out of the GPU
        column (`Problem.take`); it comes back whole when the last share this pass started on its node ends, not
        at the first one's end (a later share may have taken the rest of that GPU), and never if one has no end.
        A share on a GPU running shares already hold keeps it from coming back whole before the share ends."""
        if self.whole_seen is None or self.rooms_seen is None:
            return
        problem = self.problem
        gpu = problem.res_index[GPU]
        for n in sorted({n for (_p, n) in counts}):
            parts = [(problem.parts[g][p].cls, k) for (p, m), k in counts.items() if m == n]
            opened = int(self.whole_seen[n] - self.free[n, gpu]) - sum(k * problem.demand[c, gpu] for c, k in parts)
            rooms = self.free[n, problem.devices]
            for d in np.flatnonzero((rooms < self.rooms_seen[n]) & (self.rooms_seen[n] < WHOLE)):
                until = self.shared_until.setdefault(n, {})
                until[int(d)] = max(until.get(int(d), self.now), end)
            self.whole_seen[n] = self.free[n, gpu]
            self.rooms_seen[n] = rooms
            if not any(problem.share_of[c] for c, _k in parts):
                continue
            count, when = self.reopened.get(n, (0, self.now))
            self.reopened[n] = (count + max(opened, 0), max(when, end))
            self._sorted = None

    def cycle(self, time: float) -> float:
        """The first cycle at or after `time` (now, if it is past)."""
        if time <= self.now or not self.resolution:
            return max(time, self.now)
        return self.now + math.ceil((time - self.now) / self.resolution - 1e-9) * self.resolution

    def add(self, time: float, counts: GangCounts, g: int, sign: int) -> None:
        if time == FOREVER:
            return
        time = self.cycle(time)
        guessed = sign > 0 and self.problem.gangs[g].guessed
        for (p, n), k in counts.items():
            self.events.append((time, n, sign * k * self.problem.demand[self.problem.parts[g][p].cls]))
            if guessed:
                self.guessed_from[n] = min(self.guessed_from[n], time)
        self._sorted = None

    def rests_on_guess(self, t: float, counts: GangCounts) -> bool:
        """Whether a start at `t` on `counts` may count on a guessed end: one on its nodes at or before `t`."""
        return any(self.guessed_from[n] <= t for (_p, n) in counts)

    def hold(self, g: int, start: float, counts: GangCounts, sign: int = 1) -> None:
        """Gang g's reservation from `start` for its runtime takes its capacity (sign 1), or gives it back (-1)."""
        self.add(start, counts, g, -sign)
        self.add(start + runtime_of(self.problem, g), counts, g, sign)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._sorted is None:
            self.events.sort(key=lambda e: e[0])
            events = self.events
            back = []
            for time, n, d, vector in self.whole_again:  # no sooner than the shares this pass put on that GPU
                later = [w for e, w in self.shared_until.get(n, {}).items() if d in (e, None)]
                when = max([time, *later])
                if when < FOREVER:
                    back.append((self.cycle(when), n, vector))
            if self.reopened:  # the GPUs this pass's shares opened, whole again (`reopen`)
                gpu = self.problem.res_index[GPU]
                for n, (count, when) in self.reopened.items():
                    if count and when < FOREVER:
                        vector = np.zeros(self.free.shape[1], dtype=np.int64)
                        vector[gpu] = count
                        back.append((self.cycle(when), n, vector))
            if back:
                events = sorted(events + back, key=lambda e: e[0])
            times = np.array([e[0] for e in events], dtype=float)
            nodes = np.array([e[1] for e in events], dtype=np.int64)
            width = self.free.shape[1]
            changes = np.stack([e[2] for e in events]) if events else np.zeros((0, width), np.int64)
            self._sorted = (times, nodes, changes)
        return self._sorted

    def at(self, time: float) -> np.ndarray:
        return self.at_many([time])[time]

    def at_many(self, times: Iterable[float]) -> dict[float, np.ndarray]:
        """What is free at each of `times` (every change at or before it applied), in one sweep."""
        out: dict[float, np.ndarray] = {}
        ordered = sorted(set(times))
        if not ordered:
            return out
        event_times, nodes, changes = self._arrays()
        room = self.free.copy()
        i = 0
        for t in ordered:
            j = int(np.searchsorted(event_times, t, side="right"))
            np.add.at(room, nodes[i:j], changes[i:j])
            i = j
            out[t] = room.copy()
        return out

    def earliest(self, g: int, runtime: float, starts: list[float]) -> tuple[float, GangCounts] | None:
        """The first time gang g fits for `runtime` seconds, and where; `starts` are the times at which
        reservations take capacity (the only times what is free can shrink)."""
        problem = self.problem
        times, nodes, changes = self._arrays()
        # Only a release can make the gang fit: the times something is freed are the candidates.
        candidates = np.unique(times[(times > self.now) & (changes > 0).any(axis=1)]).tolist()
        if not candidates:
            return None
        at_start = self.at_many(starts)
        need = problem.floor[g] @ problem.gpus  # GPUs its minimum takes: a cheap first test of each time
        room = self.free.copy()
        i = 0
        if len(candidates) > MOST_CANDIDATE_TIMES:
            return self._bisect(g, runtime, candidates, at_start, need)
        for t in candidates:
            j = int(np.searchsorted(times, t, side="right"))
            np.add.at(room, nodes[i:j], changes[i:j])
            i = j
            counts = self._fit(g, room, t, runtime, at_start, need)
            if counts is not None:
                return t, counts
        return None

    def fit_at(self, g: int, t: float, runtime: float, starts: list[float]) -> GangCounts | None:
        """Where gang g fits from `t` for `runtime` seconds, or None; `starts` as for `earliest`."""
        return self._fit(g, self.at(t), t, runtime, self.at_many(starts), self.problem.floor[g] @ self.problem.gpus)

    def _fit(
        self, g: int, room: np.ndarray, t: float, runtime: float, at_start: dict[float, np.ndarray], need: int
    ) -> GangCounts | None:
        """Where gang g fits from `t` (what is free then: `room`) for `runtime` seconds, within what is free at
        every reservation start during its run; `need`: the GPUs its minimum takes, a cheap first test."""
        window = room
        for s, free in at_start.items():
            if t < s < t + runtime:
                window = np.minimum(window, free)
        if need and int((np.maximum(window, 0) @ self.problem.gpus).sum()) < need:
            return None
        return _place(self.problem, g, window, self._idle_aware)

    def _bisect(
        self, g: int, runtime: float, candidates: list[float], at_start: dict[float, np.ndarray], need: int
    ) -> tuple[float, GangCounts] | None:
        """The first of `candidates` at which gang g fits for `runtime` seconds, by bisection (see
        MOST_CANDIDATE_TIMES), and where."""

        def fit(t: float) -> GangCounts | None:
            return self._fit(g, self.at(t), t, runtime, at_start, need)

        found = fit(candidates[-1])
        if found is None:
            return None
        lo, hi = 0, len(candidates) - 1  # candidates[hi] fits
        while lo < hi:
            mid = (lo + hi) // 2
            counts = fit(candidates[mid])
            if counts is None:
                lo = mid + 1
            else:
                hi, found = mid, counts
        return candidates[hi], found

    def holds(self, g: int, start: float, counts: GangCounts, runtime: float, starts: list[float]) -> bool:
        """Whether gang g still fits on `counts` from `start` for `runtime` seconds (its own hold taken off)."""
        window = self.at(start)
        at_start = self.at_many(s for s in starts if start < s < start + runtime)
        for room in at_start.values():
            window = np.minimum(window, room)
        for (p, n), k in counts.items():
            window[n] -= k * self.problem.demand[self.problem.parts[g][p].cls]
        return bool((window >= 0).all())

    def _idle_aware(self, problem: Problem, cls: int, free: np.ndarray, rows: Rows = slice(None)) -> np.ndarray:
        """Best fit at the reservation's start, but away from GPUs free now: held for a later start, those
        would idle until then (unless something short backfills them), where GPUs still busy lose nothing."""
        idle = self.free[rows] @ problem.gpus if problem.gpu_demand[cls] > 0 else 0
        score: np.ndarray = node_scores(problem, cls, free, rows) + IDLE_WEIGHT * np.maximum(idle, 0)
        return score

    def fits_eventually(self, g: int) -> bool:
        """Whether gang g would fit once every running pod ended, those without an estimate too."""
        room = self.at(FOREVER) + self.unknown
        return _place(problem=self.problem, g=g, free=room) is not None


def _vector(problem: Problem, requests: Resources) -> np.ndarray:
    vector = np.zeros(len(problem.resources), dtype=np.int64)
    for r, q in requests.items():
        if r in problem.res_index:
            vector[problem.res_index[r]] = q
    if problem.shared:  # a whole GPU is all of its share
        vector[problem.res_index[SHARE]] += WHOLE * vector[problem.res_index[GPU]]
    return vector


def _place(problem: Problem, g: int, free: np.ndarray, scorer: Scorer = node_scores) -> GangCounts | None:
    if not _may_fit(problem, g, free):
        return None
    free = free.copy()
    if problem.gangs[g].topology:
        return place_colocated(problem, g, free, scorer=scorer, later=True)
    return place_gang(problem, g, free, scorer=scorer, later=True)


def _may_fit(problem: Problem, g: int, free: np.ndarray) -> bool:
    """A cheap necessary condition: the gang's pods fit node by node, ignoring each other."""
    room = sum(int(np.minimum(problem.fits(part.cls, free), len(part.pods)).sum()) for part in problem.parts[g])
    return room >= max(problem.gangs[g].need, 1)


class Planner(Limits):
    """The queue-order pass that makes the plan: every gang that fits starts (within the reservations held so
    far); each that does not gets a reservation at the earliest time it fits, up to `most` of them.

    `promised`: the last cycle's reservations. Each is held from the start, so no gang walked before it can
    delay it; when the walk reaches its gang, it starts now if it fits (its reservation moves to now and to the
    nodes it starts on, in case a later pass does not start it), and otherwise moves to its earliest start if
    that is sooner, else keeps its place (while it still fits there: an estimate that proved short can push it
    later). With exact
    estimates and one priority, no gang therefore starts later than it was shown.

    `starving_only`: a gang that is not starving takes no reservation (it gets a forecast), so the depth goes to
    the gangs past their starvation age. `relaxation`: a reservation is held no sooner than (1 + it) times its
    gang's earliest wait from now, and at most it times the gang's runtime past its earliest start
    (`SolveConfig.plan_relaxation`)."""

    def __init__(
        self,
        problem: Problem,
        most: int,
        free: np.ndarray,
        promised: Sequence[Planned] = (),
        resolution: float = 0.0,
        *,
        starving_only: bool = False,
        relaxation: float = 0.0,
    ) -> None:
        super().__init__(problem, Plan())
        self.most = most
        self.starving_only = starving_only
        self.relaxation = relaxation
        self.timeline = Timeline(problem, free, resolution)
        self.past_depth: list[int] = []  # blocked gangs the walk found past `most`, in its order
        self.begun: set[int] = set()  # gangs the walk started
        self.promised = {r.gang: r for r in promised}
        for r in promised:
            self._hold(r)
        self._refresh()

    def take(self, g: int, counts: GangCounts, sign: int = 1) -> None:
        """Gang g starts now. A promised gang keeps a reservation in the plan all the same (a later pass may
        leave it out, and then it still starts as promised), but from now on the nodes it starts on here: the
        gangs planned after it count on those, and may plan on the nodes it was promised."""
        super().take(g, counts, sign)
        self.timeline.add(float(self.ends[g]), counts, g, sign)
        if sign > 0:
            self.begun.add(g)
            self.timeline.reopen(g, counts, float(self.ends[g]))
        else:
            self.begun.discard(g)
        promise = self.promised.pop(g, None) if sign > 0 else None
        if promise is not None and promise.start is not None:
            self.timeline.hold(g, promise.start, promise.counts, -1)
            self.plan.reservations[self.plan.reservations.index(promise)] = Planned(g, self.problem.cluster.now, counts)

    def blocked(self, g: int, free: np.ndarray) -> None:
        gang = self.problem.gangs[g]
        promise = self.promised.pop(g, None)
        if promise is not None:
            self._drop(promise)
        # A gang that would borrow past its queue's fair share holds nothing (and keeps no promise): capacity held
        # for it would be kept from queues below theirs. It starts where idle capacity lets it.
        if not gang.pods or gang.need == 0 or not gang.fair:
            if promise is not None:
                self._refresh()
            return
        if promise is None and (len(self.plan.reservations) >= self.most or (self.starving_only and not gang.starving)):
            self.past_depth.append(g)
            return
        runtime = gang.runtime if gang.runtime is not None else FOREVER
        starts = [r.start for r in self.plan.reservations if r.start is not None]
        found = self.timeline.earliest(g, runtime, starts)
        earliest = found[0] if found is not None else None
        now = self.problem.cluster.now
        if found is not None and self.relaxation and found[0] > now:
            # Relaxed backfill: held no sooner than (1 + relaxation) times its wait from now, so gangs started
            # now may run on until then; it still starts as soon as it fits (the walk starts it), and each
            # cycle's shorter wait moves the hold sooner. At most `relaxation` times its own runtime later than
            # its earliest start: on waits of days, relaxed holds chained behind each other moved short gangs'
            # starts out by days. Only if it fits then: where another hold takes its room at that time, the
            # next fit can be days after it (that hold's whole run), and it is held at its earliest start.
            hold_from = self.timeline.cycle(found[0] + self.relaxation * min(found[0] - now, runtime))
            relaxed = self.timeline.fit_at(g, hold_from, runtime, starts)
            if relaxed is not None:
                found = (hold_from, relaxed)
        if (
            promise is not None
            and promise.start is not None
            and promise.start > self.problem.cluster.now
            and (found is None or found[0] > promise.start)
            and self.timeline.holds(g, promise.start, promise.counts, runtime, starts)
            and not self.timeline.rests_on_guess(promise.start, promise.counts)
        ):
            found = (promise.start, promise.counts)
        elif found is not None and (gang.guessed or self.timeline.rests_on_guess(*found)):
            # A start that rests on a guess is shown, not held: capacity held for a gang that does not come when
            # planned idles, and reservations on guessed ends cost every figure (docs/benchmarks.md).
            self.past_depth.append(g)
            self.plan.guessed.add(g)
            if promise is not None:
                self._refresh()
            return
        if found is None:
            if self.timeline.unknown.any() and self.timeline.fits_eventually(g):
                self.plan.reservations.append(Planned(g, None, {}))
        else:
            start, counts = found
            self._hold(Planned(g, start, counts, earliest if earliest is not None and earliest < start else None))
        self._refresh()

    def _hold(self, r: Planned) -> None:
        self.plan.reservations.append(r)
        if r.start is not None:
            self.timeline.hold(r.gang, r.start, r.counts)

    def _drop(self, r: Planned) -> None:
        self.plan.reservations.remove(r)
        if r.start is not None:
            self.timeline.hold(r.gang, r.start, r.counts, -1)

    def _refresh(self) -> None:
        """The checks and what each still has room for, from the timeline (which holds this pass's gangs)."""
        self.plan.checks = checks(self.timeline, self.plan, self.priority)
        self.rooms = [c.room.copy() for c in self.plan.checks]
        self.reserved = reserved_at_checks(self.problem, self.plan)
        # Gangs this pass started keep their place in the plan (`take`), but hold no GPU a share could take.
        self.whole = WholeGpus.of(self.problem, self.reserved, len(self.plan.checks), skip=self.begun)
        self.started = set()


def checks(timeline: Timeline, plan: Plan, priority: np.ndarray) -> list[Check]:
    """One check per distinct reservation start: what is free then, given the timeline's events."""
    spans = [
        (r.start, r.start + runtime_of(timeline.problem, r.gang), r.gang)
        for r in plan.reservations
        if r.start is not None
    ]
    starts = sorted({start for start, _end, _g in spans})
    rooms = timeline.at_many(starts)
    out = []
    for start in starts:
        ceiling = max(int(priority[g]) for s, e, g in spans if s <= start < e)
        out.append(Check(start, np.maximum(rooms[start], 0), ceiling))
    return out


def promises(problem: Problem) -> list[Planned]:
    """The last cycle's reservations (`Cluster.promised`) of gangs still pending, in this cycle's indices. One
    whose start has come is held from now (no gang walked before it may take its nodes); one whose pods or
    nodes changed is planned afresh. A gang now past its queue's fair share, or with a guessed runtime, keeps
    none: it holds nothing (see `Planner.blocked`)."""
    index = {gang.name: g for g, gang in enumerate(problem.gangs)}
    out = []
    for r in problem.cluster.promised:
        g = index.get(r.gang)
        if g is None or r.start is None or not r.bindings or not problem.gangs[g].fair or problem.gangs[g].guessed:
            continue
        part_of = {pod.name: p for p, part in enumerate(problem.parts[g]) for pod in part.pods}
        counts: dict[tuple[int, int], int] = {}
        for pod, node in r.bindings.items():
            if pod not in part_of or node not in problem.node_index:
                break
            key = (part_of[pod], problem.node_index[node])
            counts[key] = counts.get(key, 0) + 1
        else:
            if sum(counts.values()) >= problem.gangs[g].need > 0:
                out.append(Planned(g, max(r.start, problem.cluster.now), counts))
    return out


def forecast(planner: Planner, most: int, seconds: float = math.inf) -> list[Planned]:
    """Expected starts for the first `most` gangs the walk passed over past the plan's depth, for at most
    `seconds` (checked between gangs): each the earliest time it fits after the reservations and the forecasts
    before it, as the plan would make it. They hold nothing (a gang started now may take their room), so they
    are a forecast, not a promise."""
    timeline, out = planner.timeline, list[Planned]()
    until = time.perf_counter() + seconds
    for g in planner.past_depth[:most]:
        if time.perf_counter() >= until:
            break
        runtime = runtime_of(timeline.problem, g)
        starts = [r.start for r in (*planner.plan.reservations, *out) if r.start is not None]
        found = timeline.earliest(g, runtime, starts)
        if found is not None:
            start, counts = found
            out.append(Planned(g, start, counts))
            timeline.hold(g, start, counts)
    return out


def plan(
    problem: Problem,
    most: int,
    forecasts: int = 0,
    seconds: float = math.inf,
    resolution: float = 0.0,
    *,
    starving_only: bool = False,
    relaxation: float = 0.0,
) -> tuple[Counts, Plan]:
    """The queue-order greedy pass with reservations: its placement (the baseline every other pass must
    match) and the plan, with `forecasts` gangs past its depth forecast (for at most `seconds`), its times on
    cycles `resolution` seconds apart (0: any time), reservations for starving gangs only if `starving_only`.
    The plan's checks are stated against the free capacity before this pass's own placements, as every other
    pass starts from there."""
    free = problem.free.copy()
    promised = promises(problem) if most else ()
    planner = Planner(problem, most, free, promised, resolution, starving_only=starving_only, relaxation=relaxation)
    counts = greedy(problem, limits=planner, free=free)
    result = planner.plan
    if result.checks:
        base = Timeline(problem, problem.free.copy(), resolution)
        for r in result.reservations:
            if r.start is not None:
                base.hold(r.gang, r.start, r.counts)
        result.checks = checks(base, result, planner.priority)
    result.forecasts = forecast(planner, forecasts, seconds) if most else []
    return counts, result
