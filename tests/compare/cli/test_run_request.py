"""``compare run``'s options become one frozen, checked RunRequest (compare/cli/request.py); what
runs afterwards takes the request, never the parsed options. The run itself is on the fake engine
(backends/fake/: deterministic, in-process), so this stays in the fast tier."""
from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import inspect
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from compare.cli import defaults as common
from compare.cli.commands import run as run_cmd
from compare.cli.main import build_parser
from compare.cli.request import Output, RunRequest, run_request
from core.errors import UserError


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def test_the_request_is_frozen_and_typed(tiny_model, tmp_path):
    r = run_request(_parse("--backends", "fake", "--model", str(tiny_model), "--concurrency", "1,4",
                           "--slo", "ttft_p95=2s", "--num-requests", "4", "--client-procs", "2",
                           "--quality-prompts", "3", "--vary", "block_size=16,32", "--gpu-hour-price", "2.5",
                           "--format", "json", "--out", str(tmp_path), "--run-id", "r1", "--max-errors", "1"))
    assert isinstance(r, RunRequest)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.warmup = 3  # type: ignore[misc]
    with pytest.raises(ValidationError):  # the spec and the workload are frozen models too
        r.spec.model = "/elsewhere"
    with pytest.raises(ValidationError):
        r.workload.num_requests = 8
    assert r.targets == ("fake",) and isinstance(r.targets, tuple)
    assert [lv.label for lv in r.levels] == ["c1", "c4"]
    assert [(t.metric, t.stat, t.limit_ms) for t in r.slo.terms] == [("ttft", "p95", 2000.0)]
    assert r.spec.model == str(tiny_model) and r.workload.num_requests == 4
    assert (r.client_procs, r.max_errors, r.run_id, r.out) == (2, 1, "r1", tmp_path)
    assert (r.quality.mode, r.quality.num_prompts) == ("auto", 3)
    assert [(a.field, a.values) for a in r.vary] == [("block_size", (16, 32))]
    assert r.output == Output(format="json", price=2.5)
    assert r.served is None and r.max_rate is None and r.scaleout is None


def test_defaults_are_resolved_and_the_options_are_left_as_parsed(tiny_model):
    args = _parse()
    before = copy.deepcopy(vars(args))
    r = run_request(args)
    assert vars(args) == before, "run_request writes nothing into the parsed options"
    assert r.targets == tuple(common.default_backends().split(","))
    assert [lv.label for lv in r.levels] == ["c1", "c4"]  # DEFAULT_LEVELS
    # the embedded tiny model and its CPU spec; the default workload
    assert r.spec.model == str(tiny_model)
    assert (r.spec.dtype, r.spec.max_model_len) == ("float32", 512)
    assert r.workload.num_requests == 16 and r.workload.name == "default"
    assert (r.warmup, r.timeout_s, r.repeats, r.max_errors, r.client_procs) == (2, 600.0, 1, None, None)
    assert r.output == Output() and r.out == Path("results") and r.run_id is None and r.vary == ()
    assert (r.quality.mode, r.quality.device, r.quality.num_prompts) == ("auto", "auto", 8)


def test_find_max_rate_options_are_typed(tiny_model):
    r = run_request(_parse("--model", str(tiny_model), "--backends", "fake", "--slo", "ttft_p95=2s",
                           "--find-max-rate", "--max-rate-start", "2", "--max-rate-probes", "3"))
    assert (r.max_rate.start, r.max_rate.probes, r.max_rate.tol) == (2.0, 3, 0.15)


@pytest.mark.parametrize("argv, message", [
    (["--max-errors", "-1"], "--max-errors must be >= 0"),
    (["--client-procs", "0"], "--client-procs '0': give a number of processes >= 1 or 'auto'"),
    (["--quality-prompts", "0"], "--quality-prompts 0: give at least 1 (or --quality off)"),
    (["--concurrency", "2,2"], "load level c2 is given twice in --concurrency/--rate"),
    (["--rate", "4", "--requests-per-stream", "2"], "--requests-per-stream sizes closed-loop levels"),
    (["--require-slo"], "--require-slo checks the run against --slo"),
    (["--find-max-rate"], "--find-max-rate needs an SLO to meet"),
    (["--slo", "ttft_p95=2s", "--find-max-rate", "--max-rate-probes", "0"], "--max-rate-probes must be >= 1"),
    (["--ray-load-shards", "2"], "--ray-load-shards needs --ray"),
    (["--kill-replica-after", "5"], "apply to --topology replicas=N"),
])
def test_bad_input_is_one_line_before_the_model_is_built(argv, message, tmp_path, capsys):
    out = tmp_path / "results"
    with pytest.raises(UserError) as e:
        run_request(_parse(*argv, "--out", str(out)))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert "using the embedded" not in capsys.readouterr().err  # refused before the tiny model is looked at
    assert not out.exists()


def test_execute_takes_a_request_alone(tiny_model, tmp_path, capfd, monkeypatch):
    """A request made without any parsed options runs end to end on the fake engine."""
    from adapters.spec import ServingSpec
    from backends import logs

    # the console writes to logs.terminal(), a duplicate of fd 1 taken once per process: an earlier
    # in-process run of this worker would have taken it before capfd redirected fd 1
    monkeypatch.setattr(logs, "_TERMINALS", {})
    from compare.quality.parity import QualityOptions
    from compare.workload.build import LengthDist, WorkloadSpec
    from compare.workload.schedule import LoadLevel
    from core.slo import SLO

    r = RunRequest(targets=("fake",), levels=(LoadLevel("concurrency", 2),), slo=SLO(),
                   spec=ServingSpec(model=str(tiny_model)),
                   workload=WorkloadSpec(num_requests=4, input=LengthDist(dist="fixed", value=8),
                                         output=LengthDist(dist="fixed", value=4)),
                   quality=QualityOptions(mode="off"), warmup=0, out=tmp_path, run_id="direct",
                   output=Output(quiet=True))
    assert run_cmd.execute(r) == 0
    doc = json.loads((tmp_path / "direct" / "run.json").read_text())
    assert doc["status"] == "complete" and doc["workload"]["num_requests"] == 4
    assert f"results: {tmp_path / 'direct'}" in capfd.readouterr().out


def test_nothing_below_run_request_takes_the_parsed_options():
    """Only ``_run`` (the command's entry) sees the Namespace; every step after it takes typed values."""
    tree = ast.parse(inspect.getsource(run_cmd))
    takers = sorted(f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                    and any(a.arg == "args" for a in f.args.args))
    assert takers == ["_run"]
    run_body = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "_run")
    assert ast.unparse(run_body.body[-1]) == "return execute(run_request(args))"
    from compare.cli import max_rate, options

    for fn in (max_rate.hook, options.apply_topology, options.scaleout, common.tiny_defaults,
               common.served_defaults, run_cmd._requests, run_cmd.execute):
        assert "args" not in inspect.signature(fn).parameters, fn.__name__


def test_each_backend_is_planned_once_per_run(tiny_model, tmp_path, monkeypatch, capfd):
    """execute() validates every backend's plan before anything starts; the run builds its engines
    (every repeat's included) from those same plans, not from a second probe of the machine and model."""
    from backends import registry

    prepared: list[str] = []
    real = registry.prepare

    def counting(full, spec, machine=None, load=None):
        prepared.append(str(full))
        return real(full, spec, machine, load)

    monkeypatch.setattr(registry, "prepare", counting)
    r = run_request(_parse("--backends", "fake,fake@itl=1ms", "--model", str(tiny_model), "--concurrency", "1",
                           "--num-requests", "2", "--input-len", "8", "--output-len", "2", "--repeats", "2",
                           "--warmup", "0", "--quality", "off", "--out", str(tmp_path), "--run-id", "once", "-q"))
    assert run_cmd.execute(r) == 0
    assert sorted(prepared) == ["fake", "fake@itl=1ms"]


def test_the_defaults_take_the_typed_backend_names():
    """tiny_defaults / served_defaults / scaleout take parse_backends' names, never the raw --backends text."""
    from compare.cli import options

    names = common.parse_backends("fake,openai@http://127.0.0.1:9/v1")
    with pytest.raises(UserError, match="mixes already running servers"):
        common.tiny_defaults(None, None, names)
    assert common.served_defaults(None, None, names, 1.0, None) == (None, {})  # a mix: tiny_defaults says why
    with pytest.raises(UserError, match="fake starts its engine here"):
        options.scaleout("auto", 2, 5.0, names)
    for fn in (common.tiny_defaults, common.served_defaults, options.scaleout):
        assert "Sequence[str]" in str(inspect.signature(fn).parameters["backends"].annotation), fn.__name__
