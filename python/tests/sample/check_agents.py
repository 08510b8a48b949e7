"""A sample project's tests: each LLM call is recorded by convo once, then
replayed (`@pytest.mark.convo`)."""

from __future__ import annotations

import os

import anthropic
import openai
import pytest

CITY = os.environ.get("SAMPLE_CITY", "Paris")
PROMPT = f"Tell me about {CITY}"


@pytest.mark.convo
def test_openai_sync() -> None:
    client = openai.OpenAI()
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}])
    assert r.choices[0].message.content == f"You asked: {PROMPT}"
    if os.environ.get("SAMPLE_EXTRA"):
        again = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "And its museums?"}]
        )
        assert again.choices[0].message.content == "You asked: And its museums?"


@pytest.mark.convo
@pytest.mark.asyncio
async def test_openai_async_stream() -> None:
    client = openai.AsyncOpenAI()
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == f"You asked: {PROMPT}"


@pytest.mark.convo
def test_anthropic_sync() -> None:
    client = anthropic.Anthropic()
    m = client.messages.create(
        model="claude-x", max_tokens=50, messages=[{"role": "user", "content": PROMPT}]
    )
    assert m.content[0].text == f"You asked: {PROMPT}"  # type: ignore[union-attr]


@pytest.mark.convo
@pytest.mark.asyncio
async def test_anthropic_async_stream() -> None:
    client = anthropic.AsyncAnthropic()
    async with client.messages.stream(
        model="claude-x", max_tokens=50, messages=[{"role": "user", "content": PROMPT}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert text == f"You asked: {PROMPT}"


@pytest.mark.convo
def test_langchain() -> None:
    from langchain_openai import ChatOpenAI

    reply = ChatOpenAI(model="m").invoke(PROMPT)
    assert reply.content == f"You asked: {PROMPT}"


@pytest.mark.convo
def test_openai_agents() -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model="m", openai_client=openai.AsyncOpenAI())
    agent = Agent(name="guide", instructions="Be brief.", model=model)
    result = Runner.run_sync(agent, PROMPT)
    assert result.final_output == f"You asked: {PROMPT}"


def test_unmarked_tests_are_left_alone() -> None:
    assert "OPENAI_BASE_URL" not in os.environ or "/s/" not in os.environ["OPENAI_BASE_URL"]
