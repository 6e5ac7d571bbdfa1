"""The live mode: each scheduler on its own real control plane with kwok nodes. live_scenarios.py says what
runs, populate.py creates it, measurements.py watches and measures, runs.py runs one scheduler at a time;
live_preemption.py and live_topology.py are the preemption and topology scenarios. Here: the names of the
schedulers it runs (the command line offers them without importing the rest)."""

LIVE_SCHEDULERS = ("kube-scheduler", "kube-scheduler-gang", "gangsolve")
WAP = "kube-scheduler-wap"  # kube-scheduler's workload-aware preemption: the live preemption scenarios only
# Other projects' schedulers, built from source (hack/build-peers.sh): each runs where its binary is built and the
# scenario's users can write what it reads.
# volcano: the configuration Volcano's Helm chart installs; volcano-gpu-binpack: the same with its binpack plugin
# scoring GPUs as the plugin documents it; volcano-reclaim: the same with the reclaim action added, as Volcano's
# guides have users add it for queues that lend and reclaim (the tenants timelines only); kueue: Kueue admitting
# (its chart's configuration with waitForPodsReady blocking admission, one ClusterQueue over the free capacity, or
# on the tenants timelines one per team in a cohort with fair sharing) and kube-scheduler placing;
# kueue-unblocked: the same without blocking admission; kueue-tas: with its topology-aware scheduling at node
# level, not blocking admission; kai: NVIDIA's KAI scheduler and binder with its chart's default queues (quota 0)
# and its operator's configuration for the default shard (GPUs and CPUs binpacked); kai-quota: the same with the
# queues guaranteed what the background leaves free (KAI runs gangs of priority 100 or more only within quota).
# bench/live/peers.py runs them.
REAL_PEERS = (
    "volcano",
    "volcano-gpu-binpack",
    "volcano-reclaim",
    "kueue",
    "kueue-unblocked",
    "kueue-tas",
    "kai",
    "kai-quota",
)
# The named sets of live scenarios `--live-grid` offers (live_scenarios.LIVE_GRIDS holds their members).
LIVE_GRID_NAMES = (
    "small",
    "timeline",
    "tenants",
    "topology",
    "scale-1000",
    "scale-5000",
    "scale-16384",
    "scale-curve",
)
