"""Preemption: a pending gang that cannot be placed evicts lower-priority pods; whole gangs in, whole gangs out.

`cycle(cluster, config, budget, place)` runs around the placement (`place`, pipeline.py):

1. **Nominations** (nominations.py). A gang an earlier cycle preempted for binds on its nominated nodes as soon
   as it fits there; until then the placement sees that capacity as used.
2. **Placement**, on the cluster with those holds.
3. **Preemption.** Each gang the placement left pending that may preempt (no pod with preemptionPolicy Never)
   and holds no nomination, highest priority first, chooses victims exactly (CP-SAT) among running pods of
   strictly lower priority: never protected pods (system-cluster-critical, system-node-critical), pods already
   leaving, or gangs this cycle placed; on the capacity left after step 2, never what this cycle placed or
   holds. Lexicographically:

   1. the lowest highest victim priority (one model per priority level, lowest first);
   2. no running gang left broken: evicting members below a gang's minimum evicts the whole gang (a hard rule:
      what remains could not make progress anyway);
   3. the fewest victim gangs (a pod alone is a gang of one);
   4. the fewest PDB violations: victims beyond the disruptions a PodDisruptionBudget (not a gang definition)
      allows, as kube-scheduler counts them;
   5. the fewest GPUs evicted, then the fewest pods;
   6. the most recently started victims (the least work lost).

   A preemptor keeps within its queue's capability (what the placement left it), as placed gangs do.

   **Reclaim.** When no lower-priority victims make room, a preemptor whose queue stays within its fair share
   (queues.py) with it placed may also evict gangs of its own priority from other `reclaimable` queues that hold
   more than their fair share (what was borrowed while the preemptor's queue had no demand), last. Whole gangs
   only, and each queue taken from stays at or above its fair share in the resource its share is measured in
   (the one it holds the largest fraction of: GPUs on GPU clusters), so the queue that lost them has nothing to
   reclaim back (no ping-pong). Shares move in whole gangs, though: a queue 9 GPUs short whose gangs are 16
   wide could never reclaim under that rule, nor could a queue 11 past give back a gang of 16, and both stay
   that far from their shares while the gangs run. So a *starving* preemptor may cross the line, as long as
   every queue the reclaim touches ends nearer its fair share than it began: its gang takes less than twice what
   its queue is short of, and each queue taken from loses less than twice what it holds past its share (16 GPUs
   from 9 short and 11 past leaves 7 past and 5 short). Each reclaim brings the queues it touches strictly
   nearer their shares, so while fair shares hold, reclaims cannot go round in circles. Its victims, of the
   preemptor's own priority, are chosen with the least work lost (GPU-seconds run) right after the fewest gangs
   and PDB violations. Reserved nodes are used by no preemptor that is not above every reservation's gang, and a gang
   holding a reservation waits for it (unless the reservation has no start: running pods without an estimated
   end hold what it needs).
   The preemptor's minimum (`need` pods) is nominated to nodes where it fits once its victims are gone, and
   the independent validator checks that before anything is evicted: no futile preemption. A gang that fits
   with no victim at all (the placement's search missed it) binds at once.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from gangsolve.solver import node_table, queues
from gangsolve.solver.budget import MIN_VICTIM_SECONDS, PLACE_SHARE, PREEMPTION_END, VICTIM_WORK_PER_SECOND, Budget
from gangsolve.solver.cpsat import Stage, cpsat_solver
from gangsolve.solver.model import GPU, SHARE, WHOLE, Cluster, Eviction, Gang, Placement, Running, SolveConfig
from gangsolve.solver.nominations import gangs_with, holds, merged, node_list, with_holds
from gangsolve.solver.problem import Problem, devices
from gangsolve.solver.validate import validate

Place = Callable[[Cluster, Budget], Placement]

_SLACK = 1e-6  # fair shares are water-filled floats: held amounts within this are at them
# A wait reclaim would save that rests on a guessed runtime (learned from history, or the default) counts half:
# the work its victims lose is certain, the guess is not (measured: docs/benchmarks.md, issue 24).
GUESSED_WAIT_WEIGHT = 0.5


def cycle(cluster: Cluster, config: SolveConfig, budget: Budget, place: Place) -> Placement:
    """One scheduling cycle with nominations and preemption around `place`, within `budget`."""
    preempting = config.preemption and _may_preempt(cluster)
    if not cluster.nominated and not preempting:
        return place(cluster, budget)
    held = holds(cluster)
    inner = place(with_holds(cluster, held), budget.part(PLACE_SHARE if preempting else 1.0))
    placement = merged(cluster, held, inner)
    if not preempting:
        return replace(placement, solve_seconds=budget.elapsed())
    placement = Preemption(cluster, placement, budget, config).run(budget.until(PREEMPTION_END))
    return replace(placement, solve_seconds=budget.elapsed())


def _may_preempt(cluster: Cluster) -> bool:
    """Whether any pending gang may preempt and any running pod is of lower priority, or of its priority in
    another reclaimable queue (a cheap test)."""
    preemptors = [g for g in cluster.gangs if g.pods and g.need > 0 and g.preempts]
    top = max((g.priority for g in preemptors), default=None)
    if top is None:
        return False
    reclaimable = {q.name for q in queues.queues_of(cluster).values() if q.reclaimable}
    wanted = {(g.priority, g.queue) for g in preemptors}

    def reclaimed(r: Running) -> bool:
        return r.queue in reclaimable and any(p == r.priority and q != r.queue for p, q in wanted)

    return any(not r.protected and not r.leaving and (r.priority < top or reclaimed(r)) for r in cluster.running)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


# --- 3. choosing victims --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One preemptor's victims and where its pods go once they are gone."""

    victims: tuple[int, ...]  # indices into Preemption.pool
    nominations: dict[str, str]  # pod -> node
    level: int  # the highest victim priority (the preemptor's own priority when there is no victim)
    key: tuple[int, ...]  # (victim gangs, PDB violations, GPUs, pods, recency rank sum): the objective reached
    proven: bool  # every stage of the lexicographic objective proven optimal
    reclaim: bool = False  # victims of the preemptor's own priority, reclaimed for its queue's fair share


class Preemption:
    """The preemption stage of one cycle: state shared by its preemptors, chosen one after another."""

    def __init__(self, cluster: Cluster, placement: Placement, budget: Budget, config: SolveConfig) -> None:
        self.placement = placement
        self.gang_of = {p.name: g.name for g in cluster.gangs for p in g.pods}
        self.budget = budget
        self.workers = config.workers
        # CP-SAT's deterministic time for the whole stage; None: each call gets what the time left grants.
        self.work = budget.fixed_work(PREEMPTION_END - PLACE_SHARE, VICTIM_WORK_PER_SECOND)
        results = {r.name: r for r in placement.gangs}
        waiting = gangs_with(cluster, placement.nominations)
        placed_now = gangs_with(cluster, placement.bindings)  # their running members are no victims either
        # A starving gang's plan is its reservation (one that waits for an estimate of running pods' ends is no
        # plan); any other gang with a planned start may still preempt to start sooner.
        starving = {g.name for g in cluster.gangs if g.starving}
        held = [r for r in placement.reservations if r.start is not None]
        holders = {r.gang for r in held if r.gang in starving}
        self.preemptors = sorted(
            (
                g
                for g in cluster.gangs
                if g.pods
                and g.need > 0
                and g.preempts
                and not results[g.name].placed
                and g.name not in waiting
                and g.name not in holders
            ),
            key=lambda g: (-g.priority, -int(g.starving), g.order, g.name),
        )
        self.problem = Problem(Cluster(cluster.nodes, tuple(self.preemptors), gpus=cluster.gpus, queues=cluster.queues))
        p = self.problem
        # Reservations hold their nodes against every gang not above all their holders (planning.py); the
        # placement kept those gangs off them, and preemption must not undo that: such a preemptor's pods go
        # elsewhere.
        priorities = {g.name: g.priority for g in cluster.gangs}
        self.reserved_below = max((priorities.get(r.gang, 0) for r in held), default=None)
        self.reserved = [p.node_index[n] for r in held for n in r.nodes if n in p.node_index]
        pods = {pod.name: pod for g in cluster.gangs for pod in g.pods}
        self.free = p.free.copy()  # once this stage's victims are gone
        for name, node in [*placement.bindings.items(), *placement.nominations.items()]:
            self.free[p.node_index[node]] -= self._vector({**pods[name].requests, "pods": 1})
        self.now = self.free.copy()  # as it is
        # What each queue may still take under its capability once this cycle's placement is in (queues.py):
        # a preemptor keeps within its queue's, as every placed gang does.
        row = {name: i for i, name in enumerate(p.queue_names)}
        path = queues.Tree(queues.queues_of(cluster)).path
        queue_of = {pod.name: g.queue for g in cluster.gangs for pod in g.pods}
        self.cap_left = p.cap_left[: p.borrow_row].copy()
        for name, _node in [*placement.bindings.items(), *placement.nominations.items()]:
            rows = [row[q] for q in path(queue_of[name]) if q in row]
            self.cap_left[rows] -= self._vector({**pods[name].requests, "pods": 1})

        # The running pods that could ever be victims, and the gangs (units) they belong to.
        units: dict[tuple[str, str], list[int]] = defaultdict(list)
        pool = [r for r in cluster.running if not r.leaving and r.node in p.node_index]
        self.pool = pool
        for i, r in enumerate(pool):
            units[(r.gang, "") if r.gang else ("", r.name)].append(i)
        self.unit_of = np.zeros(len(pool), dtype=np.int64)
        self.units = list(units.values())
        self.unit_min = [max(1, pool[members[0]].min_member) for members in self.units]
        for u, members in enumerate(self.units):
            self.unit_of[members] = u
        self.evictable = np.array([not r.protected and r.gang not in placed_now for r in pool], dtype=bool)
        # Pods too young to evict (the minimum runtimes): for a higher priority, and for a fair share.
        self.young_for_preemption = self._young(cluster, pool, config.preempt_min_runtime)
        self.young_for_reclaim = self._young(cluster, pool, config.reclaim_min_runtime)
        self.alive = np.ones(len(pool), dtype=bool)
        self.priority = np.array([r.priority for r in pool], dtype=np.int64)
        self.node = np.array([p.node_index[r.node] for r in pool], dtype=np.int64)
        self.vec = (
            np.stack([self._vector(r.requests) for r in pool])
            if pool
            else np.zeros((0, len(p.resources)), dtype=np.int64)
        )
        if p.shared:
            self._devices_freed(pool)
        self.gpus = np.array([int(r.requests.get(GPU, 0)) for r in pool], dtype=np.int64)
        # GPU-seconds each has run (its work lost if evicted), on the cycle's clock, else from the latest start.
        # Seconds, not minutes: whole minutes counted a pod that had run 59 s as having lost nothing.
        clock = max([cluster.now, *(r.started for r in pool)])
        self.work_lost = np.array(
            [int(r.requests.get(GPU, 0)) * int(max(0.0, clock - r.started)) for r in pool], dtype=np.int64
        )
        # When the plan expects each pending gang to start without evictions (reservations, then forecasts).
        self.clock = clock
        # A relaxed reservation is held past when its gang could start: the wait reclaim would save is to the
        # earliest start, not to the hold (which the plan chose, and would move sooner were the gang waiting).
        self.expected = {
            r.gang: (r.start if r.earliest is None else r.earliest, r.guessed)
            for r in (*placement.forecasts, *placement.reservations)
            if r.start is not None
        }
        # For gangs the plan did not reach: the GPUs free once this cycle's placement is in, and the running pods'
        # expected ends with the GPUs each gives back (a gang cannot start before enough are free, anywhere).
        gpu = p.res_index.get(GPU)
        self.free_gpus = int(np.maximum(self.free[:, gpu], 0).sum()) if gpu is not None else 0
        # An end that is a guess: a learned or default runtime, or the extension of one that proved short.
        self.ends = sorted(
            (r.end, int(r.requests.get(GPU, 0)), r.guessed or r.overran) for r in cluster.running if r.end is not None
        )
        self.first_guessed_end = min((end for end, _gpus, guess in self.ends if guess), default=math.inf)
        recency = sorted(range(len(pool)), key=lambda i: (-pool[i].started, pool[i].name))
        self.rank = np.zeros(len(pool), dtype=np.int64)
        self.rank[recency] = np.arange(len(pool))
        self.budgets = cluster.budgets

        # Reclaim: each queue's fair share and what it holds once this cycle's placement is in and its leaving pods
        # are gone, per resource; and the resource its share is measured in, in which a queue that loses gangs to
        # reclaim stays at or above its fair share (for a starving preemptor: ends nearer it).
        declared = queues.queues_of(cluster)
        self.tree = queues.Tree(declared)
        fair, own_fair = queues.deserved_both(cluster)  # a parent queue's fair: its whole subtree's
        self.total = self._amounts(node_table.schedulable(cluster.nodes))
        self.fair = {name: self._amounts(fair[name]) for name in declared}
        self.own_fair = {name: self._amounts(own_fair[name]) for name in declared}
        self.held = {name: self._amounts(q.allocated) for name, q in declared.items()}  # its own gangs'
        for name, _node in [*placement.bindings.items(), *placement.nominations.items()]:
            self.held[queue_of[name]] += self._vector({**pods[name].requests, "pods": 1})
        for r in cluster.running:
            if r.leaving and r.queue in self.held:
                self.held[r.queue] -= self._vector(r.requests)
        # A queue's share is measured in the resource it (with the queues under it) holds the largest fraction
        # of (GPUs on GPU clusters).
        self.dominant = {}
        for name in declared:
            h = self._held(name)
            self.dominant[name] = int(np.argmax(np.divide(h, self.total, out=np.zeros_like(h), where=self.total > 0)))
        self.reclaimable = {name for name, q in declared.items() if q.reclaimable}
        # Gangs within their queue's fair share; the placement kept the others off capacity those wait for.
        self.within = {g.name: g.fair for g in queues.rank(cluster)}
        self.queue = [r.queue for r in pool]

    @staticmethod
    def _young(cluster: Cluster, pool: list[Running], default: float) -> np.ndarray:
        """Which pods of `pool` have run less than their queue's minimum runtime (else `default`) by the
        cycle's clock; none without a clock."""
        declared = {q.name: q.min_runtime for q in cluster.queues}
        if not cluster.now:
            return np.zeros(len(pool), dtype=bool)

        def least(r: Running) -> float:
            own = declared.get(r.queue)
            return default if own is None else own

        # (a guard of 0 guards nothing, whatever the clocks say: a start after the cycle's clock is no reason)
        return np.array([least(r) > 0 and cluster.now - r.started < least(r) for r in pool], dtype=bool)

    def _amounts(self, amounts: Mapping[str, float]) -> np.ndarray:
        """`amounts` as a vector over the problem's resources (floats: fair shares are not whole)."""
        v = np.zeros(len(self.problem.resources), dtype=np.float64)
        for r, q in amounts.items():
            i = self.problem.res_index.get(r)
            if i is not None:
                v[i] = q
        return v

    def excess(self, queue: str, nearer: bool = False) -> int:
        """The most reclaim may take from the queue, in the resource its share is measured in: what it holds past
        its fair share; with `nearer` (a starving preemptor), less than twice that, so that it ends nearer its
        fair share than it was."""
        k = self.dominant[queue]
        past = float(self._held(queue)[k] - self.fair[queue][k])
        if nearer:
            return max(0, math.ceil(2 * past - _SLACK) - 1)
        return max(0, int(np.floor(past + _SLACK)))

    def _held(self, queue: str) -> np.ndarray:
        """What the queue and every queue under it hold (now, with this stage's changes)."""
        return sum((self.held[q] for q in self.tree.under(queue) if q in self.held), np.zeros(len(self.total)))

    def branch(self, victim: str, preemptor: str) -> list[str]:
        """The queues a reclaim by `preemptor`'s queue from `victim`'s takes from: the victim's and those above
        it, up to the nearest queue above both (each must stay at or above its fair share)."""
        return [q for q in self.tree.branch(victim, preemptor) if q in self.fair]

    def _shortfall(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Gang g's minimum, and what its queue holds below its fair share (now, with this stage's changes), in
        each resource the minimum asks for."""
        queue = self.problem.gangs[g].queue
        need = self.problem.floor[g].astype(np.float64)
        asked = need > 0
        return need[asked], (self.own_fair[queue] - self.held[queue])[asked]

    def _within(self, g: int) -> bool:
        """Whether gang g was within its queue's fair share for the placement, and still is with what this stage
        has given its queue since (a reclaim may have taken it past, and left room its victims freed)."""
        gang = self.problem.gangs[g]
        if not self.within[gang.name]:
            return False
        if gang.queue not in self.fair:
            return True
        need, short = self._shortfall(g)
        return bool((need <= short + _SLACK).all())

    def reclaim(self, g: int) -> np.ndarray:
        """The running pods preemptor g may reclaim (a mask over the pool): pods of its own priority in other
        reclaimable queues past their fair share, of gangs that may go whole; none when its queue would pass its
        own fair share with it (a starving gang: would not end nearer it)."""
        gang = self.problem.gangs[g]
        mine = gang.queue
        none = np.zeros(len(self.pool), dtype=bool)
        if mine not in self.fair:
            return none
        need, short = self._shortfall(g)
        # Within its fair share; a starving gang: nearer it (past it by less than the queue is short of it now).
        if not (need < 2 * short - _SLACK if gang.starving else need <= short + _SLACK).all():
            return none
        over = {
            q
            for q in self.reclaimable
            if q != mine
            and all(a in self.reclaimable and self.excess(a, gang.starving) > 0 for a in self.branch(q, mine))
        }
        mask: np.ndarray = self.alive & self.evictable & ~self.young_for_reclaim & (self.priority == gang.priority)
        mask &= np.array([q in over for q in self.queue], dtype=bool)
        for members in self.units:  # whole gangs only: a gang with a member that may not go stays
            if mask[members].any() and not all(mask[i] or not self.alive[i] for i in members):
                mask[members] = False
        return mask

    def _devices_freed(self, pool: list[Running]) -> None:
        """What each victim gives back on its node's GPUs: a share on the GPU it names; whole GPUs on those the
        node's whole-GPU pods hold (counted, not named: given to them in turn)."""
        p = self.problem
        held = {n: iter(range(len(devices(p.nodes[n]).whole), 1 << 30)) for n in set(self.node.tolist())}
        for i, r in enumerate(pool):
            n = int(self.node[i])
            if r.gpu is not None and 0 <= r.gpu < len(p.devices) and r.requests.get(SHARE):
                self.vec[i, p.devices[r.gpu]] += int(r.requests[SHARE])
            unshared = [d for d in range(int(p.allocatable[n, p.res_index[GPU]])) if d not in p.nodes[n].gpu_shares]
            for _ in range(int(r.requests.get(GPU, 0))):
                k = next(held[n])
                if k < len(unshared):
                    self.vec[i, p.devices[unshared[k]]] += WHOLE

    def _vector(self, requests: Mapping[str, int]) -> np.ndarray:
        v = np.zeros(len(self.problem.resources), dtype=np.int64)
        for r, q in requests.items():
            i = self.problem.res_index.get(r)
            if i is not None:
                v[i] = q
        v[self.problem.res_index["pods"]] = max(1, int(requests.get("pods", 1)))
        if self.problem.shared:  # a whole GPU freed is all of its share freed
            v[self.problem.res_index[SHARE]] += WHOLE * v[self.problem.res_index[GPU]]
        return v

    # ------------------------------------------------------------------ the stage

    def run(self, deadline: float) -> Placement:
        started = time.perf_counter()
        placement = self.placement
        bindings, nominations = dict(placement.bindings), dict(placement.nominations)
        evictions: list[Eviction] = list(placement.evictions)
        results = {r.name: r for r in placement.gangs}
        placed, chosen, proven, tried = 0, 0, True, 0
        for g, gang in enumerate(self.preemptors):
            if self.budget.passed(deadline):
                break
            tried += 1
            rows = list(self.problem.queue_rows[g])  # its queue's and every queue's above it
            if (self.problem.floor[g] > self.cap_left[rows]).any():
                continue  # a capability leaves too little for its minimum
            share = None if self.work is None else self.work / len(self.preemptors)
            choice = self.choose(g, self.budget.slice(deadline, len(self.preemptors) - g), share)
            if choice is None:
                continue
            use = self._use(g, choice).sum(axis=0)
            if (use > self.cap_left[rows]).any():
                continue
            self.cap_left[rows] -= use
            proven &= choice.proven
            now_fits = not choice.victims and self._fits_now(g, choice)
            self._apply(g, choice)
            if now_fits:  # fits as things are (not just in room earlier victims free): bind now
                bindings.update(choice.nominations)
                results[gang.name] = replace(results[gang.name], placed=True, placed_pods=gang.need, reason="")
                placed += 1
                continue
            chosen += 1
            nominations.update(choice.nominations)
            evictions += self._evictions(gang, choice)
            gangs = len({int(self.unit_of[i]) for i in choice.victims})
            what = "reclaiming" if choice.reclaim else "preempting"
            why = (
                f"{what} {_count(len(choice.victims), 'pod')} of {_count(gangs, 'gang')} of priority "
                f"{choice.level} or lower; "
                f"nominated to {node_list(choice.nominations.values())}, binds once they are gone"
            )
            results[gang.name] = replace(results[gang.name], reason=why)
        status = "OPTIMAL" if proven else "FEASIBLE"
        detail = (
            f"{tried} of {len(self.preemptors)} pending gangs tried, {chosen} preempting, {len(evictions)} evictions"
        )
        stage = Stage(
            "preemption", status, chosen + placed, len(self.preemptors), time.perf_counter() - started, detail
        )
        objective = placement.objective + placed
        moving = {self.gang_of[pod] for pod in (*bindings, *nominations)}
        return replace(
            placement,
            bindings=bindings,
            nominations=nominations,
            evictions=tuple(evictions),
            gangs=tuple(results[r.name] for r in placement.gangs),
            # A gang that preempts to start now no longer waits for its planned start.
            reservations=tuple(r for r in placement.reservations if r.gang not in moving),
            forecasts=tuple(r for r in placement.forecasts if r.gang not in moving),
            objective=objective,
            best_bound=max(placement.best_bound, objective),
            stages=(*placement.stages, stage.as_dict()),
        )

    def _apply(self, g: int, choice: Choice) -> None:
        for i in choice.victims:
            self.alive[i] = False
            self.free[self.node[i]] += self.vec[i]
            if self.queue[i] in self.held:
                self.held[self.queue[i]] -= self.vec[i]
        use = self._use(g, choice)
        self.free -= use
        self.now -= use
        if self.problem.gangs[g].queue in self.held:
            self.held[self.problem.gangs[g].queue] += use.sum(axis=0)

    def _use(self, g: int, choice: Choice) -> np.ndarray:
        """What the preemptor's pods take on each node."""
        p = self.problem
        use = np.zeros_like(self.free)
        classes = {pod.name: part.cls for part in p.parts[g] for pod in part.pods}
        for pod, node in choice.nominations.items():
            use[p.node_index[node]] += p.demand[classes[pod]]
        return use

    def _fits_now(self, g: int, choice: Choice) -> bool:
        """Whether the pods fit in what is free now, without the room earlier preemptors' victims will free."""
        return bool((self._use(g, choice) <= np.maximum(self.now, 0)).all())

    def _evictions(self, gang: Gang, choice: Choice) -> list[Eviction]:
        nodes = set(choice.nominations.values())
        out = []
        for i in choice.victims:
            r = self.pool[i]
            why = f"preempted by gang {gang.name} (priority {gang.priority}), which needs its room on {r.node}"
            if choice.reclaim and r.priority == gang.priority:
                why = (
                    f"reclaimed from queue {r.queue}, past its fair share, for gang {gang.name} of queue "
                    f"{gang.queue}, below its own"
                )
            elif r.node not in nodes:
                why = f"its gang {r.gang} would fall below its minimum of {r.min_member} (gang {gang.name} preempts)"
            out.append(Eviction(r.name, r.node, gang.name, why))
        return out

    # ------------------------------------------------------------------ one preemptor

    def choose(self, g: int, deadline: float, work: float | None = None) -> Choice | None:
        """The best victims for preemptor g, or None (it cannot fit even with every allowed victim gone, or
        there was no time to find out)."""
        gang = self.problem.gangs[g]
        candidates = self.alive & self.evictable & ~self.young_for_preemption & (self.priority < gang.priority)
        reclaim = self.reclaim(g)
        levels = sorted({int(x) for x in self.priority[candidates]})
        if not levels and not reclaim.any() and self._within(g):
            # No victim at all: whether it fits as things are. Not for a gang that would borrow: the placement
            # kept it off capacity that gangs within their queue's fair share wait for.
            levels = [gang.priority]
        tries: list[tuple[np.ndarray, np.ndarray | None]] = [
            (candidates & (self.priority <= level), None) for level in levels
        ]
        # Reclaim last, as its own priority is the highest victim priority; from the nearest queues first
        # (siblings, then cousins, up the tree).
        kin = np.array([self.tree.kinship(q, gang.queue) if q in self.fair else 0 for q in self.queue], dtype=np.int64)
        for depth in sorted({int(k) for k in kin[reclaim]}, reverse=True):
            nearer = reclaim & (kin >= depth)
            tries.append((candidates | nearer, nearer))
        for allowed, reclaiming in tries:
            if self.budget.passed(deadline):
                return None
            nodes = self._room(g, allowed)
            if nodes is None:
                continue
            found = _Model(self, g, allowed, nodes, reclaiming).solve(deadline, work)
            if found is None:  # proven infeasible at this level
                continue
            if isinstance(found, _NoTime):
                return None
            victims, nominations, key, proven = found
            highest = max((int(self.priority[i]) for i in victims), default=gang.priority)
            reclaimed = reclaiming is not None and any(reclaiming[i] for i in victims)
            if reclaimed and not self._worth_reclaiming(g, victims):
                continue
            choice = Choice(victims, nominations, highest, key, proven, reclaimed)
            return choice if self._sound(g, choice) else None
        return None

    def _worth_reclaiming(self, g: int, victims: tuple[int, ...]) -> bool:
        """Whether reclaim saves more than it throws away: the GPU-seconds gang g would wait for the start the
        plan expects without it (running pods' ends) against the GPU-seconds its victims have run. For a gang
        the plan did not reach, the first time enough GPUs are free anywhere (a bound: it waits at least that
        long). A gang that may wait for ever (running pods without an expected end): always worth it. A wait
        that rests on a guessed runtime counts `GUESSED_WAIT_WEIGHT` of itself."""
        gang = self.problem.gangs[g]
        gpu = self.problem.res_index.get(GPU)
        gpus = int(self.problem.floor[g][gpu]) if gpu is not None else 0
        start, guessed = self.expected.get(gang.name, (None, False))
        if start is None:
            free, start = self.free_gpus, self.clock
            for end, given, guess in self.ends:
                if free >= gpus and start > self.clock:
                    break  # enough GPUs free by then, and something ended that may bring them together
                free, start, guessed = free + given, end, guessed or guess
            if free < gpus:
                return True
        else:
            guessed = guessed or self.first_guessed_end <= start  # a start past a guessed end may count on it
        saved = gpus * max(0.0, start - self.clock) * (GUESSED_WAIT_WEIGHT if guessed else 1.0)
        return int(sum(int(self.work_lost[i]) for i in victims)) <= saved

    def _room(self, g: int, allowed: np.ndarray) -> np.ndarray | None:
        """Nodes where some pod of gang g fits once every allowed victim there is gone, or None when those
        cannot hold its minimum even so."""
        p = self.problem
        room = self.free.copy()
        np.add.at(room, self.node[allowed], self.vec[allowed])
        gang = p.gangs[g]
        if self.reserved_below is not None and gang.priority <= self.reserved_below:
            room[self.reserved] = 0  # held for the reservations' gangs
        total, mask = 0, np.zeros(len(p.nodes), dtype=bool)
        for part in p.parts[g]:
            fit = np.minimum(p.fits(part.cls, room), len(part.pods))
            mask |= fit > 0
            total += int(fit.sum())
        return np.flatnonzero(mask) if total >= p.gangs[g].need else None

    def _sound(self, g: int, choice: Choice) -> bool:
        """No futile preemption: the independent validator accepts the preemptor's pods on their nominated
        nodes once the victims are gone."""
        p = self.problem
        gang = p.gangs[g]
        free = self.free.copy()
        for i in choice.victims:
            free[self.node[i]] += self.vec[i]
        names = {*choice.nominations.values(), *(n for n in gang.bound_nodes if n in p.node_index)}
        nodes = []
        for name in names:
            n = p.node_index[name]
            used = {r: int(p.allocatable[n, k] - free[n, k]) for k, r in enumerate(p.resources)}
            nodes.append(replace(p.nodes[n], used=used))
        return not validate(Cluster(tuple(nodes), (gang,)), choice.nominations)


def _sum(variables: list[cp_model.IntVar]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.sum(variables)


def _weighted(variables: list[cp_model.IntVar], coefficients: list[int]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum(variables, coefficients)


class _NoTime:
    pass


_NO_TIME = _NoTime()
Found = tuple[tuple[int, ...], dict[str, str], tuple[int, ...], bool]


class _Model:
    """CP-SAT over one preemptor and the allowed victims on the nodes that could hold its pods.

    y[c, n]: the preemptor's pods of class c on node n; x[i]: victim i evicted; whole[u]: unit u (a running
    gang) evicted whole; touched[u]: unit u loses a pod; over[b]: victims beyond PDB b's allowance."""

    def __init__(
        self, stage: Preemption, g: int, allowed: np.ndarray, nodes: np.ndarray, reclaim: np.ndarray | None = None
    ) -> None:
        self.stage = stage
        self.reclaim = reclaim
        p = stage.problem
        self.g = g
        gang = p.gangs[g]
        m = self.model = cp_model.CpModel()
        local = set(nodes.tolist())
        room = stage.free.copy()
        np.add.at(room, stage.node[allowed], stage.vec[allowed])

        # The preemptor's pods.
        self.y: dict[tuple[int, int], cp_model.IntVar] = {}
        self.ub: dict[tuple[int, int], int] = {}
        for k, part in enumerate(p.parts[g]):
            fit = np.minimum(p.fits(part.cls, room, nodes), len(part.pods))
            for n, ub in zip(nodes.tolist(), fit.tolist(), strict=True):
                if ub > 0:
                    self.y[(k, n)] = m.new_int_var(0, ub, f"y_{k}_{n}")
                    self.ub[(k, n)] = ub
            m.add(_sum([v for (kk, _n), v in self.y.items() if kk == k]) <= len(part.pods))
        m.add(_sum(list(self.y.values())) == gang.need)
        if gang.colocate:
            self._colocate(gang, nodes)

        # The victims: allowed pods on those nodes, and the other members of their gangs when they go whole.
        self.x: dict[int, cp_model.IntVar] = {}
        self.touched: dict[int, cp_model.IntVar] = {}
        near = [i for i in np.flatnonzero(allowed).tolist() if int(stage.node[i]) in local]
        for u in sorted({int(stage.unit_of[i]) for i in near}):
            self._unit(u, allowed, local)
        # Reclaim leaves every queue it takes from at or above its fair share (no reclaim back and forth); for a
        # starving preemptor, nearer its fair share than it was.
        # In a tree the same holds for every queue above the victims' up to the one above both queues.
        if reclaim is not None:
            taken: dict[str, list[int]] = defaultdict(list)
            for i in self.x:
                if reclaim[i]:
                    for queue in stage.branch(stage.queue[i], gang.queue):
                        taken[queue].append(i)
            for queue, members in sorted(taken.items()):
                k = stage.dominant[queue]
                amounts = [int(stage.vec[i, k]) for i in members]
                m.add(_weighted([self.x[i] for i in members], amounts) <= stage.excess(queue, gang.starving))

        # Capacity: what the preemptor puts on a node fits its free room plus what its victims there free.
        on: dict[int, list[int]] = defaultdict(list)
        for i in self.x:
            on[int(stage.node[i])].append(i)
        used = np.flatnonzero(sum(p.demand[part.cls] for part in p.parts[g]) > 0).tolist()
        for n in nodes.tolist():
            terms = [(k, v) for (k, nn), v in self.y.items() if nn == n]
            # A node short of room already (held for a nomination, or overcommitted by leaving pods) needs its
            # shortfall freed only if the preemptor uses it.
            short = None
            if terms and (stage.free[n, used] < 0).any():
                short = m.new_bool_var(f"on_{n}")
                for k, v in terms:
                    m.add(v <= self.ub[(k, n)] * short)
            for r in used:
                most = sum(self.ub[(k, n)] * int(p.demand[p.parts[g][k].cls, r]) for k, _v in terms)
                if most <= stage.free[n, r]:
                    continue
                placed = _weighted([v for _k, v in terms], [int(p.demand[p.parts[g][k].cls, r]) for k, _v in terms])
                freed_by = [i for i in on[n] if stage.vec[i, r] > 0]
                freed = _weighted([self.x[i] for i in freed_by], [int(stage.vec[i, r]) for i in freed_by])
                fits = m.add(placed <= int(stage.free[n, r]) + freed)
                if short is not None:
                    fits.only_enforce_if(short)

        # PDB violations: victims beyond each budget's allowance.
        self.over: list[cp_model.IntVar] = []
        selected: dict[str, list[int]] = defaultdict(list)
        for i in self.x:
            for b in stage.pool[i].pdbs:
                selected[b].append(i)
        for b, members in sorted(selected.items()):
            allowance = max(0, int(stage.budgets.get(b, 0)))
            if len(members) <= allowance:
                continue
            over = m.new_int_var(0, len(members) - allowance, f"over_{len(self.over)}")
            m.add(over >= _sum([self.x[i] for i in members]) - allowance)
            self.over.append(over)

    def _unit(self, u: int, allowed: np.ndarray, local: set[int]) -> None:
        """Unit u's members: evicted whole, or down to its minimum at most (never broken)."""
        stage, m = self.stage, self.model
        members = [i for i in stage.units[u] if stage.alive[i]]
        keep = stage.unit_min[u]
        spare = max(0, len(members) - keep)  # members that may go with the gang still at its minimum
        touched = self.touched[u] = m.new_bool_var(f"touched_{u}")
        if all(allowed[i] for i in members):
            whole = m.new_bool_var(f"whole_{u}")
            reclaimed = self.reclaim is not None and bool(self.reclaim[members].any())  # whole gangs only
            for i in members:
                if int(stage.node[i]) in local and not reclaimed:
                    self.x[i] = m.new_bool_var(f"x_{i}")
                    m.add(self.x[i] >= whole)
                else:  # it frees nothing the preemptor can use, or its gang is reclaimed: only with the whole gang
                    self.x[i] = whole
            m.add(_sum([self.x[i] for i in members]) <= spare + len(members) * whole)
        else:
            near = [i for i in members if allowed[i] and int(stage.node[i]) in local]
            for i in near:
                self.x[i] = m.new_bool_var(f"x_{i}")
            m.add(_sum([self.x[i] for i in near]) <= spare)
            members = near
        for i in members:
            m.add(touched >= self.x[i])

    def _colocate(self, gang: Gang, nodes: np.ndarray) -> None:
        p, m = self.stage.problem, self.model
        domain = p.domains(gang.colocate or "")
        fixed = {int(domain[p.node_index[n]]) for n in gang.bound_nodes if n in p.node_index}
        chosen: dict[int, cp_model.IntVar] = {}
        for (k, n), v in self.y.items():
            d = int(domain[n])
            if d < 0 or (fixed and d not in fixed):
                m.add(v == 0)
                continue
            if d not in chosen:
                chosen[d] = m.new_bool_var(f"domain_{d}")
            m.add(v <= self.ub[(k, n)] * chosen[d])
        m.add(_sum(list(chosen.values())) == 1)

    def objectives(self) -> list[cp_model.LinearExpr]:
        s = self.stage
        xs = list(self.x.items())
        gpus = [(i, v) for i, v in xs if s.gpus[i]]
        out = [
            _sum(list(self.touched.values())),
            _sum(self.over),
            _weighted([v for _i, v in gpus], [int(s.gpus[i]) for i, _v in gpus]),
            _sum([v for _i, v in xs]),
            _weighted([v for _i, v in xs], [int(s.rank[i]) for i, _v in xs]),
        ]
        if self.reclaim is not None:  # reclaim takes gangs of its own priority: the least work lost first
            lost = [(i, v) for i, v in xs if s.work_lost[i]]
            out.insert(2, _weighted([v for _i, v in lost], [int(s.work_lost[i]) for i, _v in lost]))
        return out

    def solve(self, deadline: float, work: float | None = None) -> Found | _NoTime | None:
        """Each objective in turn, minimized and then held at its optimum. None: infeasible."""
        m, s = self.model, self.stage
        key: list[int] = []
        proven = True
        best: dict[int, int] | None = None  # the last solution found: variable index -> value
        for k, objective in enumerate(self.objectives()):
            seconds = s.budget.left(deadline)
            if seconds < MIN_VICTIM_SECONDS:
                proven = False
                break
            m.minimize(objective)
            grant = s.budget.work(seconds, VICTIM_WORK_PER_SECOND) if work is None else work
            solver = cpsat_solver(grant, deadline, s.workers)
            status = solver.solve(m)
            if status == cp_model.INFEASIBLE and not k:
                return None
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                proven = False  # keep the solution the earlier stages found, if any
                break
            value = round(solver.objective_value)
            key.append(value)
            m.add(objective <= value)
            best = {v.index: int(solver.value(v)) for v in self._variables()}
            self._hint(best)
            if status != cp_model.OPTIMAL:
                proven = False
                break
        if best is None:
            return _NO_TIME
        return self._read(best), self._where(best), tuple(key), proven

    def _variables(self) -> list[cp_model.IntVar]:
        variables = [*self.y.values(), *self.x.values(), *self.touched.values(), *self.over]
        return list({v.index: v for v in variables}.values())

    def _hint(self, best: dict[int, int]) -> None:
        m = self.model
        m.clear_hints()  # type: ignore[no-untyped-call]  # ortools ships this one unannotated
        for v in self._variables():
            m.add_hint(v, best[v.index])

    def _read(self, best: dict[int, int]) -> tuple[int, ...]:
        return tuple(sorted(i for i, v in self.x.items() if best[v.index]))

    def _where(self, best: dict[int, int]) -> dict[str, str]:
        return self.stage.problem.bindings(self.g, {key: best[v.index] for key, v in self.y.items()})
