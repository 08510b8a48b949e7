"""A real instrumented agent exporting OTLP to a live `convo serve`.

Usage: python emit.py MODE [CAPTURE_DIR]

MODE picks the instrumentation (installed from PyPI, see
scripts/requirements-test.txt) around the real `openai` SDK:
  openai-v2-latest  opentelemetry-instrumentation-openai-v2, GenAI semconv
                    latest (gen_ai.input/output.messages on spans and the
                    operation.details event on logs)
  openai-v2-legacy  the same on semconv 1.30: per-message log events
  openinference     openinference-instrumentation-openai
  openllmetry       opentelemetry-instrumentation-openai (OpenLLMetry)
  openai-agents     the OpenAI Agents SDK (openai-agents) with
                    openinference-instrumentation-openai-agents as its
                    trace processor (its own export to OpenAI turned off);
                    the two runs under one agents trace
  openai-agents-handoff
                    the same, a triage agent handing the question to a
                    weather agent (another system prompt), then the
                    follow-up to the weather agent
  pydantic-ai       a Pydantic AI agent instrumented by logfire, which
                    sends to the OTLP endpoint instead of Logfire
                    (`send_to_logfire=False`); in its own venv
                    (scripts/requirements-test-logfire.txt)
  traceloop         OpenLLMetry's SDK (`Traceloop.init`, every bundled
                    instrumentation) sending to the OTLP endpoint as its
                    users point it elsewhere (TRACELOOP_BASE_URL), the run
                    a `@workflow`; in its own venv
                    (scripts/requirements-test-traceloop.txt)

The model is a scripted upstream in this process (a tool call, then
answers). The exporters are the SDK's OTLP/HTTP protobuf exporters,
configured only by the environment (OTEL_EXPORTER_OTLP_ENDPOINT), as a
user would point them at convo. The agent runs one trace: a question, a
tool call and its result, an answer, a follow-up question and its answer.
With CAPTURE_DIR, each export body is also written there (fixtures).

With CONVO_EMIT_TRACES=each the calls are not inside one agent span:
each is its own trace, as a plain script makes them (no trace_id is
printed). OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, when set,
overrides the capture mode openai-v2 is run with.

Replaying (not openai-agents): with CONVO_EMIT_BASE_URL the SDK calls that
URL (`convo proxy --replay SESSION`) instead, and no scripted upstream is
started; with CONVO_EMIT_STREAM=1 it asks for streams. The script prints
each call's answer (text or tool calls), or the error status and code that
ended the run.
"""

import contextlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = sys.argv[1]
capture = sys.argv[2] if len(sys.argv) > 2 else None

if mode == "openai-v2-latest":
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_and_event")
elif mode == "openai-v2-legacy":
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
os.environ.setdefault("OTEL_SERVICE_NAME", "weather-agent")


class Model(BaseHTTPRequestHandler):
    """Chat completions: a tool call when the last message is the user's
    first question, otherwise an answer."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = body["messages"][-1]
        tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        if "transfer_to_weather" in tools and last["role"] == "user":
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "transfer_to_weather", "arguments": "{}"},
                    }
                ],
            }
            finish = "tool_calls"
        elif last["role"] == "tool":
            msg = {"role": "assistant", "content": "It is 18C and sunny in Paris."}
            finish = "stop"
        elif last["content"] == "And tomorrow?":
            msg = {"role": "assistant", "content": "Tomorrow: rain."}
            finish = "stop"
        else:
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            }
            finish = "tool_calls"
        out = json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1800000000,
                "model": "gpt-4o-2024-08-06",
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


replay_url = os.environ.get("CONVO_EMIT_BASE_URL")
stream = os.environ.get("CONVO_EMIT_STREAM") == "1"
if replay_url:
    base_url = replay_url
else:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{upstream.server_port}/v1"

if mode == "pydantic-ai":
    import logfire
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    logfire.configure(
        send_to_logfire=False, console=False, metrics=False, service_name="weather-agent"
    )
    logfire.instrument_pydantic_ai()
    agent = Agent(
        OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=base_url, api_key="sk-test")),
        system_prompt="You are terse.",
        name="weather-agent",
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "18C sunny"

    with logfire.span("weather"):
        first = agent.run_sync("Weather in Paris?")
        second = agent.run_sync("And tomorrow?", message_history=first.all_messages())
    logfire.force_flush()
    logfire.shutdown()
    print(json.dumps({"answers": [first.output, second.output]}))
    sys.exit(0)

if mode == "traceloop":
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if capture:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        original = OTLPSpanExporter.export
        count = [0]

        def export(self, batch, *a, **kw):
            count[0] += 1
            with open(os.path.join(capture, f"{mode}-traces-{count[0]}.pb"), "wb") as f:
                f.write(encode_spans(batch).SerializeToString())
            return original(self, batch, *a, **kw)

        OTLPSpanExporter.export = export
    os.environ["TRACELOOP_BASE_URL"] = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    # Spans only: no metrics endpoint on the receiver, no usage pings.
    os.environ["TRACELOOP_METRICS_ENABLED"] = "false"
    os.environ["TRACELOOP_TELEMETRY"] = "false"
    from openai import OpenAI
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import workflow

    Traceloop.init(app_name="weather-agent", telemetry_enabled=False)
    client = OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]

    @workflow(name="weather")
    def run():
        messages = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"},
        ]
        m = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        m = m.choices[0].message
        call = m.tool_calls[0]
        messages.append(m.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "18C sunny"})
        first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        first = first.choices[0].message.content
        messages.append({"role": "assistant", "content": first})
        messages.append({"role": "user", "content": "And tomorrow?"})
        second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        return [first, second.choices[0].message.content]

    from opentelemetry import trace

    answers = run()
    trace.get_tracer_provider().force_flush()
    trace.get_tracer_provider().shutdown()
    print(json.dumps({"answers": answers}))
    sys.exit(0)

from opentelemetry import _logs, trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk._logs import LoggerProvider  # noqa: E402
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402


def captured(exporter, signal):
    """Also writes every batch the exporter sends, encoded as it sends it
    (OTLP protobuf), for fixtures."""
    if not capture:
        return exporter
    if signal == "traces":
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode
    else:
        from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs as encode
    original = exporter.export
    count = [0]

    def export(batch, *a, **kw):
        count[0] += 1
        with open(os.path.join(capture, f"{mode}-{signal}-{count[0]}.pb"), "wb") as f:
            f.write(encode(batch).SerializeToString())
        return original(batch, *a, **kw)

    exporter.export = export
    return exporter


tp = TracerProvider()
tp.add_span_processor(BatchSpanProcessor(captured(OTLPSpanExporter(), "traces")))
trace.set_tracer_provider(tp)
lp = LoggerProvider()
lp.add_log_record_processor(BatchLogRecordProcessor(captured(OTLPLogExporter(), "logs")))
_logs.set_logger_provider(lp)
try:
    from opentelemetry._events import set_event_logger_provider
    from opentelemetry.sdk._events import EventLoggerProvider

    set_event_logger_provider(EventLoggerProvider(lp))
except ImportError:
    pass

if mode.startswith("openai-v2"):
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
elif mode == "openinference":
    from openinference.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
elif mode == "openllmetry":
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
elif mode in ("openai-agents", "openai-agents-handoff"):
    import agents
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # No export to OpenAI's tracing backend: only the OTLP exporter above.
    agents.set_trace_processors([])
    OpenAIAgentsInstrumentor().instrument(tracer_provider=tp)
else:
    sys.exit(f"unknown mode {mode}")

if mode == "openai-agents":
    import asyncio

    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from agents import trace as agents_trace
    from openai import AsyncOpenAI

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "18C sunny"

    agent = Agent(
        name="weather-agent",
        instructions="You are terse.",
        tools=[get_weather],
        model=OpenAIChatCompletionsModel(
            model="gpt-4o", openai_client=AsyncOpenAI(base_url=base_url, api_key="sk-test")
        ),
    )

    async def run():
        with agents_trace("weather"):
            first = await Runner.run(agent, "Weather in Paris?")
            await Runner.run(
                agent, first.to_input_list() + [{"role": "user", "content": "And tomorrow?"}]
            )

    asyncio.run(run())
    tp.force_flush()
    lp.force_flush()
    tp.shutdown()
    lp.shutdown()
    sys.exit(0)

if mode == "openai-agents-handoff":
    import asyncio

    from agents import Agent, OpenAIChatCompletionsModel, Runner
    from openai import AsyncOpenAI

    model = OpenAIChatCompletionsModel(
        model="gpt-4o", openai_client=AsyncOpenAI(base_url=base_url, api_key="sk-test")
    )
    weather = Agent(name="weather", instructions="You know the weather.", model=model)
    triage = Agent(
        name="triage", instructions="Send weather questions on.", model=model, handoffs=[weather]
    )

    async def run_handoff() -> dict:
        # Each run its own trace, as a script makes them.
        first = await Runner.run(triage, "Weather in Paris?")
        follow = [*first.to_input_list(), {"role": "user", "content": "And tomorrow?"}]
        second = await Runner.run(first.last_agent, follow)
        return {
            "agents": [first.last_agent.name, second.last_agent.name],
            "answers": [first.final_output, second.final_output],
        }

    out = asyncio.run(run_handoff())
    tp.force_flush()
    lp.force_flush()
    tp.shutdown()
    lp.shutdown()
    print(json.dumps(out))
    sys.exit(0)

from openai import APIStatusError, OpenAI  # noqa: E402

client = OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
answers = []


def create(**kw):
    """One call; its answer message (a stream assembled), also noted."""
    if not stream:
        msg = client.chat.completions.create(**kw).choices[0].message
    else:
        text, calls = "", {}
        for chunk in client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kw
        ):
            for c in chunk.choices:
                text += c.delta.content or ""
                for t in c.delta.tool_calls or []:
                    slot = calls.setdefault(t.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] += t.id or ""
                    slot["name"] += (t.function and t.function.name) or ""
                    slot["arguments"] += (t.function and t.function.arguments) or ""
        from openai.types.chat import ChatCompletionMessage

        msg = ChatCompletionMessage.model_validate(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls.values()
                ]
                or None,
            }
        )
    answers.append(
        {
            "content": msg.content,
            "tool_calls": [
                [t.function.name, json.loads(t.function.arguments)] for t in msg.tool_calls or []
            ],
        }
    )
    return msg


tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
messages = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
]
tracer = trace.get_tracer("weather-agent")
each = os.environ.get("CONVO_EMIT_TRACES") == "each"
with contextlib.nullcontext() if each else tracer.start_as_current_span("invoke_agent weather"):
    trace_id = (
        None if each else format(trace.get_current_span().get_span_context().trace_id, "032x")
    )
    try:
        m = create(model="gpt-4o", messages=messages, tools=tools)
        call = m.tool_calls[0]
        messages.append(m.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "18C sunny"})
        m = create(model="gpt-4o", messages=messages, tools=tools)
        messages.append({"role": "assistant", "content": m.content})
        messages.append({"role": "user", "content": "And tomorrow?"})
        create(model="gpt-4o", messages=messages, tools=tools)
    except APIStatusError as e:
        answers.append({"error": e.status_code, "code": (e.body or {}).get("code")})

tp.force_flush()
lp.force_flush()
tp.shutdown()
lp.shutdown()
print(json.dumps({"trace_id": trace_id, "answers": answers}))
