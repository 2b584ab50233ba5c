"""Each command-line option is declared once, as a field of a pydantic model
(compare/cli/run_options.py); argparse is generated from it (compare/cli/model_args.py), so the
--help text, the default and the range check cannot drift apart."""
from __future__ import annotations

import argparse
import typing

import pytest

from compare.cli.main import build_parser
from compare.cli.model_args import flag_of
from compare.cli.run_options import RunOptions, SpecOptions, VerdictOptions, WorkloadOptions
from compare.cli.commands.plan import PlanOptions
from compare.cli.commands import quant_quality
from compare.cli.commands.quant_options import CheckOptions, MatrixOptions, QuantRunOptions
from compare.cli.commands.quantize import QuantizeOptions
from compare.cli.commands.tune import TuneOptions
from tests.conftest import run_cli

COMMAND_MODELS = (RunOptions, PlanOptions, TuneOptions, QuantizeOptions, MatrixOptions, CheckOptions,
                  QuantRunOptions, quant_quality._options())


def _subparser(command: str, *sub: str) -> argparse.ArgumentParser:
    p = build_parser()
    for name in (command, *sub):
        action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = action.choices[name]
    return p


@pytest.mark.parametrize("model, command", [
    (RunOptions, ("run",)), (SpecOptions, ("plan",)), (SpecOptions, ("tune",)), (WorkloadOptions, ("tune",)),
    (SpecOptions, ("quant", "run")), (WorkloadOptions, ("quant", "run")), (VerdictOptions, ("report",)),
    (PlanOptions, ("plan",)), (TuneOptions, ("tune",)), (QuantizeOptions, ("quantize",)),
    (MatrixOptions, ("quant", "matrix")), (CheckOptions, ("quant", "check")), (QuantRunOptions, ("quant", "run")),
    (quant_quality._options(), ("quant", "quality")),
])
def test_every_option_of_the_model_is_in_argparse_with_its_default_and_help(model, command):
    actions = {a.dest: a for a in _subparser(*command)._actions}
    for name, field in model.model_fields.items():
        a = actions.get(name)
        assert a is not None, f"{' '.join(command)}: {flag_of(model, name)} is not an option"
        assert flag_of(model, name) in a.option_strings
        assert a.help == field.description, name
        if field.is_required():
            assert a.required, name
            continue
        default = field.get_default(call_default_factory=True)
        assert a.default == default or (a.default is None and default in (False, None)), name
        kind = field.annotation
        if "Literal" in str(kind) and "says" not in field.json_schema_extra["cli"]:  # choices come from the type
            assert a.choices and all(c in str(kind) for c in a.choices), name
    if model in COMMAND_MODELS:  # and nothing else: every option of the command is the model's
        extra = sorted(d for d in actions if d not in model.model_fields and d not in ("help", "func"))
        assert extra == []


def test_the_defaults_parse_into_the_model():
    o = RunOptions.of(build_parser().parse_args(["run"]))
    assert (o.warmup, o.timeout, o.repeats, o.quality_prompts, o.format, o.lb) == (2, 600.0, 1, 8, "table", "lor")
    assert o.native == [] and o.flags()["model"] is None and o.trace_options() is None


@pytest.mark.parametrize("argv, line", [
    (["--repeats", "0"], "--repeats must be >= 1 (2 or more give confidence intervals), got 0"),
    (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
    (["--timeout", "0"], "--timeout must be > 0 (seconds), got 0"),
    (["--quality-prompts", "0"], "--quality-prompts 0: give at least 1 (or --quality off)"),
    (["--margin", "1.5"], "--margin is a fraction between 0 and 1, e.g. 0.05 for 5%; got 1.5"),
    (["--gpu-hour-price", "-2"], "--gpu-hour-price must be > 0 (price of one accelerator-hour, e.g. 2.5), got -2"),
    (["--workload-seed", "-3"], "--workload-seed -3: a seed is a whole number >= 0"),
    (["--ray-max-clock-error-ms", "0"], "--ray-max-clock-error-ms must be > 0, got 0"),
    (["--rate", "2", "--arrival", "bursty"], "--arrival 'bursty' is unknown; use one of poisson, constant, gamma"),
])
def test_a_range_violation_is_one_line_exit_2(argv, line, tmp_path):
    p = run_cli("run", "--backends", "fake", *argv, "--out", str(tmp_path / "results"))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == f"error: {line}", p.stderr
    assert not (tmp_path / "results").exists()


def test_the_arrival_choices_are_the_arrival_processes():
    from compare.workload.arrivals import ARRIVALS
    assert typing.get_args(RunOptions.model_fields["arrival"].annotation) == ARRIVALS
    assert RunOptions.of(build_parser().parse_args(["run", "--arrival", "gamma"])).arrival == "gamma"


@pytest.mark.parametrize("argv, line", [
    (["plan", "--num-requests", "0"], "--num-requests must be > 0"),
    (["tune", "--slo", "ttft_p95=1s", "--max-probes", "1"], "--repeats must be >= 1 and --max-probes >= 2"),
    (["tune", "--slo", "ttft_p95=1s", "--tol", "0"], "--start-load and --tol must be > 0"),
    (["quantize", "--model", "M", "--out", "O", "--scheme", "w4a16", "--seq-len", "0"],
     "--samples and --seq-len must be > 0"),
    (["quant", "quality", "--window-len", "4"], "--windows >= 1, --window-len >= 8 and --top-k >= 1, please"),
    (["quant", "run", "--schemes", "fp32", "--warmup", "-1"], "--warmup must be >= 0, got -1"),
    (["quant", "run", "--schemes", "fp32", "--timeout", "0"], "--timeout must be > 0 (seconds), got 0"),
    (["quant", "run", "--schemes", "fp32", "--quality-prompts", "0"], "--quality-prompts must be >= 1, got 0"),
    (["quant", "run", "--schemes", "fp32", "--quality-tokens", "0"], "--quality-tokens must be >= 1, got 0"),
])
def test_other_commands_refuse_a_range_violation_in_one_line(argv, line, tmp_path):
    p = run_cli(*argv, "--out", str(tmp_path / "o")) if argv[0] == "tune" else run_cli(*argv)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == f"error: {line}", p.stderr
    assert not (tmp_path / "o").exists()
