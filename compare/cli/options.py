"""CLI options -> ServingSpec / WorkloadSpec, with YAML files as the base layer.

Precedence: built-in defaults < ``--spec FILE``/``--workload FILE`` < individual flags.
Every ServingSpec field is a flag: ``--max-num-seqs 32``, ``--chunked-prefill true``.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from adapters.spec import SPEC_CLI_FIELDS, ServingSpec
from compare.cli.model_args import add_options
from compare.cli.run_options import SpecOptions, TopologyOptions, WorkloadOptions
from compare.workload.build import WorkloadSpec
from core.errors import UserError


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class _YamlFile:
    """A spec or workload file: its fields and the line of each key (for messages)."""

    path: str
    what: str
    data: dict[str, Any]
    lines: dict[tuple[str | int, ...], int]

    def where(self, loc: Sequence[str | int]) -> str:
        from core.shape import line_of

        line = line_of(self.lines, loc)
        return f"{self.what} file {self.path}" + (f" line {line}" if line else "")


def _read_yaml(path: str, what: str) -> _YamlFile:
    from core.fsutil import read_user_text, read_user_yaml
    from core.shape import show_value, yaml_key_lines

    data = read_user_yaml(path, f"{what} file", None)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{what} file {path}: the document is {show_value(data)}, not a mapping of field: value; "
                        f"see `compare {'plan' if what == 'spec' else 'run'} --help` for the fields")
    # (read again for the key lines: a user's file is small, and the reader refused anything odd)
    return _YamlFile(path, what, data, yaml_key_lines(read_user_text(path, f"{what} file")))


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _pydantic_error(e: ValidationError, what: str, model: Any, file: _YamlFile | None,
                    flags: Mapping[str, str]) -> UserError:
    """The first field the model refuses, said where it came from: the flag that set it, or the
    file and line; the value, and what is allowed."""
    from core.shape import first_problem

    loc = tuple(e.errors()[0]["loc"])
    problem = first_problem(e, model)
    top = str(loc[0]) if loc else ""
    if top in flags:
        return UserError(f"{flags[top]}: {problem}")
    if file is not None and (not loc or top in file.data):  # (no loc: a check of the whole file's model)
        return UserError(f"{file.where(loc)}: {problem}")
    return UserError(f"{what}: {problem}")


def spec_of(o: SpecOptions, default_model: str | None = None, defaults: dict[str, str] | None = None) -> ServingSpec:
    """:func:`build_spec` from a command's typed spec options."""
    return build_spec(o.spec, o.flags(), o.native, default_model, defaults)


def build_spec(spec_file: str | None, flags: Mapping[str, str | None], native_items: Sequence[str],
               default_model: str | None = None, defaults: Mapping[str, str] | None = None) -> ServingSpec:
    """The spec from --spec FILE, then the spec flags over it; ``defaults`` (the embedded tiny
    model's, or what the servers serve) stand in for flags the user left unset."""
    file = _read_yaml(spec_file, "spec") if spec_file else None
    data: dict[str, Any] = dict(file.data) if file else {}
    set_by: dict[str, str] = {}  # field -> the flag that set it (for messages)
    for name in SPEC_CLI_FIELDS:
        v = flags.get(name)
        if v is not None:
            set_by[name] = _flag(name)
        else:
            v = (defaults or {}).get(name)
        if v is not None:
            data[name] = _scalar(v) if name not in ("model", "tokenizer") else v
    native: dict[str, dict[str, Any]] = {k: dict(v) for k, v in _native_section(file).items()}
    given: set[str] = set()
    for item in native_items:
        key, eq, value = item.partition("=")
        backend, dot, opt = key.partition(".")
        if not eq or not dot or not backend or not opt:
            raise UserError(f"--native {item!r}: expected BACKEND.KEY=VALUE, e.g. "
                            f"--native vllm.scheduling_policy=priority")
        if key in given:
            raise UserError(f"--native {key} is given twice; give each option once")
        given.add(key)
        native.setdefault(backend, {})[opt] = _scalar(value)
    if native:
        data["native"] = native
    if "model" not in data:
        if default_model is None:
            raise UserError("no model given: pass --model DIR (a local HF model directory)")
        data["model"] = default_model
    if native:  # (from --native and the spec file's native section)
        from compare.cli.native_keys import check_sections

        check_sections(native)
    try:
        spec = ServingSpec(**data)
    except ValidationError as e:
        raise _pydantic_error(e, "spec", ServingSpec, file, set_by) from None
    return spec


def _native_section(file: _YamlFile | None) -> dict[str, dict[str, Any]]:
    """The spec file's ``native:`` section, checked to be a mapping of backend -> mapping."""
    from core.shape import show_value

    section = file.data.get("native") if file else None
    if file is None or section is None:
        return {}
    if not isinstance(section, dict):
        raise UserError(f"{file.where(('native',))}: native {show_value(section)}: should be a mapping of "
                        f"backend -> {{option: value}}, e.g. native: {{vllm: {{max_num_seqs: 8}}}}")
    for backend, opts in section.items():
        if not isinstance(opts, dict):
            raise UserError(f"{file.where(('native', str(backend)))}: native.{backend} {show_value(opts)}: "
                            f"should be a mapping of option -> value, e.g. {{max_num_seqs: 8}}")
    return section


def build_workload(flags: WorkloadOptions, defaults: Mapping[str, Any] | None = None) -> WorkloadSpec:
    """The workload from --workload FILE, then the workload flags over it, over ``defaults``."""
    data: dict[str, Any] = dict(defaults or {})
    file = _read_yaml(flags.workload, "workload") if flags.workload else None
    if file:
        data.update(file.data)
    set_by = {k: f for k, f, v in (("num_requests", "--num-requests", flags.num_requests),
                                  ("input", "--input-len", flags.input_len),
                                  ("output", "--output-len", flags.output_len),
                                  ("prompt_format", "--prompt-format", flags.prompt_format),
                                  ("sharegpt", "--sharegpt", flags.sharegpt),
                                  ("seed", "--workload-seed", flags.workload_seed)) if v is not None}
    if flags.num_requests is not None:
        data["num_requests"] = flags.num_requests
    if flags.input_len is not None:
        data["input"] = {"dist": "fixed", "value": flags.input_len}
    if flags.output_len is not None:
        data["output"] = {"dist": "fixed", "value": flags.output_len}
    if flags.prompt_format:
        data["prompt_format"] = flags.prompt_format
    if flags.sharegpt:
        from core.fsutil import check_user_file

        check_user_file(flags.sharegpt, "ShareGPT file")  # (missing, a directory, FIFO, loop: one line now)
        data["sharegpt"] = flags.sharegpt
    if flags.workload_seed is not None:
        data["seed"] = flags.workload_seed
    try:
        spec = WorkloadSpec(**data)
    except ValidationError as e:
        raise _pydantic_error(e, "workload", WorkloadSpec, file, set_by) from None
    except ValueError as e:  # (a seed numpy refuses, and other checks the model runs itself)
        raise UserError(f"workload: {e}") from None
    if spec.num_requests > MAX_REQUESTS:
        raise UserError(f"workload: num_requests {spec.num_requests} is more than {MAX_REQUESTS:,} (every request is "
                        f"built in memory before the run); measure with fewer, e.g. --num-requests 1000")
    _check_size(spec)
    return spec


def _check_size(spec: WorkloadSpec) -> None:
    """The request list is built in memory before anything starts: refuse one that would not fit,
    from the workload's own bounds (the longest lengths its distributions can draw)."""
    ss = spec.sessions
    if ss is not None and not ss.sharegpt:
        n, prompt = ss.num_sessions * ss.turns.upper(), ss.system_prompt_tokens + ss.turns.upper() * (
            ss.user_tokens.upper() + ss.reply_tokens.upper())
        if n > MAX_REQUESTS:
            raise UserError(f"workload: sessions.num_sessions {ss.num_sessions} x up to {ss.turns.upper()} turns is "
                            f"more than {MAX_REQUESTS:,} requests (built in memory before the run); give fewer")
    else:
        n = spec.num_requests
        prompt = spec.input.upper() + (spec.shared_prefix.document_tokens if spec.shared_prefix else 0)
    if n * prompt > MAX_PROMPT_TOKENS:
        raise UserError(f"workload: up to {n:,} requests of up to {prompt:,} prompt tokens is more than "
                        f"{MAX_PROMPT_TOKENS:,} tokens (built in memory before the run); give fewer or shorter "
                        f"requests")


# the request list is built (and written to workload.jsonl) before anything starts
MAX_REQUESTS = 1_000_000
MAX_PROMPT_TOKENS = 1 << 28  # ~10 GB of token ids as Python lists


# ---------------------------------------------------------------- topology (backends/topology/backend.py)


def add_topology_options(p: argparse.ArgumentParser) -> None:
    add_options(p, TopologyOptions)


def apply_topology(backends: list[str], text: str | None = None, lb: str = "lor", kill_text: str | None = None,
                   kill_level: str | None = None) -> list[Any]:
    """The run's backend targets: a topology name typed in ``--backends`` (``replicas@2*vllm``)
    becomes its typed :class:`Topology`; ``--topology tp=2,replicas=2`` wraps every backend ``b``
    in a tensor-parallel and a replicas :class:`Topology` (the latter with its balancer and kill plan). Other names stay as
    they are (strings the registry resolves)."""
    from backends.topology.target import KINDS, REPLICAS, KillPlan, Topology

    typed = [Topology.from_name(b) if b.partition("@")[0].strip() in KINDS else b for b in backends]
    if not text:
        if kill_text or kill_level:
            raise UserError("--kill-replica-after/--kill-level apply to --topology replicas=N; add it, or "
                            "write the kill into the backend name, e.g. replicas@2*vllm:kill=5@c8")
        return typed
    kill = None
    if kill_text:
        try:
            kill = KillPlan.parse(kill_text, kill_level)
        except UserError:
            raise UserError(f"--kill-replica-after {kill_text!r}: expected seconds or a routed request "
                            f"count, e.g. --kill-replica-after 5 or 16r") from None
    elif kill_level:
        raise UserError("--kill-level names the level of --kill-replica-after; give that too, "
                        "e.g. --kill-replica-after 16r --kill-level c8")
    out: list[Any] = []
    kinds = []
    for item in text.split(","):
        kind, _, n = item.strip().partition("=")
        if kind in kinds:
            raise UserError(f"--topology {text!r}: {kind} is given twice; give each of tp=N, replicas=N once")
        if kind not in KINDS or not n.isdigit() or int(n) < 1:
            raise UserError(f"--topology {item!r}: expected tp=N or replicas=N, e.g. --topology tp=2,replicas=2")
        kinds.append(kind)
        for b in typed:
            if isinstance(b, Topology):
                raise UserError(f"--topology with backend {b.name}: topologies do not nest; pass the plain "
                                f"backend, e.g. --backends {b.inner}")
            out.append(Topology(kind, int(n), b, **({"lb": lb, "kill": kill} if kind == REPLICAS else {})))
    if kill is not None and REPLICAS not in kinds:
        raise UserError("--kill-replica-after applies to replicas; add replicas=N to --topology")
    return out


# ---------------------------------------------------------------- Ray (compare/running/ray_cells.py)


def scaleout(address: str | None, shards: int, max_clock_error_ms: float, backends: Sequence[str]) -> Any:
    """``--ray ...`` -> a ScaleOut for RunConfig.scaleout, or None (Ray is not imported then);
    ``backends``: the run's backend names (``parse_backends``)."""
    shards = shards or 0
    if not address:
        if shards:
            raise UserError("--ray-load-shards needs --ray auto|HOST:PORT (the cluster the shards run on)")
        return None
    if shards == 1 or shards < 0:
        raise UserError(f"--ray-load-shards {shards}: give 2 or more load generators, or leave it out")
    if shards:
        from backends.served_model import endpoint

        engines = [b for b in backends if endpoint(b) is None]
        if engines:
            raise UserError(f"--ray-load-shards applies to already running endpoints (openai@URL, tgi@URL); "
                            f"{engines[0]} starts its engine here: drop --ray-load-shards (--ray alone runs "
                            f"engines as cells)")
    import os

    from compare.running.ray_cells import ScaleOut
    from compare.running.ray_cluster import check_address

    check_address(address.strip())
    return ScaleOut(address=address.strip(), load_shards=shards, max_clock_error_ms=max_clock_error_ms,
                    omp_threads=os.environ.get("OMP_NUM_THREADS"))
