"""quantize -> build -> serve with REAL containers on the REAL Docker engine, into the real cache.

The step image is llm-compare/trtllm-double:test: a TEST DOUBLE of TensorRT-LLM's CLIs
(containers/images/trtllm-double/trtllm_double.py) on the local vLLM CPU server image. It accepts
only flags the real tools define and serves with the real vLLM OpenAI server; it quantizes and
compiles nothing. The TensorRT-LLM commands themselves are pinned by tests/adapters/test_trtllm_adapter.py.
One server start in total (the engine flow's); the PyTorch flow's serve container runs until
trtllm-serve has taken its argv and YAML.
"""
import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from adapters.spec import ServingSpec
from core.records import GenerationRequest, TokenEvent
from core.errors import BackendStartError
from backends.trtllm.backend import TrtllmBackend
from backends.models.engine_cache import EngineCache
from core.errors import UserError
from tests.conftest import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.engine]
IMAGE = "llm-compare/trtllm-double:test"


@pytest.fixture(scope="module")
def docker_client():
    from containers.manager import connect

    try:
        client = connect()
    except UserError as e:
        pytest.skip(f"no Docker engine can be reached: {e}")
    p = subprocess.run(["bash", "scripts/setup.d/25-trtllm-double.sh"], cwd=ROOT, capture_output=True, text=True,
                       timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    return client


def spec_for(model, native, **kw):
    return ServingSpec(model=str(model), dtype="float32", max_model_len=512, max_num_seqs=4,
                       native={"trtllm": {"image": IMAGE, "gpus": "none", **native}}, **kw)


def our_containers(client, backend):
    return client.containers.list(all=True, filters={"label": f"llm-compare.backend={backend}"})


def serve_and_stream(backend, n=2, max_tokens=6):
    async def go():
        async with backend:
            out = []
            for i in range(n):
                req = GenerationRequest(f"r{i}", max_tokens=max_tokens, prompt_token_ids=tuple(range(10, 30 + i)))
                toks, end = 0, None
                async for item in backend.stream(req):
                    if isinstance(item, TokenEvent):
                        toks += item.n_tokens
                    else:
                        end = item
                out.append((toks, end))
            return out, backend.describe().as_dict()
    return asyncio.run(go())


def test_engine_flow_quantize_build_serve_and_cache(docker_client, tiny_model, tmp_path):
    spec = spec_for(tiny_model, {"version": "1.1.0", "flow": "engine"}, quantization="w8a8-int8", prefix_caching=False)
    cache = EngineCache(tmp_path / "cache")
    b = TrtllmBackend(spec, name="trtllm-e2e-engine", cache_dir=str(cache.root), metrics=None)
    results, desc = serve_and_stream(b)
    for toks, end in results:
        assert toks == 6 == end.completion_tokens and end.finish_reason == "length"
    art = desc["extra"]["artifact"]
    assert art["cache_hit"] is False
    (entry,) = cache.entries()
    assert entry.key == art["cache_key"] and entry.meta["flow"] == "engine" and entry.meta["quant"] == "W8A8_SQ_PER_CHANNEL"
    # what ran in the step containers is exactly the argv the adapter generated
    q, bld = b.plan.steps
    assert json.loads((entry.path / "checkpoint" / "trtllm_double.json").read_text())["argv"] == list(q.argv[2:])
    assert json.loads((entry.path / "engine" / "trtllm_double.json").read_text())["argv"] == list(bld.argv[1:])
    assert "qformat int8_sq NOT applied" in (entry.path / "logs" / "quantize.log").read_text()
    serve_log = desc["extra"]["container"]["logs_tail"]
    assert "[double] trtllm-serve " in serve_log and " -> " in serve_log and "/work/engine/hf" in serve_log
    assert "--no-enable-prefix-caching" in serve_log  # the LlmArgs YAML reached the server
    assert desc["native_config"]["serve"][:6] == ["trtllm-serve", "/work/engine", "--tokenizer", "/model",
                                                  "--backend", "tensorrt"]
    assert our_containers(docker_client, "trtllm-e2e-engine") == []
    assert [c.name for c in docker_client.containers.list(all=True, filters={"label": "llm-compare.step"})] == []

    # the second backend with the same spec hits the cache: no step container runs
    from backends.trtllm.pipeline import build_key, ensure_artifact

    before = (entry.path / "logs" / "build.log").stat().st_mtime_ns
    again, hit = ensure_artifact(b.plan, spec.model, cache=cache, client=docker_client, gpus=None,
                                 backend="trtllm-e2e-again", modelopt_dir=None)
    assert hit and again.path == entry.path and (entry.path / "logs" / "build.log").stat().st_mtime_ns == before

    # a changed checkpoint at the same path must miss
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model, ckpt)
    image_id = docker_client.images.get(IMAGE).id
    k1, _ = build_key(b.plan, str(ckpt), image_id, cache)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["rms_norm_eps"] = cfg.get("rms_norm_eps", 1e-6) * 2
    (ckpt / "config.json").write_text(json.dumps(cfg))
    k2, _ = build_key(b.plan, str(ckpt), image_id, cache)
    assert k1 != k2


def test_pytorch_flow_modelopt_step_and_config_yaml(docker_client, tiny_model, tmp_path):
    """The PyTorch flow's own parts: the ModelOpt step, and its serve container (the checkpoint at
    /work/quantized, every setting in the LlmArgs YAML) taken by trtllm-serve's CLI. Its server is
    not waited for: starting, streaming and stopping through the double's server is the engine
    flow's, above, the same code path with other argv."""
    from adapters.trtllm import LLM_ARGS_FILE
    from backends.trtllm.backend import _serve_container
    from backends.trtllm.pipeline import ensure_artifact
    from containers.manager import ManagedContainer

    spec = spec_for(tiny_model, {"version": "1.2.0", "calib_size": 8}, quantization="w4a16-awq",
                    prefix_caching=True, enforce_eager=True)
    b = TrtllmBackend(spec, name="trtllm-e2e-pytorch", cache_dir=str(tmp_path / "cache"), metrics=None)
    assert [s.name for s in b.plan.steps] == ["quantize"]
    cache = EngineCache(tmp_path / "cache")
    entry, hit = ensure_artifact(b.plan, spec.model, cache=cache, client=docker_client, gpus=None,
                                 backend="trtllm-e2e-pytorch", modelopt_dir=None)
    assert not hit and cache.entries()[0].path == entry.path
    argv = json.loads((entry.path / "quantized" / "trtllm_double.json").read_text())["argv"]
    assert argv == list(b.plan.steps[0].argv[2:]) and "--kv_cache_qformat" in argv
    assert (entry.path / "quantized" / "config.json").is_file()  # what the server loads from /work/quantized
    serve = b.plan.as_dict()["serve"]
    assert serve[:2] == ["trtllm-serve", "/work/quantized"] and serve[-2:] == ["--config", "/config/llm_args.yaml"]
    # the serve container as the backend makes it (its YAML in the run's config dir), until
    # trtllm-serve has parsed its argv and YAML and says what it serves with
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / Path(LLM_ARGS_FILE).name).write_text(yaml.safe_dump(b.plan.llm_args, sort_keys=False))
    c = ManagedContainer(_serve_container(spec, b.plan, str(entry.path), str(tmp_path / "config")),
                         backend="trtllm-e2e-pytorch", client=docker_client)
    try:
        c.start()
        deadline = time.monotonic() + 120
        while "[double] trtllm-serve " not in (log := c.logs()):
            assert c.state().get("Status") == "running", log[-2000:]
            assert time.monotonic() < deadline, log[-2000:]
            time.sleep(0.2)
    finally:
        c.stop(timeout=1)
    (said,) = [x for x in log.splitlines() if x.startswith("[double] trtllm-serve ")]
    assert " -> " in said and "--model /work/quantized " in said
    assert "--enable-prefix-caching" in said and "--max-num-seqs 4" in said and "--max-model-len 512" in said
    assert our_containers(docker_client, "trtllm-e2e-pytorch") == []


def test_build_failure_reports_log_tail_and_publishes_nothing(docker_client, tiny_model, tmp_path):
    spec = spec_for(tiny_model, {"version": "0.21.0", "build_args": {"max_beam_width": "two"}})
    cache = EngineCache(tmp_path / "cache")
    b = TrtllmBackend(spec, name="trtllm-e2e-fail", cache_dir=str(cache.root), metrics=None)
    with pytest.raises(BackendStartError) as ei:
        asyncio.run(b.__aenter__())
    msg = str(ei.value)
    assert "build step failed with exit code 2" in msg and "invalid int value: 'two'" in msg
    assert "nothing was cached" in msg and "\n" not in msg
    assert cache.entries() == [] and list((cache.root / ".tmp").iterdir()) == []
    assert our_containers(docker_client, "trtllm-e2e-fail-quantize") == []
    assert our_containers(docker_client, "trtllm-e2e-fail-build") == []


def test_missing_checkpoint_files_refused_before_any_container(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(UserError, match="no weight files"):
        TrtllmBackend(spec_for(tmp_path / "m", {}), cache_dir=str(tmp_path / "c"))
