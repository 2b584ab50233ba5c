"""Workloads are seeded and replayable; strategies compute send times."""
import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

from compare.workload.schedule import LoadLevel, parse_levels, poisson_offsets_ns
from compare.workload.build import LengthDist, WorkloadSpec, build_requests, request_from_dict, request_to_dict


def test_same_seed_same_requests_other_seed_differs():
    spec = WorkloadSpec(num_requests=20, input=LengthDist(dist="uniform", min=8, max=64),
                        output=LengthDist(dist="lognormal", mean=40, std=20))
    a, b = build_requests(spec), build_requests(spec)
    assert a == b
    c = build_requests(spec.model_copy(update={"seed": 1}))
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in c]
    assert all(8 <= len(r.prompt_token_ids) <= 64 for r in a)


@pytest.mark.parametrize("dist", [
    LengthDist(dist="fixed", value=33),
    LengthDist(dist="uniform", min=10, max=20),
    LengthDist(dist="normal", mean=100, std=10),
    LengthDist(dist="lognormal", mean=200, std=80),
])
def test_length_distributions_have_their_moments(dist):
    x = np.array(dist.sample(np.random.default_rng(0), 4000))
    assert x.min() >= 1
    if dist.dist == "fixed":
        assert set(x) == {33}
    elif dist.dist == "uniform":
        assert x.min() == 10 and x.max() == 20
    else:
        assert abs(x.mean() - dist.mean) / dist.mean < 0.05
        assert abs(x.std() - dist.std) / dist.std < 0.15


def test_shared_prefix_requests_share_documents():
    spec = WorkloadSpec(num_requests=30, input=LengthDist(value=8),
                        shared_prefix={"num_documents": 3, "document_tokens": 100})
    reqs = build_requests(spec)
    prefixes = {r.prompt_token_ids[:100] for r in reqs}
    assert len(prefixes) == 3
    assert all(len(r.prompt_token_ids) == 108 for r in reqs)


def test_sharegpt_file(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": f"question {i}"},
                               {"from": "gpt", "value": "answer " * (i + 1)}]} for i in range(5)]
    p = tmp_path / "sg.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = WorkloadSpec(num_requests=3, sharegpt=str(p), prompt_format="text")
    reqs = build_requests(spec)
    assert len(reqs) == 3 and all(r.prompt_text.startswith("question") for r in reqs)


def test_request_roundtrip_is_exact():
    for r in build_requests(WorkloadSpec(num_requests=3)):
        assert request_from_dict(json.loads(json.dumps(request_to_dict(r)))) == r


def test_invalid_workload_rejected():
    with pytest.raises(ValidationError):
        WorkloadSpec(num_requests=0)
    with pytest.raises(ValidationError):
        LengthDist(dist="uniform", min=5)
    with pytest.raises(ValidationError):
        WorkloadSpec(token_id_range=(100, 10))


def test_poisson_offsets_seeded_with_the_right_rate():
    a = poisson_offsets_ns(5000, 10.0, seed=3)
    assert a == poisson_offsets_ns(5000, 10.0, seed=3) and a[0] == 0
    assert a != poisson_offsets_ns(5000, 10.0, seed=4)
    rate = (len(a) - 1) / (a[-1] / 1e9)
    assert 9.5 < rate < 10.5
    assert poisson_offsets_ns(4, math.inf, seed=0) == [0, 0, 0, 0]


def test_parse_levels():
    lv = parse_levels("1,4", "2.5,inf")
    assert [x.label for x in lv] == ["c1", "c4", "r2.5", "burst"]
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(ValueError):
            parse_levels(bad, None)
    with pytest.raises(ValueError):
        LoadLevel("rate", 0)
