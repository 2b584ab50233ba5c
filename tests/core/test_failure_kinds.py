"""Request failure kinds are one enumeration (core.errors.FailureKind): every kind the backends and
the executor produce is a member, written as a member (no string spelling that could drift), and an
unknown kind is an error, not a new category in the results."""
from __future__ import annotations

import ast
import json

import pytest

from backends.http import openai, protocol, sse, tgi
from backends.http.protocol import Error
from backends.http.sse import RawEvent
from core.errors import BackendRequestError, FailureKind
from tests.conftest import ROOT

# the calls that produce a failure kind: (callable name, index of the kind argument)
_PRODUCERS = {"BackendRequestError": 0, "Error": 0}


def _kind_args():
    for pkg in ("backends", "compare", "core"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PRODUCERS \
                        and node.args:
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", node.args[_PRODUCERS[node.func.id]]


def test_every_kind_the_code_produces_is_written_as_a_member():
    sites = list(_kind_args())
    assert len(sites) > 20  # the scan sees the producers (backends, the HTTP client, topology)
    literal, unknown = [], []
    for where, arg in sites:
        if isinstance(arg, ast.Constant):
            literal.append(f"{where}: {arg.value!r}")
        elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "FailureKind" \
                and arg.attr not in FailureKind.__members__:
            unknown.append(f"{where}: FailureKind.{arg.attr}")
    assert not literal, f"failure kinds spelled as strings (use FailureKind members): {literal}"
    assert not unknown, unknown


def test_the_kind_tables_hold_members():
    tables = {"sse._STATUS_KIND": sse._STATUS_KIND, "tgi.ERROR_KIND": tgi.ERROR_KIND,
              "protocol._CODE_KIND": protocol._CODE_KIND}
    for name, table in tables.items():
        assert all(type(v) is FailureKind for v in table.values()), name


@pytest.mark.parametrize("status", [400, 404, 413, 422, 424, 429, 500, 502, 503])
def test_http_statuses_map_to_members(status):
    e = sse.status_error(status, b'{"error": "x"}')
    assert type(e.kind) is FailureKind and e.status == status
    assert e.kind in ({FailureKind.VALIDATION, FailureKind.GENERATION, FailureKind.OVERLOADED, FailureKind.HTTP_4XX}
                      if status < 500 else {FailureKind.HTTP_5XX})


@pytest.mark.parametrize("payload, kind", [
    ({"error": "bad", "error_type": "validation"}, FailureKind.VALIDATION),
    ({"error": "busy", "error_type": "overloaded"}, FailureKind.OVERLOADED),
    ({"error": "cut", "error_type": "incomplete_generation"}, FailureKind.DISCONNECTED),
    # what TGI 3.3's /generate_stream sends for a stream cut before its last event (server.rs)
    ({"error": "Incomplete generation stream", "error_type": "incomplete_generation_stream"}, FailureKind.DISCONNECTED),
    ({"error": "?", "error_type": "something_new"}, FailureKind.GENERATION),
])
def test_tgi_stream_errors_are_members(payload, kind):
    (err,) = tgi.parse_generate_stream(RawEvent(0, json.dumps(payload)))
    assert isinstance(err, Error) and err.kind is kind


def test_openai_stream_errors_are_members():
    (err,) = openai.parse_completions(RawEvent(0, json.dumps({"error": {"message": "slow down", "code": 429}})))
    assert err.kind is FailureKind.OVERLOADED
    (err,) = openai.parse_completions(RawEvent(0, "not json"))
    assert err.kind is FailureKind.PROTOCOL


def test_a_kind_is_coerced_to_the_member_and_an_unknown_kind_raises():
    assert BackendRequestError("engine_dead", "x").kind is FailureKind.ENGINE_DEAD
    assert Error("overloaded", "x").kind is FailureKind.OVERLOADED
    for bad in ("engine_died", "Timeout", ""):
        with pytest.raises(ValueError, match=repr(bad)):
            BackendRequestError(bad, "x")
        with pytest.raises(ValueError, match=repr(bad)):
            Error(bad, "x")


def test_members_are_stored_as_their_plain_string():
    # run.json / records.jsonl hold the value; reading it back gives the same member
    assert json.dumps({"k": FailureKind.REPLICA_DEAD}) == '{"k": "replica_dead"}'
    assert FailureKind(json.loads('"replica_dead"')) is FailureKind.REPLICA_DEAD
