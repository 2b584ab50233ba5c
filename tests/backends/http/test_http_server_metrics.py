"""Server metrics: real Prometheus exposition (prometheus_client's own server on loopback) parsed
with the real text parser; deltas are exactly one level's work."""
from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from backends.server_metrics import MetricsScraper, histogram_delta, parse_prometheus
from core.results.models import BucketBound
from backends.server_process import free_port


@pytest.fixture()
def vllm_like_server():
    reg = CollectorRegistry()
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["model_name"], registry=reg,
                     buckets=(0.01, 0.02, 0.04, 0.08, 0.16))
    tokens = Counter("vllm:generation_tokens", "tokens", ["model_name"], registry=reg)
    running = Gauge("vllm:num_requests_running", "running", ["model_name"], registry=reg)
    other = Counter("process_unrelated", "dropped", registry=reg)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        yield f"http://127.0.0.1:{port}", ttft, tokens, running, other
    finally:
        server.shutdown()
        thread.join(5)


def test_level_deltas_from_real_exposition(vllm_like_server):
    url, ttft, tokens, running, other = vllm_like_server
    ttft.labels("m").observe(0.5)  # before the level: must not count
    tokens.labels("m").inc(1000)

    async def go():
        async with httpx.AsyncClient(base_url=url) as c:
            s = MetricsScraper(c, "prometheus", interval_s=0.05)
            await s.start("c1")
            for v in (0.015, 0.015, 0.03, 0.03):
                ttft.labels("m").observe(v)
            tokens.labels("m").inc(64)
            running.labels("m").set(4)
            other.inc()
            await asyncio.sleep(0.3)
            running.labels("m").set(0)
            return await s.stop("c1")

    out = asyncio.run(go())
    assert out["available"] and out["scrapes"] >= 3
    d = out["server_ttft_ms"]
    assert d["count"] == 4 and abs(d["mean"] - 22.5) < 1e-6  # mean is exact: sum/count deltas
    # quantiles are the buckets that hold them, no number inside a bucket
    assert d["quantiles"]["p50"] == {"lo": 10.0, "hi": 20.0} and d["quantiles"]["p99"] == {"lo": 20.0, "hi": 40.0}
    assert "p50" not in d
    assert out["counters"]["vllm:generation_tokens_total"] == 64
    assert not any(k.startswith("process_") for k in out["counters"])  # only vllm:/tgi_/trtllm_ kept
    # gauges are raw samples on the client's clock (compare/analysis/breakdown.py windows them)
    running = [s["vllm:num_requests_running"] for s in out["samples"]]
    assert max(running) == 4 and all(isinstance(s["t_ns"], int) for s in out["samples"])


def test_missing_metrics_endpoint_is_reported_not_fatal():
    from tests.http_util import RawHttpServer, status_response

    async def go():
        async with RawHttpServer(status_response("404 Not Found", b"no metrics here")) as srv:
            async with httpx.AsyncClient(base_url=srv.url) as c:
                s = MetricsScraper(c, "prometheus")
                await s.start("c1")
                return await s.stop("c1")

    out = asyncio.run(go())
    assert out["available"] is False and "HTTP 404" in out["errors"]


def test_histogram_quantiles_are_bucket_bounds():
    """vLLM's queue-time buckets start at 0.3 s: 100 requests that queued ~4 ms each have an exact
    mean of 4 ms and a p95 known only as <= 300 ms (interpolating said 285 ms)."""
    text = ("# TYPE vllm:request_queue_time_seconds histogram\n"
            'vllm:request_queue_time_seconds_bucket{le="0.3"} 100\n'
            'vllm:request_queue_time_seconds_bucket{le="0.5"} 100\n'
            'vllm:request_queue_time_seconds_bucket{le="+Inf"} 100\n'
            "vllm:request_queue_time_seconds_sum 0.4\nvllm:request_queue_time_seconds_count 100\n")
    d = histogram_delta({}, parse_prometheus(text), "vllm:request_queue_time_seconds")
    assert d["mean"] == pytest.approx(4.0)
    assert d["quantiles"]["p95"] == {"lo": 0.0, "hi": 300.0}
    assert BucketBound(**d["quantiles"]["p95"]).text() == "<= 300"
    assert d["buckets_ms"][0] == [300.0, 100.0]


def test_quantile_above_the_last_finite_bucket_has_no_upper_bound():
    text = ("# TYPE vllm:e2e_request_latency_seconds histogram\n"
            'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 50\n'
            'vllm:e2e_request_latency_seconds_bucket{le="2.0"} 90\n'
            'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 100\n'
            "vllm:e2e_request_latency_seconds_sum 150\nvllm:e2e_request_latency_seconds_count 100\n")
    d = histogram_delta({}, parse_prometheus(text), "vllm:e2e_request_latency_seconds")
    q = {k: BucketBound(**v).text() for k, v in d["quantiles"].items()}
    assert q == {"p50": "<= 1000", "p95": "> 2000", "p99": "> 2000"} and d["mean"] == 1500.0


def test_older_results_with_interpolated_quantiles_still_load():
    """run.json written before bucket bounds: the interpolated numbers are ignored, the mean kept."""
    from core.results.models import LevelSummary

    s = LevelSummary(requests=1, ok=1, wall_s=1.0, output_tokens=1, input_tokens=1, output_tok_s=1.0, req_s=1.0,
                     server_metrics={"server_queue_ms": {"count": 4, "mean": 3.9, "p50": 150.0, "p95": 285.0}})
    h = s.server_histogram("server_queue_ms")
    assert h is not None and h.mean == 3.9 and h.quantiles == {}


def test_gauge_lines_read_as_the_full_parser_reads_them():
    """In-level samples read only the gauge lines (the full parser took ~20-40 ms of the event
    loop on a vLLM-sized page): same values as parse_prometheus, summed over label sets, on real
    exposition text and on the calibration server's vLLM-sized page."""
    from prometheus_client import generate_latest

    from backends.server_metrics import GAUGES, parse_gauges
    from compare.running.calibration import metrics_page

    reg = CollectorRegistry()
    g = Gauge("vllm:num_requests_running", "running", ["model_name", "engine"], registry=reg)
    g.labels("m", "0").set(3)
    g.labels("m", "1").set(4.5)
    Gauge("vllm:num_requests_running_peak", "a longer name that begins with a gauge's", registry=reg).set(99)
    Gauge("vllm:kv_cache_usage_perc", "kv", registry=reg).set(0.25)
    text = generate_latest(reg).decode() + 'tgi_queue_size{shard="a b}"} 2 1700000000000\n'
    full = parse_prometheus(text)
    assert parse_gauges(text) == {k: full[k] for k in GAUGES if k in full} == {
        "vllm:num_requests_running": 7.5, "vllm:kv_cache_usage_perc": 0.25, "tgi_queue_size": 2.0}
    page = metrics_page().decode()
    full = parse_prometheus(page)
    assert parse_gauges(page) == {k: full[k] for k in GAUGES if k in full} and "vllm:num_requests_running" in full
