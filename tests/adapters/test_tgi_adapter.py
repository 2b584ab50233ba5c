"""adapters/tgi.py: spec -> text-generation-launcher argv/env, golden and checked against TGI 3.3's
own flag reference (tests/fixtures/specs/tgi-3.3-launcher-flags.json). Pure: nothing starts."""
from __future__ import annotations

import json

import pytest

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import ModelInfo, Target
from adapters.tgi import FLAG_TYPES, TGI_QUANTIZE, tgi_launcher_args, validate_argv
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
                       kv_cache_dtype="fp8", enforce_eager=True, prefix_caching=False, chunked_prefill=True,
                       native={"tgi": {"--max-concurrent-requests": 512, "--waiting-served-ratio": 1.2,
                                       "--max-waiting-tokens": 10, "image": "ignored-here"}})
    argv, env = tgi_launcher_args(spec, model_path="/models/m", target=probe(str(tiny_model)))
    assert argv == [
        "--model-id", "/models/m", "--dtype", "bfloat16", "--kv-cache-dtype", "fp8_e4m3fn",
        "--max-total-tokens", "4096", "--max-input-tokens", "4095", "--max-batch-size", "64",
        "--max-batch-prefill-tokens", "8192", "--cuda-memory-fraction", "0.9",
        "--num-shard", "2", "--cuda-graphs", "0",
        "--usage-stats", "off", "--max-concurrent-requests", "512", "--waiting-served-ratio", "1.2",
        "--max-waiting-tokens", "10", "--hostname", "0.0.0.0", "--port", "80"]
    # no launcher flags: the launcher and the server read these from their environment
    assert env == {"PREFIX_CACHING": "0", "PREFILL_CHUNKING": "1"}


@pytest.mark.parametrize("quant,flag", [(q, f) for q, f in TGI_QUANTIZE.items() if f])
def test_quantization_mapping(quant, flag):
    argv, _ = tgi_launcher_args(_spec(quantization=quant))
    assert argv[argv.index("--quantize") + 1] == flag


@pytest.mark.parametrize("method", ["marlin", "exl2", "bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4"])
def test_native_quantize_methods(method, reference):
    argv, _ = tgi_launcher_args(_spec(native={"tgi": {"--quantize": method}}))
    assert argv[argv.index("--quantize") + 1] == method
    assert validate_argv(argv, reference) == []


def test_kv_budget_maps_to_what_tgi_honours():
    """TGI 3.3 ignores --max-batch-total-tokens for flash-attention models (backends/v3/src/lib.rs) and
    sizes the KV cache from --cuda-memory-fraction: a byte budget is refused, naming the fraction."""
    with pytest.raises(UnsupportedSpecError) as e:
        tgi_launcher_args(_spec(kv_cache_memory_bytes=64 * 2**20))
    assert "ignores --max-batch-total-tokens" in str(e.value) and "gpu_memory_utilization" in str(e.value)
    argv, _ = tgi_launcher_args(_spec(gpu_memory_utilization=0.6))
    assert _flag(argv, "--cuda-memory-fraction") == "0.6" and "--max-batch-total-tokens" not in argv


def test_secret_flags_are_refused_in_the_spec():
    # specs are printed by `compare plan` and stored in run.json: secrets come from the environment
    with pytest.raises(UnsupportedSpecError, match="LLM_COMPARE_API_KEY"):
        tgi_launcher_args(_spec(native={"tgi": {"--api-key": "s3cret"}}))


@pytest.mark.parametrize("kw,needle", [
    ({"dtype": "float32"}, "dtype=float32"),
    ({"dtype": "float16", "quantization": "w4a16-awq"}, "--dtype cannot be used with --quantize"),
    ({"block_size": 16}, "block_size"),
    ({"chunked_prefill": True, "native": {"tgi": {"--speculate": 2}}}, "speculation"),
    ({"load_format": "dummy"}, "dummy"),
    ({"tokenizer": "other/tok"}, "tokenizer"),
    ({"kv_cache_memory_bytes": 2**20}, "--cuda-memory-fraction"),
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
                gpu_memory_utilization=0.85, tensor_parallel=4, enforce_eager=True, prefix_caching=True,
                chunked_prefill=True)
    specs = [ServingSpec(**base, dtype=d) for d in ("auto", "float16", "bfloat16")]
    specs += [ServingSpec(**base, quantization=q) for q in TGI_QUANTIZE]
    specs += [ServingSpec(**base, kv_cache_dtype=k) for k in ("fp8", "fp8_e4m3", "fp8_e5m2")]
    natives = {"--max-concurrent-requests": 64, "--waiting-served-ratio": 0.5, "--cuda-graphs": "1,2,4,8",
               "--max-waiting-tokens": 5, "--sharded": True, "--trust-remote-code": True,
               "--enable-prefill-logprobs": True, "--max-best-of": 1, "--rope-scaling": "dynamic",
               "--rope-factor": 2.0, "--max-top-n-tokens": 10}
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
    ({"max_model_len": 8192, "max_num_batched_tokens": 2048, "chunked_prefill": False},
     "--max-batch-prefill-tokens 2048"),
    ({"max_model_len": 512, "native": {"tgi": {"--max-input-tokens": 600}}}, "must be < --max-total-tokens 512"),
    ({"native": {"tgi": {"--max-input-tokens": 10, "--max-input-length": 10}}}, "max_input_length"),
])
def test_token_limits_tgi_would_refuse_fail_before_start(kw, needle):
    with pytest.raises(UnsupportedSpecError) as e:
        tgi_launcher_args(_spec(**kw), target=_load_target(64))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_prefill_budget_below_max_input_is_valid_when_tgi_chunks():
    # backends/v3/src/main.rs checks prefill >= max-input-tokens only without chunking (on by default)
    argv, _ = tgi_launcher_args(_spec(max_model_len=8192, max_num_batched_tokens=2048), target=_load_target(8))
    assert _flag(argv, "--max-batch-prefill-tokens") == "2048"


def test_plan_notes_what_tgi_does_with_budgets_and_long_requests():
    from adapters.tgi import limits_plan

    spec = _spec(max_model_len=1024, native={"tgi": {"--max-batch-total-tokens": 4096}})
    t = _load_target(64, longest=512)
    lim = limits_plan(tgi_launcher_args(spec, target=t)[0], t.load, False)
    assert any("deprecated and ignored" in n for n in lim["notes"])
    assert not any("holds about" in n for n in lim["notes"])  # no queue estimate from an ignored flag
    t = _load_target(64, longest=2000)
    lim = limits_plan(tgi_launcher_args(spec, target=t)[0], t.load, False)
    long = [n for n in lim["notes"] if "exceeds --max-total-tokens 1024" in n]
    assert long and "admits it" in long[0] and "`length`" in long[0] and "refuse" not in long[0]
    assert any("1024-token chunks" in n and "re-prefills" in n for n in lim["notes"])


def test_where_tgi_cannot_chunk_the_prefill_budget_must_hold_the_input():
    """Below compute capability 8 TGI falls back to paged attention (launcher resolve_attention), which
    neither chunks prefills nor caches prefixes (server models/model.py, globals.py)."""
    from adapters.target import Machine

    t4 = Target(ModelInfo("org/model"), Machine("cuda", "T4", "7.5"))
    with pytest.raises(UnsupportedSpecError, match="when TGI cannot chunk prefills"):
        tgi_launcher_args(_spec(max_model_len=8192, max_num_batched_tokens=2048), target=t4)
    with pytest.raises(UnsupportedSpecError, match="paged attention"):
        tgi_launcher_args(_spec(prefix_caching=True), target=t4)
    h100 = Target(ModelInfo("org/model"), Machine("cuda", "H100", "9.0"))
    argv, env = tgi_launcher_args(_spec(max_model_len=8192, max_num_batched_tokens=2048, prefix_caching=True),
                                  target=h100)
    assert _flag(argv, "--max-batch-prefill-tokens") == "2048" and env == {"PREFIX_CACHING": "1"}
