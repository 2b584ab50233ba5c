"""The run's offered load (compare/running/load.py) as the adapters get it, TGI's admission limit in
`compare plan`, and a refused load named as such in the caveats."""
from __future__ import annotations

import json

from core.records import GenerationRequest
from compare.analysis.caveats import caveats
from compare.running.load import offered_load
from compare.workload.schedule import LoadLevel
from tests.conftest import cli


def _reqs(n: int, prompt: int = 10, out: int = 5) -> list[GenerationRequest]:
    return [GenerationRequest(f"r{i}", out, prompt_token_ids=tuple(range(prompt + i))) for i in range(n)]


def test_highest_concurrency_and_longest_request():
    load = offered_load([LoadLevel("concurrency", 1), LoadLevel("concurrency", 8)], _reqs(20))
    assert load.max_in_flight == 8 and load.max_request_tokens == 10 + 19 + 5
    # closed loop never holds more than the level's requests; open loop may hold all of them
    assert offered_load([LoadLevel("concurrency", 256)], _reqs(20)).max_in_flight == 20
    assert offered_load([LoadLevel("concurrency", 2), LoadLevel("rate", 5.0)], _reqs(50)).max_in_flight == 50
    assert offered_load([LoadLevel("concurrency", 256)], None).max_in_flight == 256
    assert offered_load([LoadLevel("rate", 5.0)], None).max_in_flight is None


def test_plan_shows_the_admission_limit_sized_for_the_load():
    p = cli("plan", "--backends", "tgi,tgi@http://127.0.0.1:9", "--model", "org/m", "--concurrency", "1,256",
                "--format", "json")
    assert p.returncode == 0, p.stderr
    tgi = json.loads(p.stdout)["backends"]["tgi"]
    argv = tgi["launcher_argv"]
    assert argv[argv.index("--max-concurrent-requests") + 1] == "512"
    assert tgi["limits"]["max_concurrent_requests"] == 512 and "256" in tgi["limits"]["source"]
    assert tgi["client"] == "stamped" and "calibrate" in tgi["client_why"]
    p = cli("plan", "--backends", "tgi", "--model", "org/m", "--concurrency", "256", "--native",
                "tgi.--max-concurrent-requests=64", "--format", "json")
    lim = json.loads(p.stdout)["backends"]["tgi"]["limits"]
    assert lim["max_concurrent_requests"] == 64 and any("192 of 256" in n for n in lim["notes"])
    bad = cli("plan", "--backends", "tgi", "--model", "org/m", "--native", "tgi.client=curl")
    assert bad.returncode == 2 and "client" in bad.stderr and "Traceback" not in bad.stderr


def test_refused_load_is_named_in_the_caveats():
    from tests.synth import make_run, records

    run, _ = make_run({"tgi": [records("tgi", "c8", 0, n=8)]}, level="c8")
    lvl = run["backends"]["tgi"]["levels"]["c8"]
    lvl.update(failed=3, errors={"overloaded": 2, "timeout": 1})
    out = caveats(run)
    assert any("tgi c8: the server refused load: 2 request(s) rejected as overloaded" in c
               and "max-concurrent-requests" in c for c in out), out
    assert any("1 failed request(s)" in c and "timeout" in c and "overloaded" not in c for c in out), out
