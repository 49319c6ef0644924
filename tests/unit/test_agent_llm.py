"""The LLM policy end to end through the real ``openai`` client against a scripted local
OpenAI-compatible server (http.server on loopback, port 0)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from argus_cutlass.agent.llm import LLMError, LLMPolicy, ReplyRejected, parse_reply
from argus_cutlass.agent.planner import Measurement, Problem, run_episode
from argus_cutlass.errors import ArgusError
from argus_cutlass.kernels.gemm.space import GemmSpace, feasible

PROBLEM = Problem(1024, 1024, 1024)  # heuristic incumbent 128x256x64 coop, c2x1, s4, along_n


class ScriptedServer:
    """Replies to POST /v1/chat/completions with the scripted contents in order, recording
    each request body; an int in the script is answered as that HTTP status."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                return

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                item = outer.script.pop(0) if outer.script else 500
                if isinstance(item, int):
                    self.send_response(item)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": item}}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def evaluate(cfgs):
    return [Measurement("ok", 0.9 if c.raster == "along_m" else 1.0) for c in cfgs]


def last_user(req: dict) -> str:
    return [m for m in req["messages"] if m["role"] == "user"][-1]["content"]


GOOD = json.dumps({"technique": "raster_order", "params": {"raster": "along_m"}, "rationale": "A panel in L2"})
SCRIPT = [
    "sure! {technique: raster}",                                                   # malformed JSON
    json.dumps({"technique": "pipeline_depth", "params": {"warps": 4}}),            # unknown knob
    json.dumps({"technique": "register_reallocation", "params": {}}),               # unavailable
    json.dumps({"technique": "split_k", "params": {"splits": 4}}),                   # precondition false
    json.dumps({"technique": "pipeline_depth", "params": {"stages": 8}}),            # verifier rejects
    "```json\n" + GOOD + "\n```",                                                    # good (fenced)
]


def test_llm_policy_feedback_loop_through_openai_client():
    rejected = []
    with ScriptedServer(SCRIPT) as srv:
        pol = LLMPolicy(srv.url, "test-model", "sk-test", max_retries=0, timeout_s=10, max_invalid=5,
                        on_reject=lambda text, err: rejected.append(err))
        res = run_episode(PROBLEM, GemmSpace(), pol, evaluate, budget=2, batch=1)
    reqs = srv.requests
    assert len(reqs) == 6 and all(r["model"] == "test-model" for r in reqs)
    first = json.loads(reqs[0]["messages"][1]["content"])
    assert {"knowledge_base", "history", "action_values", "incumbent", "knob_domains"} <= set(first)
    assert first["history"][0]["technique"] == "baseline"
    # each rejection is sent back in the next request, after the rejected reply
    assert "invalid JSON" in last_user(reqs[1])
    assert reqs[1]["messages"][-2] == {"role": "assistant", "content": SCRIPT[0]}
    assert "unknown knob 'warps'" in last_user(reqs[2])
    assert "not available" in last_user(reqs[3]) and "register_reallocation" in last_user(reqs[3])
    assert "does not apply" in last_user(reqs[4]) and "k >= 2048" in last_user(reqs[4])
    assert "verifier rejected" in last_user(reqs[5]) and "smem.capacity" in last_user(reqs[5])
    assert len(rejected) == 5
    # the final choice is valid and was measured
    final = [s for s in res.steps if s.action.technique == "raster_order"]
    assert len(final) == 1 and final[0].status == "ok" and final[0].config.raster == "along_m"
    assert feasible(final[0].config)[0]
    assert res.best.raster == "along_m" and pol.values.mean("raster_order") > 0


def test_llm_retry_budget_is_bounded():
    with ScriptedServer(["nope"] * 10) as srv:
        pol = LLMPolicy(srv.url, "m", "k", max_retries=0, max_invalid=2)
        res = run_episode(PROBLEM, GemmSpace(), pol, evaluate, budget=3, batch=1)
    assert len(srv.requests) == 3  # 1 + max_invalid, then the episode stops
    assert len(res.measured) == 1  # only the baseline


def test_missing_settings_say_how_to_set_them(monkeypatch):
    for var in ("OPENAI_BASE_URL", "ARGUS_LLM_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(LLMError) as e:
        LLMPolicy()
    assert isinstance(e.value, ArgusError) and e.value.rule == "llm.settings"
    for hint in ("OPENAI_BASE_URL", "ARGUS_LLM_MODEL", "OPENAI_API_KEY", "--base-url", "--policy default"):
        assert hint in str(e.value)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("ARGUS_LLM_MODEL", "m")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert LLMPolicy().model == "m"


def test_endpoint_down_is_a_clear_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    pol = LLMPolicy(f"http://127.0.0.1:{port}/v1", "m", "k", max_retries=1, timeout_s=2)
    with pytest.raises(LLMError) as e:
        run_episode(PROBLEM, GemmSpace(), pol, evaluate, budget=2)
    assert e.value.rule == "llm.endpoint" and f"127.0.0.1:{port}" in str(e.value)


def test_server_error_midway_keeps_the_log(tmp_path):
    from argus_cutlass.agent.tune import TuneLog, log_name, tune

    with ScriptedServer([GOOD, 500]) as srv:
        pol = LLMPolicy(srv.url, "m", "k", max_retries=0)
        log = TuneLog(tmp_path / log_name(PROBLEM))
        with pytest.raises(LLMError, match="HTTP 500"):
            tune(PROBLEM, pol, evaluate, tmp_path, budget=4, batch=1, log=log, seed_untuned=False)
        log.close()
    lines = [json.loads(x) for x in (tmp_path / log_name(PROBLEM)).read_text().splitlines()]
    assert [x["technique"] for x in lines if x["event"] == "candidate"] == ["baseline", "raster_order"]


def test_tune_measures_the_untuned_choice_second(tmp_path):
    """``tune`` (``argus-cutlass tune gemm``) measures the cost model's untuned choice right after the heuristic:
    the episode's best is then never slower than what runs without a tuned entry."""
    from argus_cutlass.agent.planner import untuned_choice
    from argus_cutlass.agent.tune import tune
    from argus_cutlass.kernels.gemm.space import GemmSpace

    (choice,) = untuned_choice(PROBLEM, GemmSpace(PROBLEM.dtype, PROBLEM.out_dtype, PROBLEM.layout))
    with ScriptedServer([GOOD, GOOD]) as srv:
        res = tune(PROBLEM, LLMPolicy(srv.url, "m", "k", max_retries=0), evaluate, tmp_path, budget=2, batch=1)
    assert [s.action.technique for s in res.steps] == ["baseline", "untuned"]
    assert res.steps[1].config == choice and res.steps[1].measured
    with ScriptedServer([GOOD, GOOD]) as srv:
        res = tune(PROBLEM, LLMPolicy(srv.url, "m", "k", max_retries=0), evaluate, tmp_path / "off", budget=2,
                   batch=1, seed_untuned=False)
    assert [s.action.technique for s in res.steps] == ["baseline", "raster_order"]


def test_parse_reply_schema():
    assert parse_reply(GOOD).technique == "raster_order"
    with pytest.raises(ReplyRejected, match="schema"):
        parse_reply('{"technique": "x", "params": {}, "extra": 1}')
    with pytest.raises(ReplyRejected, match="schema"):
        parse_reply('{"params": {}}')
    with pytest.raises(ReplyRejected, match="invalid JSON"):
        parse_reply("[1, 2")
