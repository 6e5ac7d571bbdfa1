"""Prometheus metrics, named as kube-scheduler and Volcano name theirs (prefix `gangsolve_`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gangsolve.solver.model import Cluster, Placement

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # kube-scheduler: scheduler_schedule_attempts_total{result=scheduled|unschedulable|error}; here per gang.
        self.schedule_attempts = Counter(
            "gangsolve_schedule_attempts_total", "Gang scheduling attempts, by result.", ["result"], registry=r
        )
        self.cycle_duration = Histogram(
            "gangsolve_scheduling_cycle_duration_seconds",
            "One cycle: snapshot, gang grouping, solve and handing the placement to the binder.",
            buckets=_LATENCY,
            registry=r,
        )
        # Volcano: volcano_e2e_scheduling_latency_milliseconds;
        # kube-scheduler: scheduler_scheduling_algorithm_duration_seconds.
        self.solve_duration = Histogram(
            "gangsolve_solve_duration_seconds", "The solver's time per cycle.", buckets=_LATENCY, registry=r
        )
        self.optimality_gap = Gauge(
            "gangsolve_solver_optimality_gap",
            "Last cycle: (proven bound - gangs placed) / bound; 0 when the placement is proven optimal.",
            registry=r,
        )
        self.cycle_pools = Gauge(
            "gangsolve_cycle_pools",
            "Last cycle: the node pools it was solved in, each in a process of its own (1: solved whole).",
            registry=r,
        )
        self.solver_status = Counter(
            "gangsolve_solver_status_total",
            "Cycles by the solver's status (OPTIMAL, FEASIBLE, GREEDY).",
            ["status"],
            registry=r,
        )
        # kube-scheduler: scheduler_pending_pods; Volcano: volcano_unschedule_job_count.
        self.pending_gangs = Gauge("gangsolve_pending_gangs", "Gangs left pending by the last cycle.", registry=r)
        self.pending_pods = Gauge("gangsolve_pending_pods", "Pods of ours left pending by the last cycle.", registry=r)
        self.bind_duration = Histogram(
            "gangsolve_binding_duration_seconds", "Latency of one pod's Binding call.", buckets=_LATENCY, registry=r
        )
        self.gang_bind_duration = Histogram(
            "gangsolve_gang_binding_duration_seconds",
            "From a gang's placement to its last pod bound.",
            buckets=_LATENCY,
            registry=r,
        )
        self.bind_errors = Counter(
            "gangsolve_binding_errors_total",
            "Failed Binding calls (and GPU index writes before them), by reason.",
            ["reason"],
            registry=r,
        )
        self.pods_bound = Counter("gangsolve_pods_bound_total", "Pods bound.", registry=r)
        self.watch_errors = Counter(
            "gangsolve_watch_errors_total",
            "Watch or list failures, by kind and reason.",
            ["kind", "reason"],
            registry=r,
        )
        self.events_dropped = Counter(
            "gangsolve_events_dropped_total", "Events not written because of rate limits.", registry=r
        )
        self.is_leader = Gauge("gangsolve_leader", "1 while this replica holds the lease.", registry=r)
        self.objects_skipped = Counter(
            "gangsolve_objects_skipped_total",
            "Objects left out of a cycle because they cannot be read (their pods wait and say why).",
            registry=r,
        )
        self.held_objects = Gauge(
            "gangsolve_held_objects",
            "What the scheduler holds in memory, by kind: watched objects, assumed pods, pods in back-off, and "
            "the pod conditions and PodGroup statuses feedback remembers writing.",
            ["kind"],
            registry=r,
        )
        # kube-scheduler: scheduler_preemption_victims, scheduler_preemption_attempts_total.
        self.preemption_victims = Counter(
            "gangsolve_preemption_victims_total", "Pods chosen as victims to make room for a gang.", registry=r
        )
        self.evictions = Counter(
            "gangsolve_preemption_evictions_total",
            "Victims' evictions, by result (evicted, gone: deleted or replaced meanwhile, failed).",
            ["result"],
            registry=r,
        )
        self.definition_wait = Histogram(
            "gangsolve_definition_wait_seconds",
            "How long pods that waited for their gang definition (PodGroup or PDB) had existed when they stopped "
            "waiting, because it arrived or their grace ended: the latency the grace adds.",
            buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 15, 30, 60, 120),
            registry=r,
        )
        self.gangs_replanned = Counter(
            "gangsolve_gangs_replanned_total",
            "Planned gangs not bound because the cluster changed under them; planned again.",
            registry=r,
        )
        # Planning in time (Slurm reports the like as backfilled jobs and reserved nodes).
        self.reservations = Gauge(
            "gangsolve_reservations",
            "Last cycle: pending gangs holding a reservation in the plan (an expected start and nodes).",
            registry=r,
        )
        self.plan_horizon = Gauge(
            "gangsolve_plan_horizon_seconds",
            "Last cycle: seconds from the cycle to the latest expected start in the plan.",
            registry=r,
        )
        self.start_after_expected = Histogram(
            "gangsolve_start_after_expected_seconds",
            "Gangs that were shown an expected start, when they start: seconds after the first one shown "
            "(negative: sooner than expected).",
            buckets=(-3600, -600, -60, 0, 60, 300, 900, 3600, 4 * 3600, float("inf")),
            registry=r,
        )
        self.reserved_gpus = Gauge(
            "gangsolve_reserved_gpus", "Last cycle: GPUs the reservations hold from their start.", registry=r
        )
        self.waiting_for_estimate = Gauge(
            "gangsolve_waiting_for_estimate",
            "Last cycle: pending gangs with no expected start because running pods they wait for have no expected end.",
            registry=r,
        )
        self.backfilled_gangs = Counter(
            "gangsolve_backfilled_gangs_total",
            "Gangs started on nodes a reservation holds for later (they end first, or leave it what it needs).",
            registry=r,
        )

        # Volcano: volcano_queue_allocated_milli_cpu, volcano_queue_share, volcano_queue_weight, ...; here one
        # gauge per quantity with the resource as a label (base units: millicores, bytes, GPUs).
        self.queue_allocated = Gauge(
            "gangsolve_queue_allocated",
            "What a queue's pods hold after the last cycle (bound plus placed), by resource, in base units.",
            ["queue", "resource"],
            registry=r,
        )
        self.queue_capability = Gauge(
            "gangsolve_queue_capability", "A queue's cap, by resource it names.", ["queue", "resource"], registry=r
        )
        self.queue_share = Gauge(
            "gangsolve_queue_share",
            "A queue's dominant share of the cluster after the last cycle.",
            ["queue"],
            registry=r,
        )
        self.queue_fair_share = Gauge(
            "gangsolve_queue_fair_share",
            "A queue's weighted fair (dominant) share in the last cycle.",
            ["queue"],
            registry=r,
        )
        self.queue_weight = Gauge("gangsolve_queue_weight", "A queue's weight.", ["queue"], registry=r)
        self.queue_usage = Gauge(
            "gangsolve_queue_usage",
            "A queue's usage history (dominant share x seconds, decayed by `usage-half-life`; with its children's).",
            ["queue"],
            registry=r,
        )
        self.queue_pending_gangs = Gauge(
            "gangsolve_queue_pending_gangs", "Gangs of a queue left pending by the last cycle.", ["queue"], registry=r
        )

    def observe_queues(self, cluster: Cluster, placement: Placement) -> None:
        """Per-queue gauges of the last cycle (cleared first: queues gone leave no series behind; the event loop
        serves /metrics, so no scrape sees them half set)."""
        pending: dict[str, int] = {}
        for gang, result in zip(cluster.gangs, placement.gangs, strict=True):
            pending[gang.queue] = pending.get(gang.queue, 0) + int(not result.placed)
        gauges = (
            self.queue_allocated,
            self.queue_capability,
            self.queue_share,
            self.queue_fair_share,
            self.queue_weight,
            self.queue_pending_gangs,
            self.queue_usage,
        )
        for gauge in gauges:
            gauge.clear()
        for q in placement.queues:
            for resource, amount in q.allocated.items():
                self.queue_allocated.labels(q.name, resource).set(amount)
            for resource, amount in q.capability.items():
                self.queue_capability.labels(q.name, resource).set(amount)
            self.queue_share.labels(q.name).set(q.share)
            self.queue_fair_share.labels(q.name).set(q.fair_share)
            self.queue_weight.labels(q.name).set(q.weight)
            self.queue_pending_gangs.labels(q.name).set(pending.get(q.name, 0))
            self.queue_usage.labels(q.name).set(q.usage)
