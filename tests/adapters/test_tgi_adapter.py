"""adapters/tgi.py: spec -> text-generation-launcher argv/env, golden and checked against TGI 3.3's
own flag reference (tests/fixtures/specs/tgi-3.3-launcher-flags.json). Pure: nothing starts."""
from __future__ import annotations

import json

import pytest

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import ModelInfo, Target
from adapters.tgi import FLAG_TYPES, TGI_QUANTIZE, kv_bytes_per_token, tgi_launcher_args, validate_argv
from backends.models.probe import probe

TAIL = ["--usage-stats", "off", "--hostname", "0.0.0.0", "--port", "80"]


@pytest.fixture(scope="module")
def reference(fixtures_dir):
    return json.loads((fixtures_dir / "specs" / "tgi-3.3-launcher-flags.json").read_text())["flags"]


def _spec(**kw):
    return ServingSpec(model=kw.pop("model", "org/model"), **kw)


def test_minimal_spec_golden():
    argv, env = tgi_launcher_args(_spec())
    assert argv == ["--model-id", "org/model", *TAIL]
    assert env == {}


def test_full_spec_golden(tiny_model):
    spec = ServingSpec(model=str(tiny_model), dtype="bfloat16", max_model_len=4096, max_num_seqs=64,
                       max_num_batched_tokens=8192, gpu_memory_utilization=0.9, tensor_parallel=2,
                       kv_cache_dtype="fp8", enforce_eager=True, kv_cache_memory_bytes=2**30,
                       native={"tgi": {"--max-concurrent-requests": 512, "--waiting-served-ratio": 1.2,
                                       "--max-waiting-tokens": 10, "image": "ignored-here"}})
    argv, env = tgi_launcher_args(spec, model_path="/models/m", target=probe(str(tiny_model)))
    # tiny Qwen2: KV bytes per token = 2 (K, V) x 4 layers x 2 KV heads x 32 head dim x 1 byte (fp8)
    assert argv == [
        "--model-id", "/models/m", "--dtype", "bfloat16", "--kv-cache-dtype", "fp8_e4m3fn",
        "--max-total-tokens", "4096", "--max-input-tokens", "4095", "--max-batch-size", "64",
        "--max-batch-prefill-tokens", "8192", "--cuda-memory-fraction", "0.9",
        "--max-batch-total-tokens", str(2**30 // 512), "--num-shard", "2", "--cuda-graphs", "0",
        "--usage-stats", "off", "--max-concurrent-requests", "512", "--waiting-served-ratio", "1.2",
        "--max-waiting-tokens", "10", "--hostname", "0.0.0.0", "--port", "80"]
    assert env == {}


@pytest.mark.parametrize("quant,flag", [(q, f) for q, f in TGI_QUANTIZE.items() if f])
def test_quantization_mapping(quant, flag):
    argv, _ = tgi_launcher_args(_spec(quantization=quant))
    assert argv[argv.index("--quantize") + 1] == flag


@pytest.mark.parametrize("method", ["marlin", "exl2", "bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4"])
def test_native_quantize_methods(method, reference):
    argv, _ = tgi_launcher_args(_spec(native={"tgi": {"--quantize": method}}))
    assert argv[argv.index("--quantize") + 1] == method
    assert validate_argv(argv, reference) == []


def test_kv_budget_from_the_checkpoint_dtype(tiny_model):
    # dtype auto: the tiny model is float32, 4 bytes per value -> 2048 bytes per token
    spec = ServingSpec(model=str(tiny_model), kv_cache_memory_bytes=64 * 2**20)
    argv, _ = tgi_launcher_args(spec, target=probe(str(tiny_model)))
    assert argv[argv.index("--max-batch-total-tokens") + 1] == str(64 * 2**20 // 2048)
    # the budget comes from the probed config.json, never from the disk: nothing probed, no conversion
    with pytest.raises(UnsupportedSpecError, match="max-batch-total-tokens"):
        tgi_launcher_args(spec)
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "torch_dtype": "bfloat16"}
    t = Target(ModelInfo("/m", local=True, config=cfg))
    assert kv_bytes_per_token(cfg, "auto", "auto") == 2 * 2 * 4 * 16 * 2
    argv, _ = tgi_launcher_args(spec.model_copy(update={"model": "/m"}), target=t)
    assert argv[argv.index("--max-batch-total-tokens") + 1] == str(64 * 2**20 // 512)


def test_secret_flags_are_refused_in_the_spec():
    # specs are printed by `compare plan` and stored in run.json: secrets come from the environment
    with pytest.raises(UnsupportedSpecError, match="LLM_COMPARE_API_KEY"):
        tgi_launcher_args(_spec(native={"tgi": {"--api-key": "s3cret"}}))


@pytest.mark.parametrize("kw,needle", [
    ({"dtype": "float32"}, "dtype=float32"),
    ({"dtype": "float16", "quantization": "w4a16-awq"}, "--dtype cannot be used with --quantize"),
    ({"block_size": 16}, "block_size"),
    ({"prefix_caching": True}, "prefix_caching"),
    ({"chunked_prefill": False}, "chunked_prefill"),
    ({"load_format": "dummy"}, "dummy"),
    ({"tokenizer": "other/tok"}, "tokenizer"),
    ({"kv_cache_memory_bytes": 2**20}, "--max-batch-total-tokens"),  # no config.json for a hub id
    ({"native": {"tgi": {"--port": 8080}}}, "container layer"),
    ({"native": {"tgi": {"--no-such-flag": 1}}}, "not a text-generation-launcher 3.3 flag"),
    ({"native": {"tgi": {"--quantize": "int3"}}}, "must be one of"),
    ({"native": {"tgi": {"--max-batch-size": 0}}}, "positive integer"),
    ({"native": {"tgi": {"--cuda-memory-fraction": 1.5}}}, "(0, 1]"),
])
def test_unsupported_options_raise(kw, needle):
    with pytest.raises(UnsupportedSpecError) as e:
        tgi_launcher_args(_spec(**kw))
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def _every_option_spec(tiny_model) -> list[ServingSpec]:
    base = dict(model=str(tiny_model), max_model_len=2048, max_num_seqs=8, max_num_batched_tokens=4096,
                gpu_memory_utilization=0.85, tensor_parallel=4, enforce_eager=True, kv_cache_memory_bytes=2**28)
    specs = [ServingSpec(**base, dtype=d) for d in ("auto", "float16", "bfloat16")]
    specs += [ServingSpec(**base, quantization=q) for q in TGI_QUANTIZE]
    specs += [ServingSpec(**base, kv_cache_dtype=k) for k in ("fp8", "fp8_e4m3", "fp8_e5m2")]
    natives = {"--max-concurrent-requests": 64, "--waiting-served-ratio": 0.5, "--cuda-graphs": "1,2,4,8",
               "--max-waiting-tokens": 5, "--sharded": True, "--trust-remote-code": True,
               "--enable-prefill-logprobs": True, "--max-best-of": 1, "--rope-scaling": "dynamic",
               "--rope-factor": 2.0, "--speculate": 2, "--max-top-n-tokens": 10}
    specs.append(ServingSpec(**base, native={"tgi": natives}))
    return specs


def test_every_emitted_flag_exists_with_a_legal_value(tiny_model, reference):
    for spec in _every_option_spec(tiny_model):
        argv, _ = tgi_launcher_args(spec, model_path="/models/m", target=probe(str(tiny_model)))
        assert validate_argv(argv, reference) == [], spec


def test_flag_table_matches_the_reference(reference):
    # every flag we know a type for is a real 3.3 flag, and our enumerations are the reference's
    assert set(FLAG_TYPES) <= set(reference)
    for flag, kind in FLAG_TYPES.items():
        values = reference[flag].get("values")
        if values:
            assert kind.startswith("enum:") and sorted(kind[5:].split(",")) == sorted(values), flag


def test_validate_argv_catches_bad_argv(reference):
    problems = validate_argv(["--model-id", "m", "--quantize", "int3", "--bogus", "--max-batch-size", "x"],
                             reference)
    assert any("--quantize int3" in p for p in problems)
    assert any("--bogus" in p for p in problems)
    assert any("'x' is not a number" in p for p in problems)


# ---------------------------------------------------------------- limits that follow the load

def _load_target(n: int | None, longest: int | None = None) -> Target:
    from adapters.target import Load

    return Target(ModelInfo("org/model"), load=Load(max_in_flight=n, max_request_tokens=longest))


def _flag(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("n,limit", [(None, None), (4, "128"), (64, "128"), (256, "512"), (1000, "2000")])
def test_admission_limit_follows_the_highest_concurrency(n, limit, reference):
    argv, _ = tgi_launcher_args(_spec(), target=_load_target(n))
    assert _flag(argv, "--max-concurrent-requests") == limit  # None: TGI's own default (128) stays
    assert validate_argv(argv, reference) == []


def test_native_admission_limit_wins_and_plan_says_where_it_came_from():
    from adapters.tgi import limits_plan

    spec = _spec(native={"tgi": {"--max-concurrent-requests": 100}}, max_num_seqs=8)
    argv, _ = tgi_launcher_args(spec, target=_load_target(256))
    assert _flag(argv, "--max-concurrent-requests") == "100"
    lim = limits_plan(argv, _load_target(256).load, overridden=True)
    assert lim["max_concurrent_requests"] == 100 and "native" in lim["source"]
    assert any("156 of 256" in n and "overloaded" in n for n in lim["notes"])
    assert any("--max-batch-size 8" in n and "queue" in n for n in lim["notes"])
    derived = limits_plan(tgi_launcher_args(_spec(), target=_load_target(256))[0], _load_target(256).load, False)
    assert derived["max_concurrent_requests"] == 512 and "256" in derived["source"] and derived["notes"] == []


@pytest.mark.parametrize("kw,needle", [
    # TGI 3.3 refuses these at start (launcher/src/main.rs, backends/v3/src/main.rs)
    ({"max_model_len": 4096, "native": {"tgi": {"--max-batch-total-tokens": 2048}}}, "--max-batch-total-tokens 2048"),
    ({"max_num_batched_tokens": 8192, "native": {"tgi": {"--max-batch-total-tokens": 4096}}},
     "--max-batch-prefill-tokens 8192"),
    ({"max_model_len": 512, "native": {"tgi": {"--max-input-tokens": 600}}}, "must be < --max-total-tokens 512"),
    ({"native": {"tgi": {"--max-input-tokens": 10, "--max-input-length": 10}}}, "max_input_length"),
])
def test_token_limits_tgi_would_refuse_fail_before_start(kw, needle):
    with pytest.raises(UnsupportedSpecError) as e:
        tgi_launcher_args(_spec(**kw), target=_load_target(64))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_kv_budget_smaller_than_one_request_is_refused(tiny_model):
    # 1 MiB at 2048 bytes per token (tiny model, fp32) = 512 tokens < max_model_len 4096
    spec = ServingSpec(model=str(tiny_model), max_model_len=4096, kv_cache_memory_bytes=2**20)
    with pytest.raises(UnsupportedSpecError, match="kv_cache_memory_bytes"):
        tgi_launcher_args(spec, target=probe(str(tiny_model)))


def test_plan_notes_a_kv_budget_that_queues_the_load():
    from adapters.tgi import limits_plan

    spec = _spec(max_model_len=1024, native={"tgi": {"--max-batch-total-tokens": 4096}})
    t = _load_target(64, longest=512)
    lim = limits_plan(tgi_launcher_args(spec, target=t)[0], t.load, False)
    assert any("about 8 requests" in n for n in lim["notes"])
    t = _load_target(64, longest=2000)
    lim = limits_plan(tgi_launcher_args(spec, target=t)[0], t.load, False)
    assert any("exceeds --max-total-tokens 1024" in n for n in lim["notes"])
