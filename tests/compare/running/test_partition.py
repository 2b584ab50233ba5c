"""Dividing a level among load generators (client processes, Ray load shards)."""
from compare.running.partition import partition, split_streams
from compare.running.ray_load import split
from compare.workload.schedule import LoadLevel, poisson_offsets_ns


def test_streams_spread_evenly_first_parts_take_the_rest():
    assert split_streams(10, 4) == [3, 3, 2, 2]
    assert split_streams(4, 4) == [1, 1, 1, 1]
    assert sum(split_streams(7, 3)) == 7


def test_closed_loop_parts_round_robin_with_their_streams():
    parts, offsets = partition(LoadLevel("concurrency", 10), 9, 4, seed=1)
    assert offsets is None
    assert [p.streams for p in parts] == [3, 3, 2, 2]
    assert [list(p.requests) for p in parts] == [[0, 4, 8], [1, 5], [2, 6], [3, 7]]
    capped, _ = partition(LoadLevel("concurrency", 10), 5, 4, seed=1, streams=5)
    assert [p.streams for p in capped] == [2, 1, 1, 1]


def test_open_loop_parts_together_offer_the_one_schedule():
    parts, offsets = partition(LoadLevel("rate", 5.0), 11, 3, seed=7)
    assert offsets == poisson_offsets_ns(11, 5.0, 7)
    dealt = sorted((o, i) for p in parts for i, o in zip(p.requests, p.offsets_ns))
    assert dealt == sorted((o, i) for i, o in enumerate(offsets))
    assert all(p.streams == 0 for p in parts)


def test_ray_shards_use_the_same_partition():
    shards, offsets = split(LoadLevel("concurrency", 10), 20, 4, seed=0)
    assert offsets is None
    assert [int(lv.value) for _, lv, _ in shards] == [3, 3, 2, 2]
    assert shards[1][0] == list(range(1, 20, 4))
    shards, offsets = split(LoadLevel("rate", 2.0), 6, 8, seed=3)
    assert len(shards) == 6 and offsets == poisson_offsets_ns(6, 2.0, 3)
