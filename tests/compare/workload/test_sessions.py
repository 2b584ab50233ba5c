"""Multi-turn sessions (compare/workload/sessions.py): turn k's prompt is the conversation so far,
built from the workload alone (seeded), so every backend gets the same prompts; a bad session file
is refused with the file, the row and the problem."""
from __future__ import annotations

import json

import pytest

from compare.workload.build import WorkloadSpec, build_requests, request_from_dict, request_to_dict
from compare.workload.sessions import group_sessions, load_conversations
from tests.conftest import cli


def _spec(**sessions) -> WorkloadSpec:
    base = {"num_sessions": 3, "turns": {"dist": "uniform", "min": 2, "max": 4}, "system_prompt_tokens": 7,
            "user_tokens": {"dist": "uniform", "min": 3, "max": 9}, "reply_tokens": {"dist": "fixed", "value": 5}}
    return WorkloadSpec.model_validate({"name": "chat", "seed": 4, "sessions": {**base, **sessions}})


def test_synthetic_turn_prompt_is_the_conversation_so_far():
    reqs = build_requests(_spec())
    sessions = group_sessions(reqs)
    assert len(sessions) == 3 and all(2 <= len(s) <= 4 for s in sessions)
    system = sessions[0][0].prompt_token_ids[:7]
    for turns in sessions:
        assert [r.turn for r in turns] == list(range(len(turns)))
        assert all(r.max_tokens == 5 and r.session_id == turns[0].session_id for r in turns)
        assert turns[0].prompt_token_ids[:7] == system  # one system prompt shared by every session
        for prev, cur in zip(turns, turns[1:]):
            # the earlier prompt, then its reply (max_tokens ids), then the new user turn
            assert cur.prompt_token_ids[: len(prev.prompt_token_ids)] == prev.prompt_token_ids
            assert len(cur.prompt_token_ids) - len(prev.prompt_token_ids) >= prev.max_tokens + 3
    # sessions differ from each other after the system prompt
    assert sessions[0][0].prompt_token_ids != sessions[1][0].prompt_token_ids


def test_sessions_are_seeded_and_round_trip_through_workload_jsonl():
    a, b = build_requests(_spec()), build_requests(_spec())
    assert a == b
    assert build_requests(_spec().model_copy(update={"seed": 5})) != a
    assert [request_from_dict(json.loads(json.dumps(request_to_dict(r)))) for r in a] == a


def test_think_time_first_turn_waits_for_nothing():
    fixed = build_requests(_spec(think_time_s=0.25))
    assert {r.think_time_s for r in fixed if r.turn == 0} == {0.0}
    assert {r.think_time_s for r in fixed if r.turn} == {0.25}
    exp = build_requests(_spec(think_time_s=0.25, think_time_dist="exponential"))
    later = [r.think_time_s for r in exp if r.turn]
    assert len(set(later)) == len(later) and all(t > 0 for t in later)


class _Tok:
    """A whitespace tokenizer: enough to check what each prompt format renders."""

    def encode(self, text, add_special_tokens=False):
        return [len(w) for w in text.split()]

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"w{i}" for i in ids)


def test_chat_format_is_the_message_history():
    reqs = build_requests(_spec(num_sessions=1, turns={"dist": "fixed", "value": 3}).model_copy(
        update={"prompt_format": "chat"}), _Tok())
    roles = [[m[0] for m in r.messages] for r in reqs]
    assert roles == [["system", "user"], ["system", "user", "assistant", "user"],
                     ["system", "user", "assistant", "user", "assistant", "user"]]
    assert reqs[2].messages[:4] == reqs[1].messages


def _sharegpt(tmp_path, rows, suffix=".jsonl"):
    p = tmp_path / f"conv{suffix}"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n" if suffix == ".jsonl" else json.dumps(rows))
    return p


CONV = {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hi there"},
                          {"from": "gpt", "value": "hello how are you"}, {"from": "human", "value": "fine thanks"},
                          {"from": "gpt", "value": "good"}, {"from": "human", "value": "unanswered"}]}


def test_sharegpt_sessions_use_every_turn_and_the_recorded_replies(tmp_path):
    p = _sharegpt(tmp_path, [CONV])
    spec = WorkloadSpec.model_validate({"sessions": {"sharegpt": str(p), "num_sessions": 5}})
    reqs = build_requests(spec, _Tok())
    assert [r.turn for r in reqs] == [0, 1]  # the trailing unanswered turn is not a turn
    assert [r.max_tokens for r in reqs] == [4, 1]  # each recorded reply's length in tokens
    # token ids: system + user 1 + reply 1 + user 2, each encoded and concatenated
    assert reqs[1].prompt_token_ids == (2, 5, 2, 5, 5, 3, 3, 3, 4, 6)
    chat = build_requests(spec.model_copy(update={"prompt_format": "chat"}), _Tok())
    assert chat[1].messages == (("system", "be brief"), ("user", "hi there"), ("assistant", "hello how are you"),
                                ("user", "fine thanks"))


@pytest.mark.parametrize("rows, suffix, says", [
    ([CONV, {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "  "}]}], ".jsonl",
     "line 2: turn 1 is empty"),
    ([CONV, {"text": "no conversation"}], ".json", "conversation 1: no \"conversations\" list"),
])
def test_bad_session_file_names_file_row_and_problem(tmp_path, rows, suffix, says):
    p = _sharegpt(tmp_path, rows, suffix)
    with pytest.raises(ValueError, match=says) as e:
        load_conversations(str(p))
    assert str(p) in str(e.value)


def test_bad_session_file_cli_one_line_exit_2_nothing_written(tmp_path):
    p = tmp_path / "conv.jsonl"
    p.write_text(json.dumps(CONV) + "\n" + json.dumps({"conversations": [{"from": "human", "value": ""}]}) + "\n")
    wl = tmp_path / "w.yaml"
    wl.write_text(f"sessions:\n  sharegpt: {p}\n")
    out = tmp_path / "out"
    r = cli("run", "--backends", "fake", "--workload", str(wl), "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("error")]  # (beside "using the embedded model")
    assert len(lines) == 1 and f"{p} line 2: turn 0 is empty" in lines[0] and "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir())
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"conversations": [{"from": "human", "value": "caf\xe9"}]}\n'.encode("latin-1"))
    wl.write_text(f"sessions:\n  sharegpt: {bad}\n")
    r = cli("run", "--backends", "fake", "--workload", str(wl), "--out", str(out))
    lines = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_sessions_beside_single_request_sources_is_one_line_exit_2(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("sharegpt: x.json\nsessions:\n  num_sessions: 2\n")
    r = cli("run", "--backends", "fake", "--workload", str(wl), "--out", str(tmp_path / "out"))
    lines = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert r.returncode == 2 and len(lines) == 1 and "sessions.sharegpt" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
