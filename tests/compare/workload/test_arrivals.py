"""Open-loop arrival processes (compare/workload/arrivals.py): constant and gamma beside Poisson,
seeded so every backend gets the same send offsets; an end-to-end run on the fake engine (in
process, deterministic) records the gamma schedule in run.json."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from compare.cli.commands import run as run_cmd
from compare.cli.main import build_parser
from compare.cli.request import run_request
from compare.workload.arrivals import offsets_ns
from compare.workload.schedule import LoadLevel, parse_levels, poisson_offsets_ns
from core.errors import UserError


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def _cv2(offs: list[int]) -> float:
    gaps = np.diff(np.array(offs, dtype=float))
    return float(gaps.var() / gaps.mean() ** 2)


def test_constant_gaps_are_exactly_one_over_the_rate():
    assert offsets_ns(5, 4.0, seed=1, arrival="constant") == [0, 250_000_000, 500_000_000, 750_000_000,
                                                               1_000_000_000]


def test_poisson_is_unchanged_and_the_default():
    assert offsets_ns(50, 8.0, 3) == poisson_offsets_ns(50, 8.0, 3)
    assert offsets_ns(50, 8.0, 3, "poisson") == offsets_ns(50, 8.0, 3)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_keeps_the_mean_rate_and_its_burstiness_is_the_gaps_cv2(burstiness):
    offs = offsets_ns(20_000, 10.0, seed=5, arrival="gamma", burstiness=burstiness)
    assert offs[0] == 0 and offs == sorted(offs)
    mean_gap_s = offs[-1] / 1e9 / (len(offs) - 1)
    assert mean_gap_s == pytest.approx(0.1, rel=0.05)
    assert _cv2(offs) == pytest.approx(burstiness, rel=0.15)


def test_schedules_are_seeded_and_differ_by_seed():
    a = offsets_ns(100, 5.0, 7, "gamma", 3.0)
    assert a == offsets_ns(100, 5.0, 7, "gamma", 3.0)
    assert a != offsets_ns(100, 5.0, 8, "gamma", 3.0)


def test_levels_carry_their_arrivals_into_labels_and_results():
    const, gamma = parse_levels(None, "8", "constant")[0], parse_levels(None, "8", "gamma", 4.0)[0]
    assert (const.label, gamma.label) == ("r8-const", "r8-g4")
    assert gamma.as_dict() == {"kind": "rate", "value": 8.0, "label": "r8-g4", "arrival": "gamma", "burstiness": 4.0}
    assert parse_levels(None, "8")[0].as_dict() == {"kind": "rate", "value": 8.0, "label": "r8"}
    assert parse_levels("2", None, "gamma", 4.0)[0].label == "c2"  # closed loop has no arrivals


@pytest.mark.parametrize("argv, message", [
    (["--rate", "4", "--arrival", "uniform"], "--arrival 'uniform' is unknown; use one of poisson, constant, gamma"),
    (["--rate", "4", "--arrival", "gamma", "--burstiness", "0"], "--burstiness 0.0: must be a finite number > 0"),
    (["--rate", "4", "--arrival", "gamma", "--burstiness", "-2"], "--burstiness -2.0: must be a finite number > 0"),
    (["--concurrency", "2", "--arrival", "constant"], "--arrival constant shapes open-loop levels: give --rate"),
    (["--rate", "4", "--burstiness", "3"], "--burstiness 3 applies to gamma arrivals: add --arrival gamma"),
])
def test_bad_arrival_options_are_one_line(argv, message, tmp_path):
    out = tmp_path / "results"
    with pytest.raises(UserError) as e:
        run_request(_parse("--backends", "fake", *argv, "--out", str(out)))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_a_gamma_level_runs_on_the_fake_engine_with_the_seeded_schedule(tiny_model, tmp_path):
    args = _parse("--backends", "fake", "--model", str(tiny_model), "--rate", "200", "--arrival", "gamma",
                  "--burstiness", "4", "--num-requests", "8", "--input-len", "8", "--output-len", "4",
                  "--warmup", "0", "--workload-seed", "11", "--quality", "off", "--quiet",
                  "--out", str(tmp_path), "--run-id", "g")
    assert run_cmd.execute(run_request(args)) == 0
    doc = json.loads((tmp_path / "g" / "run.json").read_text())
    level = doc["backends"]["fake"]["levels"]["r200-g4"]
    assert level["schedule_offsets_ns"] == offsets_ns(8, 200.0, 11, "gamma", 4.0)
    assert LoadLevel("rate", 200.0, arrival="gamma", burstiness=4.0).label == "r200-g4"


def test_a_replay_sends_the_gamma_level_on_the_same_schedule(tiny_model, tmp_path):
    common = ("--backends", "fake", "--model", str(tiny_model), "--rate", "200", "--arrival", "gamma",
              "--burstiness", "4", "--warmup", "0", "--workload-seed", "5", "--quality", "off", "--quiet",
              "--out", str(tmp_path))
    assert run_cmd.execute(run_request(_parse(*common, "--num-requests", "6", "--input-len", "8",
                                              "--output-len", "4", "--run-id", "a"))) == 0
    assert run_cmd.execute(run_request(_parse(*common, "--replay", str(tmp_path / "a"), "--run-id", "b"))) == 0
    first, again = (json.loads((tmp_path / r / "run.json").read_text())["backends"]["fake"]["levels"]["r200-g4"]
                    for r in ("a", "b"))
    assert again["schedule_offsets_ns"] == first["schedule_offsets_ns"] == offsets_ns(6, 200.0, 5, "gamma", 4.0)
