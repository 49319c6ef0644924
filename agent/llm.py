"""LLM policy: any OpenAI-compatible chat-completions endpoint proposes the next action.

The prompt carries the knowledge base, the knob domains, the problem, the incumbent, the
episode history (action, status, time, reward, verifier/compile feedback) and the learned
action values (in-context RL). The reply must be one JSON object::

    {"technique": "<id>", "params": {"<GemmConfig field>": value, ...}, "rationale": "..."}

It is data, never executed: validated with pydantic, then against the knowledge base
(the technique exists, is available and applicable; every param is one of its knobs with
a value in the search space), then applied to the incumbent and run through the verifier.
Any failure is answered in the same conversation with the error text and the model asks
again, at most ``max_invalid`` times per proposal.

Settings: ``base_url`` / ``model`` / ``api_key`` arguments, else ``OPENAI_BASE_URL`` /
``ARGUS_LLM_MODEL`` / ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from argus_cutlass.agent.kb import KnowledgeBase, load_knowledge
from argus_cutlass.agent.planner import NON_TECHNIQUE_ACTIONS, Action, ActionValues, Proposal, State, Step
from pydantic import BaseModel, ConfigDict, ValidationError

from argus_cutlass.errors import ArgusError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.space import GemmSpace, derive, feasible

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_MODEL = "ARGUS_LLM_MODEL"
ENV_API_KEY = "OPENAI_API_KEY"
#: history rows included in the prompt (most recent)
HISTORY_ROWS = 24



def _openai():  # noqa: ANN202 - the openai module
    """The ``openai`` package (the ``llm`` extra: ``pip install '.[llm]'`` in the checkout).

    Raises:
        LLMError: ``llm.missing`` when it is not installed.
    """
    try:
        import openai
    except ModuleNotFoundError:
        raise LLMError("llm.missing", "the LLM policy needs the openai package, which is not installed",
                       "pip install '.[llm]' in the argus_cutlass checkout (or use --policy default)") from None
    return openai


class LLMError(ArgusError):
    """The LLM policy cannot run: missing settings, endpoint down or too slow."""


class LLMReply(BaseModel):
    """The schema of one reply."""

    model_config = ConfigDict(extra="forbid")

    technique: str
    params: dict[str, Any] = {}
    rationale: str = ""


class ReplyRejected(Exception):
    """A reply failed validation; ``str()`` is the feedback sent back to the model."""


def resolve_settings(base_url: str | None = None, model: str | None = None,
                     api_key: str | None = None) -> tuple[str, str, str]:
    """``(base_url, model, api_key)`` from the arguments, else the environment.

    Raises:
        LLMError: ``llm.settings`` naming each missing value and how to set it.
    """
    base_url = base_url or os.environ.get(ENV_BASE_URL) or None
    model = model or os.environ.get(ENV_MODEL) or None
    api_key = api_key or os.environ.get(ENV_API_KEY) or None
    missing = [f"{what} (--{flag} or {env})" for what, flag, env, v in (
        ("endpoint", "base-url", ENV_BASE_URL, base_url), ("model", "model", ENV_MODEL, model),
        ("API key", "api-key", ENV_API_KEY, api_key)) if not v]
    if missing:
        raise LLMError("llm.settings", "the llm policy needs " + ", ".join(missing),
                       "e.g. export OPENAI_BASE_URL=http://localhost:8000/v1 ARGUS_LLM_MODEL=<model> "
                       "OPENAI_API_KEY=<key>, or use --policy default (offline)")
    return base_url, model, api_key  # type: ignore[return-value]


#: GemmConfig fields searched as one pair fragment: field -> (fragment, position in the pair)
_PAIRED = {"cluster_m": ("cluster", 0), "cluster_n": ("cluster", 1),
           "scheduler": ("decomposition", 0), "splits": ("decomposition", 1)}


def _fragment_of(field: str) -> str:
    return _PAIRED[field][0] if field in _PAIRED else field


def knob_domains(space: GemmSpace) -> dict[str, list[Any]]:
    """GemmConfig field -> allowed values (cluster_m/cluster_n listed from the cluster pairs)."""
    out: dict[str, list[Any]] = {}
    for name, frag in space.fragments.items():
        if name in ("cluster", "decomposition"):
            fields = [f for f, (fr, _) in _PAIRED.items() if fr == name]
            for f in fields:
                out[f] = sorted({c[_PAIRED[f][1]] for c in frag.domain()})
            out[f"{name} (allowed pairs {' x '.join(fields)})"] = [list(c) for c in frag.domain()]
        else:
            out[name] = list(frag.domain())
    out["epi_m"] = ["derived: 128 cooperative, 64 pingpong"]
    return out


def parse_reply(text: str) -> LLMReply:
    """The JSON object of a reply (a ```json fence is tolerated).

    Raises:
        ReplyRejected: not JSON, or not the reply schema.
    """
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*(\{.*\})\s*```", body, re.DOTALL)
    if fence:
        body = fence.group(1)
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReplyRejected(f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                            "reply with one JSON object only") from None
    try:
        return LLMReply.model_validate(obj)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())
        raise ReplyRejected(f"reply does not match the schema: {errs}") from None


def apply_reply(reply: LLMReply, state: State, kb: KnowledgeBase) -> GemmConfig:
    """Check ``reply`` against the knowledge base and the space, apply it to the incumbent,
    and run the verifier.

    Raises:
        ReplyRejected: with the reason (unknown/unavailable technique, precondition, unknown
            knob, value outside the space, not in the space, already measured, verifier).
    """
    try:
        tech = kb.get(reply.technique)
    except KeyError:
        raise ReplyRejected(f"unknown technique {reply.technique!r}; available: "
                            f"{[t.id for t in kb.available]}") from None
    if not tech.available:
        raise ReplyRejected(f"technique {tech.id!r} is not available: {tech.why}")
    env = state.problem.env(state.incumbent)
    failed = [p.text() for p in tech.requires if not p.holds(env)]
    if failed:
        raise ReplyRejected(f"technique {tech.id!r} does not apply here: precondition(s) {failed} "
                            "are false for this problem and incumbent")
    if not reply.params:
        raise ReplyRejected(f"params is empty; set at least one of {list(tech.knobs)}")
    space = state.space
    values: dict[str, Any] = {}
    for field, value in reply.params.items():
        if field not in tech.knobs:
            raise ReplyRejected(f"unknown knob {field!r} for technique {tech.id!r}; its knobs are "
                                f"{list(tech.knobs)}")
        if field == "epi_m":
            continue  # derived from the schedule
        frag = space.fragments.get(_fragment_of(field))
        if frag is None:
            raise ReplyRejected(f"knob {field!r} is not searched in this space")
        if field in _PAIRED:
            if value not in {c[_PAIRED[field][1]] for c in frag.domain()}:
                raise ReplyRejected(f"{field}={value!r} is outside the space")
        elif not frag.contains(value):
            raise ReplyRejected(f"{field}={value!r} is outside the space {list(frag.domain())}")
        values[field] = value
    base = state.incumbent.model_dump()
    base.update(values)
    if "schedule" in values:
        base.update(derive({"schedule": values["schedule"]}))
    try:
        cfg = GemmConfig(**base)
    except ValidationError as exc:
        raise ReplyRejected(f"not a valid GemmConfig: {exc.errors()[0]['msg']}") from None
    ok, reasons = feasible(cfg)
    if not ok and "stages" not in values:  # refit stages to shared memory, as cta_tile does
        for s in range(cfg.stages - 1, 1, -1):
            c = cfg.replace(stages=s)
            if feasible(c)[0]:
                cfg, ok = c, True
                break
    if not space.contains(cfg):
        raise ReplyRejected(f"the resulting configuration {cfg.model_dump()} is not in the search space")
    if cfg in state.tried:
        prev = next(s for s in state.history if s.config == cfg)
        raise ReplyRejected(f"that configuration was already tried (status {prev.status}, ms {prev.ms}); "
                            "propose a different one")
    if not ok:
        raise ReplyRejected("the verifier rejected the configuration (not compiled): " + "; ".join(reasons))
    return cfg


SYSTEM = """You tune an NVIDIA Hopper (sm_90a, H200: 132 SMs, ~750 TFLOP/s bf16, 4.3 TB/s HBM) \
CUTLASS-style GEMM kernel. Each turn you pick ONE technique from the knowledge base and its knob \
values; it is applied to the incumbent configuration, checked by a verifier, compiled and timed. \
Reward = incumbent_ms / new_ms - 1; failures score -1.
Reply with exactly one JSON object and nothing else:
{"technique": "<id of an available technique>", "params": {"<knob>": <value>, ...}, "rationale": "<short>"}
Only the technique's knobs may appear in params; values must come from the knob domains; \
cluster_m/cluster_n and scheduler/splits must form one of the listed pairs. Unavailable techniques must not be proposed."""


class LLMPolicy:
    """Policy backed by a chat-completions endpoint (see the module docstring).

    Args:
        base_url, model, api_key: endpoint settings (else the environment; see
            :func:`resolve_settings`).
        timeout_s: seconds per HTTP request; max_retries: HTTP retries (openai client).
        max_invalid: rejected replies allowed per proposal before giving up on it.
        on_reject: called with ``(reply_text, error)`` for every rejected reply (tuning log).
        client: an ``openai.OpenAI``-like object (tests); built from the settings otherwise.

    Raises:
        LLMError: ``llm.settings`` at construction when a setting is missing.
    """

    name = "llm"

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 *, kb: KnowledgeBase | None = None, values: ActionValues | None = None,
                 timeout_s: float = 60.0, max_retries: int = 2, max_invalid: int = 4,
                 on_reject: Callable[[str, str], None] | None = None, client: Any = None) -> None:
        self.base_url, self.model, api_key = resolve_settings(base_url, model, api_key)
        self.kb = kb or load_knowledge()
        self.values = values if values is not None else ActionValues()
        self.max_invalid = max_invalid
        self.on_reject = on_reject
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        if client is None:
            openai = _openai()
            client = openai.OpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout_s,
                                   max_retries=max_retries)
        self.client = client

    # ---- prompt -------------------------------------------------------------------------------

    def prompt(self, state: State, pending: list[Proposal]) -> list[dict[str, str]]:
        from argus_cutlass.agent.costmodel import predict_ms

        p = state.problem
        hist = [
            {"technique": s.action.technique, "params": {k: v for k, v in s.action.params},
             "status": s.status, "ms": s.ms, "reward": round(s.reward, 4),
             "feedback": s.feedback[:400]}
            for s in state.history[-HISTORY_ROWS:]
        ]
        user = {
            "problem": {"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "out_dtype": p.out_dtype,
                        "layout": p.layout, "tiles_of_incumbent": p.env(state.incumbent)["tiles"]},
            "incumbent": {"config": state.incumbent.model_dump(), "ms": state.incumbent_ms,
                          "cost_model_ms": round(predict_ms(state.incumbent, p.m, p.n, p.k), 5)},
            "history": hist,
            "action_values": self.values.to_dict(),
            "already_proposed_this_round": [q.config.model_dump() for q in pending],
            "knob_domains": knob_domains(state.space),
            "knowledge_base": self.kb.as_prompt(),
        }
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": json.dumps(user, default=str)}]

    # ---- protocol -----------------------------------------------------------------------------

    def _chat(self, messages: list[dict[str, str]]) -> str:
        openai = _openai()

        try:
            resp = self.client.chat.completions.create(model=self.model, messages=messages, temperature=0)
        except openai.APITimeoutError as exc:
            raise LLMError("llm.timeout", f"the endpoint {self.base_url} did not answer within "
                           f"{self.timeout_s:g} s ({self.max_retries} retries): {exc}",
                           "check the server, or raise the timeout; the tuning log so far is kept") from None
        except openai.APIConnectionError as exc:
            raise LLMError("llm.endpoint", f"cannot reach {self.base_url} after {self.max_retries} "
                           f"retries: {exc}", "check OPENAI_BASE_URL / --base-url; the tuning log "
                           "so far is kept") from None
        except openai.APIStatusError as exc:
            raise LLMError("llm.endpoint", f"{self.base_url} answered HTTP {exc.status_code}: "
                           f"{str(exc)[:300]}", "check the model name and the API key") from None
        content = resp.choices[0].message.content if resp.choices else None
        return content or ""

    def propose(self, state: State, count: int) -> list[Proposal]:
        out: list[Proposal] = []
        for _ in range(count):
            messages = self.prompt(state, out)
            for _attempt in range(self.max_invalid + 1):
                text = self._chat(messages)
                try:
                    reply = parse_reply(text)
                    cfg = apply_reply(reply, state, self.kb)
                    if cfg in {q.config for q in out}:
                        raise ReplyRejected("that configuration is already proposed this round")
                except ReplyRejected as exc:
                    if self.on_reject is not None:
                        self.on_reject(text, str(exc))
                    messages.append({"role": "assistant", "content": text})
                    messages.append({"role": "user", "content": f"Rejected: {exc}. Reply again with "
                                                                "one JSON object."})
                    continue
                params = tuple((k, reply.params[k]) for k in sorted(reply.params))
                out.append(Proposal(Action(reply.technique, params, reply.rationale[:500]), cfg))
                break
            else:
                break  # this proposal's retry budget is spent
        return out

    def observe(self, step: Step) -> None:
        if step.action.technique not in NON_TECHNIQUE_ACTIONS:
            self.values.update(step.action.technique, step.reward)
