"""The greedy allocator's variants that seed the search."""

from gangsolve.solver import Cluster
from gangsolve.solver.greedy import greedy, most_allocated, most_allocated_off_gpus
from gangsolve.solver.problem import Problem
from tests.builders import gang, node


def placed_names(problem, counts):
    return {problem.gangs[g].name for g in counts}


def test_minimum_first_leaves_extras_until_every_gang_had_its_turn():
    # The elastic gang comes first in queue order; with all its pods it takes every GPU and the second gang
    # cannot start. Its minimum (2) leaves room for the second gang; its extras then find no room.
    cluster = Cluster((node("n", gpus=4),), (gang("elastic", 4, min_member=2, gpus=1), gang("other", 2, gpus=1)))
    problem = Problem(cluster)
    assert placed_names(problem, greedy(problem)) == {"elastic"}
    counts = greedy(problem, minimum_first=True)
    assert placed_names(problem, counts) == {"elastic", "other"}
    assert sum(counts[0].values()) == 2


def test_minimum_first_adds_extras_where_room_is_left():
    cluster = Cluster((node("n", gpus=8),), (gang("elastic", 4, min_member=2, gpus=1), gang("other", 2, gpus=1)))
    problem = Problem(cluster)
    counts = greedy(problem, minimum_first=True)
    assert sum(counts[0].values()) == 4  # both gangs at their minimum, then the 2 extras
    assert sum(counts[1].values()) == 2


def test_cpu_pods_keep_off_gpu_nodes_under_most_allocated():
    # MostAllocated alone packs a small cpu pod onto the smaller (GPU) node, taking memory GPU pods need.
    cluster = Cluster((node("gpu", cpu=8, gpus=4), node("cpu", cpu=64)), (gang("ps", 1, cpu=2),))
    problem = Problem(cluster)
    gpu_node, cpu_node = 0, 1
    assert {n for (_p, n) in greedy(problem, scorer=most_allocated)[0]} == {gpu_node}
    assert {n for (_p, n) in greedy(problem, scorer=most_allocated_off_gpus)[0]} == {cpu_node}


def test_already_placed_gangs_keep_their_nodes_and_capacity():
    cluster = Cluster((node("a", gpus=4), node("b", gpus=4)), (gang("kept", 4, gpus=1), gang("new", 4, gpus=1)))
    problem = Problem(cluster)
    b = problem.node_index["b"]
    counts = greedy(problem, placed={0: {(0, b): 4}})
    assert counts[0] == {(0, b): 4}
    assert {n for (_p, n) in counts[1]} == {problem.node_index["a"]}
