"""The tool held to TGI v3.3.7's own definitions: adapters/facts/tgi-v3.3.7.json, read from the
upstream source at that tag. Every flag and environment variable a TGI plan emits, every field the
stream parser and run.json read, every error type and metric the tool knows, and the defaults it
relies on must be rows there, with those types. Pure: nothing starts."""
from __future__ import annotations

import json
import re

import pytest

from adapters.facts import KINDS, load
from adapters.spec import ServingSpec
from adapters.target import Load, Machine, ModelInfo, Target
from adapters.tgi import (FLAG_TYPES, GENERATION_CHUNK, TGI_DEFAULT_MAX_CONCURRENT, check_value,
                          limits_problem, tgi_launcher_args)
from backends.http import tgi
from backends.http.protocol import Done, Error
from core.records import TokenEvent
from backends.http.sse import RawEvent
from core.errors import FailureKind
from tests.conftest import ROOT, cli

FACTS = load("tgi-v3.3.7")


def test_every_row_names_its_upstream_file_and_tag():
    assert FACTS.tag == "v3.3.7" and FACTS.repo == "huggingface/text-generation-inference"
    for r in FACTS.rows:
        assert r.kind in KINDS and r.tag == "v3.3.7" and re.match(r"^[\w./-]+\.(rs|py)$", r.file), r


def _specs() -> list[ServingSpec]:
    base = dict(model="org/m", max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=8192,
                gpu_memory_utilization=0.9, tensor_parallel=2, enforce_eager=True)
    specs = [ServingSpec(**base, dtype=d) for d in ("auto", "float16", "bfloat16")]
    specs += [ServingSpec(**base, prefix_caching=p, chunked_prefill=c) for p in (True, False) for c in (True, False)]
    specs += [ServingSpec(**base, kv_cache_dtype=k) for k in ("fp8", "fp8_e5m2")]
    specs.append(ServingSpec(**base, native={"tgi": {"--max-waiting-tokens": 5, "--waiting-served-ratio": 1.2,
                                                     "--cuda-graphs": "1,2,4", "--speculate": 1}}))
    return specs


def _valid(fact_type: str, value: str) -> bool:
    base = fact_type.split("|")[0]
    if base.startswith(("enum:", "bool:")):
        return value in base[5:].split(",")
    return check_value("--x", value) is None if base == "str" else True


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: "spec")
def test_every_flag_and_env_a_plan_emits_exists_with_a_valid_value(spec):
    target = Target(ModelInfo("org/m"), Machine("cuda", "H100", "9.0"), Load(max_in_flight=64))
    argv, env = tgi_launcher_args(spec, target=target)
    flags = FACTS.of("flag")
    i, seen = 0, {}
    while i < len(argv):
        fact = flags.get(argv[i])
        assert fact is not None, f"{argv[i]} is not a launcher flag of TGI v3.3.7"
        if fact.type == "switch":
            i += 1
            continue
        value = argv[i + 1]
        assert check_value(argv[i], value) is None and (fact.choices() is None or value in fact.choices()), argv[i:i + 2]
        seen[argv[i]] = value
        i += 2
    envs = FACTS.of("env")
    for key, value in env.items():
        assert key in envs and _valid(envs[key].type, value), (key, value)
    # a combination TGI would refuse at start never leaves the adapter
    assert limits_problem(seen, spec.chunked_prefill is False) is None
    # TGI 3.3 ignores it for flash-attention models: the tool never sends it
    assert "--max-batch-total-tokens" not in seen


def test_flag_types_are_the_fact_sheets_and_agree_with_the_launcher_reference(fixtures_dir):
    reference = json.loads((fixtures_dir / "specs" / "tgi-3.3-launcher-flags.json").read_text())["flags"]
    for flag, fact in FACTS.of("flag").items():
        assert flag in reference, flag
        assert str(reference[flag]["default"]) == str(fact.value), flag
        if reference[flag].get("values"):
            assert fact.choices() == tuple(reference[flag]["values"]), flag
    assert set(FLAG_TYPES) <= set(FACTS.of("flag"))


def test_defaults_the_tool_relies_on_match_upstream():
    assert TGI_DEFAULT_MAX_CONCURRENT == 128 == int(FACTS.get("--max-concurrent-requests").value)
    assert GENERATION_CHUNK == 1024 == FACTS.get("default.max_new_tokens_chunk").value
    assert FACTS.get("PREFILL_CHUNKING").value == "1"  # chunking on unless the environment says 0


# fields the parser (backends/http/tgi.py) reads from a /generate_stream event, with the type it expects
PARSER_READS = {"token.id": "int", "token.text": "str", "token.logprob": "float|null", "token.special": "bool",
                "top_tokens": "list|absent", "generated_text": "str|null", "details": "object|null",
                "details.finish_reason": "enum:length,eos_token,stop_sequence", "details.generated_tokens": "int",
                "details.input_length": "int", "error": "str", "error_type": "str"}


def test_every_stream_field_the_parser_reads_exists_with_that_type():
    for key, typ in PARSER_READS.items():
        fact = FACTS.get("stream." + key, "field")
        assert fact is not None and fact.type == typ, key
    assert set(tgi.FINISH) == set(FACTS.get("stream.details.finish_reason").choices())


def test_a_last_event_shaped_like_upstream_parses():
    ev = {"index": 3, "token": {"id": 2, "text": "</s>", "logprob": -0.1, "special": True},
          "generated_text": "hi", "details": {"finish_reason": "eos_token", "generated_tokens": 3, "seed": 0,
                                              "input_length": 5}}
    tok, done = tgi.parse_generate_stream(RawEvent(1, json.dumps(ev)))
    assert isinstance(tok, TokenEvent) and tok.token_ids == (2,)
    assert tok.text == ""  # a special token's text ("</s>") is not output text (stream.token.text)
    assert isinstance(done, Done) and (done.finish_reason, done.prompt_tokens, done.completion_tokens) == ("stop", 5, 3)


def test_error_types_the_parser_knows_are_tgis():
    upstream = {k.split(".", 1)[1] for k in FACTS.of("field") if k.startswith("error_type.")}
    assert set(tgi.ERROR_KIND) <= upstream
    ev = {"error": "Incomplete generation stream", "error_type": "incomplete_generation_stream"}
    (err,) = tgi.parse_generate_stream(RawEvent(0, json.dumps(ev)))
    assert isinstance(err, Error) and err.kind is FailureKind.DISCONNECTED


def test_seed_zero_is_sent_as_tgi_accepts_it():
    from core.records import GenerationRequest

    p = tgi.generate_payload(GenerationRequest("r", 8, prompt_text="hi", temperature=0.7, seed=0))["parameters"]
    assert p["seed"] == 0 and "0 included" in FACTS.get("behaviour.seed").value


def test_every_tgi_metric_the_tool_reads_exists_upstream():
    from backends.tgi.backend import KV_BUDGET_METRIC

    metrics = FACTS.of("metric")
    names = {KV_BUDGET_METRIC}
    for path in ("backends/server_metrics.py", "compare/report/server_side.py", "compare/analysis/breakdown.py"):
        names |= set(re.findall(r'"(tgi_[a-z_]+)"', (ROOT / path).read_text()))
    assert names and names <= set(metrics), names - set(metrics)


def test_info_fields_run_json_reads_exist_and_the_dropped_ones_are_absent():
    info = {k.split(".", 1)[1]: f for k, f in FACTS.of("field").items() if k.startswith("info.")}
    for key in ("max_total_tokens", "max_input_tokens", "max_concurrent_requests", "version"):
        assert info[key].type != "absent", key
    for key in ("model_dtype", "max_batch_total_tokens"):
        assert info[key].type == "absent", key


def test_plan_shows_per_option_what_tgi_does():
    r = cli("plan", "--backends", "tgi", "--model", "org/m", "--prefix-caching", "true",
                "--chunked-prefill", "false", "--format", "json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["backends"]["tgi"]
    assert plan["launcher_env"]["PREFIX_CACHING"] == "1" and plan["launcher_env"]["PREFILL_CHUNKING"] == "0"
    assert "-e PREFIX_CACHING=1" in plan["container"]["docker_run"]  # what the launcher reads reaches it
    opts = plan["spec_options"]
    assert set(opts) == set(ServingSpec.model_fields) - {"native"}
    assert opts["prefix_caching"]["status"] == "mapped" and opts["prefix_caching"]["value"] is True
    assert opts["kv_cache_memory_bytes"]["status"] == "refused" and "backends/v3/src/lib.rs" in opts["kv_cache_memory_bytes"]["upstream"]
    assert all(o["upstream"].endswith("@v3.3.7") for o in opts.values())


def test_plan_refuses_a_kv_byte_budget_naming_what_tgi_honours():
    r = cli("plan", "--backends", "tgi", "--model", "org/m", "--kv-cache-memory-bytes", str(2**30))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "kv_cache_memory_bytes" in last and "--cuda-memory-fraction" in last and "gpu_memory_utilization" in last
