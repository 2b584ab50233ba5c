"""ServingSpec -> llama-server plan (pure): every spec field mapped or refused with its reason, the
native /completion protocol's payload and events, and what the server log says was loaded."""
import pytest

from adapters.llamacpp import llamacpp_plan
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Machine, ModelInfo, Target
from backends.http.protocol import Done, Error
from backends.http.sse import RawEvent
from backends.llamacpp.protocol import COMPLETION, completion_payload
from backends.llamacpp.server import level_timings, loaded_report
from core.records import GenerationRequest, TokenEvent

# every test here answers by the CPU's instruction sets (run again under LLM_COMPARE_CPU_ISA=avx2, avx512)
pytestmark = pytest.mark.isa

TINY_CFG = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "hidden_size": 128, "dtype": "float32"}


def target(cfg=TINY_CFG, device="cpu"):
    return Target(ModelInfo("/m", local=True, config=cfg), Machine(device))


def test_golden_plan_sizes_the_pool_like_vllm():
    spec = ServingSpec(model="/m", dtype="float32", max_num_seqs=8, max_num_batched_tokens=256,
                       kv_cache_memory_bytes=64 * 2**20, max_model_len=512, prefix_caching=True, seed=3)
    p = llamacpp_plan(spec, target())
    # 2 (K and V) x 4 layers x 2 KV heads x 32 dims x 4 bytes (f32) = 2 KiB a token
    assert p.gguf_type == "f32"
    assert dict(p.flags) == {"--seed": 3, "--cache-type-k": "f32", "--cache-type-v": "f32", "--flash-attn": "off",
                             "--metrics": True, "--slots": True, "--no-webui": True, "--n-gpu-layers": 0,
                             "--parallel": 8, "--ctx-size": 64 * 2**20 // 2048, "--kv-unified": True,
                             "--kv-unified-per-slot": 512, "--batch-size": 256, "--ubatch-size": 256,
                             "--cache-prompt": True}
    assert p.argv()[:4] == ["--seed", "3", "--cache-type-k", "f32"] and "--metrics" in p.argv()


def test_max_model_len_alone_gives_each_slot_its_own_context():
    p = llamacpp_plan(ServingSpec(model="/m", max_model_len=256, max_num_seqs=3), target())
    assert p.flags["--ctx-size"] == 3 * 256 and p.flags["--parallel"] == 3 and "--kv-unified" not in p.flags
    p = llamacpp_plan(ServingSpec(model="/m", max_model_len=256), target())  # the server's 4 slots, written out
    assert p.flags["--ctx-size"] == 4 * 256 and p.flags["--parallel"] == 4


def test_dtype_and_quantization_become_the_gguf_type():
    assert llamacpp_plan(ServingSpec(model="/m"), target()).gguf_type == "f32"  # the checkpoint's dtype
    p = llamacpp_plan(ServingSpec(model="/m", dtype="bfloat16"), target())
    assert p.gguf_type == "bf16" and p.flags["--cache-type-k"] == "bf16" and p.flags["--flash-attn"] == "auto"
    assert llamacpp_plan(ServingSpec(model="/m", quantization="gguf-q8_0"), target()).gguf_type == "Q8_0"
    assert llamacpp_plan(ServingSpec(model="/m", quantization="gguf-q4_k_m"), target()).gguf_type == "Q4_K_M"
    with pytest.raises(UnsupportedSpecError, match="nearest supported: gguf-q8_0"):
        llamacpp_plan(ServingSpec(model="/m", quantization="w8a16-int8"), target())
    with pytest.raises(UnsupportedSpecError, match="nearest supported: gguf-q4_k_m"):
        llamacpp_plan(ServingSpec(model="/m", quantization="w4a16"), target())


def test_a_quantized_gguf_is_made_from_the_gguf_of_the_models_dtype():
    # an f32 checkpoint: Q8_0 from the f32 GGUF; a bf16 checkpoint (the usual GPU case): from the
    # bf16 GGUF, never an f32 copy twice the checkpoint's size
    assert llamacpp_plan(ServingSpec(model="/m", quantization="gguf-q8_0"), target()).base_type == "f32"
    bf16 = {**TINY_CFG, "dtype": "bfloat16"}
    p = llamacpp_plan(ServingSpec(model="/m", quantization="gguf-q4_k_m"), target(bf16, "cuda"))
    assert (p.gguf_type, p.base_type) == ("Q4_K_M", "bf16")
    assert llamacpp_plan(ServingSpec(model="/m"), target()).base_type is None


def test_quantized_weights_are_not_repacked_on_an_amx_cpu():
    """llama-server b11434 segfaulted in its warm-up with repacked Q8_0 / Q4_K_M weights on an
    AMX-INT8 Xeon (hidden sizes 128 and 256): such a CPU gets --no-repack, others keep repacking."""
    def plan(flags, q="gguf-q8_0"):
        return llamacpp_plan(ServingSpec(model="/m", quantization=q),
                             Target(ModelInfo("/m", local=True, config=TINY_CFG), Machine("cpu", cpu_flags=flags)))
    assert plan(frozenset({"avx512f", "amx_int8"})).flags.get("--no-repack") is True
    assert plan(frozenset({"avx512f", "amx_int8"}), "gguf-q4_k_m").flags.get("--no-repack") is True
    assert "--no-repack" not in plan(frozenset({"avx2", "fma"})).flags
    assert "--no-repack" not in plan(None).flags  # an unknown CPU keeps llama.cpp's default
    assert "--no-repack" not in llamacpp_plan(ServingSpec(model="/m"), target()).flags  # f32: nothing to repack
    # LLM_COMPARE_CPU_ISA=avx2 on an AMX host hides AMX from the tool's kernel judgement, not from the
    # server built for this CPU: it still repacks with AMX, so it still gets --no-repack
    lowered = Machine("cpu", cpu_flags=frozenset({"avx2"}), native_cpu_flags=frozenset({"avx2", "avx512f", "amx_int8"}))
    assert llamacpp_plan(ServingSpec(model="/m", quantization="gguf-q8_0"),
                         Target(ModelInfo("/m", local=True, config=TINY_CFG), lowered)).flags.get("--no-repack") is True


def test_cuda_keeps_a_16_bit_models_kv_cache_in_f16():
    p = llamacpp_plan(ServingSpec(model="/m", dtype="bfloat16"), target(device="cuda"))
    assert p.flags["--cache-type-k"] == p.flags["--cache-type-v"] == "f16" and p.flags["--n-gpu-layers"] == "all"
    assert any("convert a bf16 cache to f16" in n for n in p.notes)
    assert llamacpp_plan(ServingSpec(model="/m", dtype="bfloat16"), target()).flags["--cache-type-k"] == "bf16"


@pytest.mark.parametrize("field, value, match", [
    ("block_size", 16, "not paged blocks"),
    ("gpu_memory_utilization", 0.9, "kv_cache_memory_bytes"),
    ("kv_cache_dtype", "fp8", "no fp8"),
    ("chunked_prefill", False, "cannot be turned off"),
    ("tensor_parallel", 2, "--split-mode"),
    ("load_format", "dummy", "real weights"),
    ("tokenizer", "/other", "own tokenizer"),
])
def test_refusals_say_why(field, value, match):
    with pytest.raises(UnsupportedSpecError, match=match):
        llamacpp_plan(ServingSpec(model="/m", **{field: value}), target())


def test_gpu_layers_graphs_and_native_flags():
    p = llamacpp_plan(ServingSpec(model="/m", enforce_eager=True), target(device="cuda"))
    assert p.flags["--n-gpu-layers"] == "all" and p.env["GGML_CUDA_DISABLE_GRAPHS"] == "1"
    p = llamacpp_plan(ServingSpec(model="/m", enforce_eager=True, prefix_caching=False,
                                  native={"llamacpp": {"--threads": 2, "server_bin": "/opt/llama-server"}}), target())
    assert p.flags["--n-gpu-layers"] == 0 and not p.env and any("not applicable on CPU" in n for n in p.notes)
    assert p.flags["--no-cache-prompt"] is True and p.flags["--cache-ram"] == 0 and p.flags["--threads"] == 2
    assert p.server_bin == "/opt/llama-server"
    with pytest.raises(UnsupportedSpecError, match="set by the backend"):
        llamacpp_plan(ServingSpec(model="/m", native={"llamacpp": {"--port": 1}}), target())
    with pytest.raises(UnsupportedSpecError, match="not a llama-server flag"):
        llamacpp_plan(ServingSpec(model="/m", native={"llamacpp": {"threads": 2}}), target())


def test_completion_payload_and_events():
    greedy = completion_payload(GenerationRequest("r", max_tokens=7, prompt_token_ids=(1, 2), ignore_eos=True, seed=5))
    assert greedy["prompt"] == [1, 2] and greedy["n_predict"] == 7 and greedy["temperature"] == 0.0
    assert greedy["return_tokens"] and greedy["ignore_eos"] and greedy["seed"] == 5 and "top_k" not in greedy
    sampled = completion_payload(GenerationRequest("r", max_tokens=7, prompt_text="hi", temperature=0.7, top_p=0.9))
    assert sampled["top_k"] == 0 and sampled["min_p"] == 0.0 and sampled["top_p"] == 0.9  # no hidden truncation
    tok = COMPLETION.new_stream().feed(RawEvent(5, '{"content":"","tokens":[17],"stop":false}', "", 5))
    assert len(tok) == 1 and isinstance(tok[0], TokenEvent) and tok[0].token_ids == (17,)  # empty text: still a token
    stream = COMPLETION.new_stream()  # one per request: the running count and the timings
    first = stream.feed(RawEvent(5, '{"content":"a","tokens":[17],"stop":false,"tokens_predicted":1}', "", 5))
    assert first[0].token_ids == (17,)
    # the server sent nothing for a token that ended inside a UTF-8 character: its count is restored
    held = stream.feed(RawEvent(6, '{"content":"\u00e9","tokens":[18],"stop":false,"tokens_predicted":3}', "", 6))
    assert held[0].token_ids == (-1, 18) and held[0].text == "\u00e9"
    last = stream.feed(RawEvent(9, '{"content":"","tokens":[],"stop":true,"stop_type":"limit",'
                                        '"tokens_predicted":3,"tokens_evaluated":2,"tokens_cached":8,'
                                        '"timings":{"prompt_ms":1.5,"predicted_ms":3.0,"cache_n":0,"prompt_n":2}}',
                               "", 9))
    assert last == [Done(finish_reason="length", prompt_tokens=2, completion_tokens=3, terminal=True)]
    assert stream.timings["prompt_ms"] == 1.5 and stream.timings["tokens_cached"] == 8
    assert stream.engine_metrics() == {"prefill_s": 0.0015, "decode_s": 0.003, "prompt_cached_tokens": 0.0,
                                       "prompt_processed_tokens": 2.0}
    # the generation ended on a held token: the last event's count restores it
    stream = COMPLETION.new_stream()
    stream.n = 2
    end = stream.feed(RawEvent(9, '{"content":"","tokens":[],"stop":true,"stop_type":"limit",'
                                       '"tokens_predicted":3,"tokens_evaluated":2}', "", 9))
    assert end[0].token_ids == (-1,) and end[0].t_ns == 9 and end[1].completion_tokens == 3
    err = COMPLETION.new_stream().feed(RawEvent(1, '{"error":{"code":400,"message":"bad"}}', "", 1))
    assert isinstance(err[0], Error) and err[0].message == "bad"


def test_quality_probes_are_one_unstreamed_request_carrying_every_id():
    """The stream leaves held tokens' ids unknown (-1 above); a quality probe needs them, so it is
    the same request not streamed, whose one answer lists every sampled id."""
    import pytest as _pt

    from backends.http.protocol import BadEvent
    from backends.llamacpp.protocol import unary_payload, unary_token_ids
    from backends.llamacpp.server import LlamaCppBackend

    req = GenerationRequest("r", max_tokens=3, prompt_token_ids=(1, 2), ignore_eos=True)
    assert unary_payload(req) == {**completion_payload(req), "stream": False}
    assert unary_token_ids({"content": "aé", "tokens": [17, 200, 18], "stop": True}) == (17, 200, 18)
    for bad in ({"content": "a"}, {"tokens": None}, {"tokens": [1, "2"]}, [1, 2]):
        with _pt.raises(BadEvent):
            unary_token_ids(bad)
    assert LlamaCppBackend.unary_quality_probes is True


def test_loaded_type_from_what_the_server_reports():
    rep = loaded_report({"model_ftype": "Q8_0"}, {"size": 1_200_000, "n_params": 1_100_000}, {"f32": 9, "q8_0": 28})
    assert rep.method == "Q8_0" and rep.dtype == "float32" and rep.bits_per_weight == pytest.approx(8.727, abs=1e-3)
    assert rep.linear_ratio == pytest.approx(8.727 / 32, abs=1e-3)  # the whole file when layers are not known
    # quantized from a bf16 GGUF: the model's dtype is bf16; the decoder's linear weights (8.5 bits
    # a weight in Q8_0) against 16 bits, as vLLM's ratio is against the model's dtype
    rep = loaded_report({"model_ftype": "Q8_0"}, {"size": 1_200_000, "n_params": 1_100_000}, None, "f16", 8.5, "bf16")
    assert rep.dtype == "bfloat16" and rep.linear_ratio == pytest.approx(8.5 / 16, abs=1e-4)
    assert rep.linear_bits_per_weight == 8.5 and rep.bits_per_weight == pytest.approx(8.727, abs=1e-3)
    assert loaded_report({"model_ftype": "BF16"}, {}, None, None, 16.0, None).linear_ratio == 1.0
    rep = loaded_report({"model_ftype": "(guessed) all F32"}, {}, None, "f32")
    assert rep.method is None and rep.dtype == "float32" and rep.kv_cache_dtype == "f32"
    assert loaded_report({"model_ftype": "Q4_K - Medium"}, {}).method == "Q4_K_M"
    assert loaded_report({}, {}) is None
    # run.json keeps the keys the report set, as the JSON object it always was
    assert set(rep.as_json()) == {"method", "file_type", "kernels", "source", "dtype", "kv_cache_dtype"}


def test_level_timings_are_exact_means():
    out = level_timings([{"prefill_s": 0.002, "decode_s": 0.010, "prompt_cached_tokens": 0, "prompt_processed_tokens": 4},
                         {"prefill_s": 0.004, "decode_s": 0.030, "prompt_cached_tokens": 4, "prompt_processed_tokens": 4}])
    assert out["server_prefill_ms"]["count"] == 2 and out["server_prefill_ms"]["mean"] == pytest.approx(3.0)
    assert out["server_decode_ms"]["mean"] == pytest.approx(20.0) and out["prompt_cache"]["hit_rate"] == pytest.approx(4 / 12)
