"""Both TGI clients (backends/http/tgi_client.py) against TGI's /generate_stream on the calibration
server (known send stamps): the stamped reader is the default because its timing error is smaller."""
from __future__ import annotations

import asyncio

import pytest

from adapters.spec import ServingSpec
from backends.http.tgi_client import DEFAULT_TGI_CLIENT
from core.errors import BackendRequestError
from core.records import GenerationRequest, StreamEnd, TokenEvent

pytest.importorskip("text_generation")


def test_both_clients_stream_tgi_and_stamped_is_more_accurate():
    from compare.cli.commands.calibrate import tgi_clients

    rows = {r["client"]: r for r in tgi_clients([20], 30, 5.0, 10.0)}
    for r in rows.values():
        assert r["events"] == 20 * 30 and not r["failed"], r
    assert DEFAULT_TGI_CLIENT == "stamped"
    assert rows["stamped"]["timing_error_ms"]["p50"] < rows["text-generation"]["timing_error_ms"]["p50"]
    assert rows["text-generation"]["event_clock"]["source"].startswith("user: perf_counter_ns when text-generation")


def test_text_generation_client_ends_streams_and_validates_parameters():
    from backends.tgi.backend import TgiEndpoint
    from compare.running.calibration import CalibrationServerProcess, CalibrationTiming

    async def go(url):
        b = TgiEndpoint(ServingSpec(model="m", native={"tgi": {"client": "text-generation"}}), "tgi@" + url,
                        target=url, metrics=None)
        async with b:
            items = [x async for x in b.stream(GenerationRequest("a", 7, prompt_text="hi", ignore_eos=False))]
            with pytest.raises(BackendRequestError) as e:  # TGI's rule, from the package: top_n_tokens > 0
                from backends.http.tgi_client import validate

                validate(GenerationRequest("b", 3, prompt_text="hi", logprobs=-1))
            return items, e.value, b.describe()

    with CalibrationServerProcess(CalibrationTiming(1.0, 2.0, 1)) as url:
        items, err, desc = asyncio.run(go(url))
    toks = [x for x in items if isinstance(x, TokenEvent)]
    assert len(toks) == 7 and isinstance(items[-1], StreamEnd)
    assert items[-1].finish_reason == "length" and items[-1].completion_tokens == 7
    assert err.kind == "validation"
    assert desc.native_config["client"] == "text-generation"
