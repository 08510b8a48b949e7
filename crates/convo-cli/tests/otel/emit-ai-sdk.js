// The Vercel AI SDK exporting its telemetry to a live `convo serve`.
//
// Usage: NODE_PATH=… node emit-ai-sdk.js MODE [CAPTURE_DIR]
//
// MODE picks the AI SDK's OpenTelemetry integration (`@ai-sdk/otel`,
// registered with `registerTelemetry`, per-call options in
// `experimental_telemetry`):
//   otel    `OpenTelemetry`: GenAI semconv attributes on the spans
//   legacy  `LegacyOpenTelemetry`: the `ai.*` attributes
// The spans go through the OpenTelemetry JS SDK's OTLP/HTTP exporter
// (`@opentelemetry/exporter-trace-otlp-http`, OTLP/JSON), configured only
// by OTEL_EXPORTER_OTLP_ENDPOINT. The model is a scripted chat-completions
// upstream in this process: a tool call, then answers. The agent: a
// question, a tool call and its result, an answer (one `generateText` of
// two steps), a follow-up question and its answer, under one app span
// (one trace: the AsyncLocalStorage context manager). With CAPTURE_DIR, each
// export is also written there (the OTLP/JSON body, for fixtures).
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');

const mode = process.argv[2];
const capture = process.argv[3];

function answer(body) {
  const last = body.messages[body.messages.length - 1];
  let msg;
  let finish = 'stop';
  if (last.role === 'tool') {
    msg = { role: 'assistant', content: 'It is 18C and sunny in Paris.' };
  } else if (JSON.stringify(last.content).includes('And tomorrow?')) {
    msg = { role: 'assistant', content: 'Tomorrow: rain.' };
  } else {
    msg = {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
    };
    finish = 'tool_calls';
  }
  return { id: 'chatcmpl-1', object: 'chat.completion', created: 1800000000,
    model: 'gpt-4o-2024-08-06', choices: [{ index: 0, message: msg, finish_reason: finish }],
    usage: { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27 } };
}

const upstream = http.createServer((req, res) => {
  let data = '';
  req.on('data', (c) => { data += c; });
  req.on('end', () => {
    const out = JSON.stringify(answer(JSON.parse(data)));
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(out);
  });
});

const { trace } = require('@opentelemetry/api');
const { BasicTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { JsonTraceSerializer } = require('@opentelemetry/otlp-transformer');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { context } = require('@opentelemetry/api');

const exporter = new OTLPTraceExporter();
if (capture) {
  const original = exporter.export.bind(exporter);
  let n = 0;
  exporter.export = (spans, done) => {
    n += 1;
    fs.writeFileSync(path.join(capture, `ai-sdk-${mode}-traces-${n}.json`),
      Buffer.from(JsonTraceSerializer.serializeRequest(spans)));
    original(spans, done);
  };
}
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'weather-agent' }),
  spanProcessors: [new BatchSpanProcessor(exporter)],
});
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const { generateText, tool, stepCountIs, registerTelemetry } = require('ai');
const otel = require('@ai-sdk/otel');
const { createOpenAI } = require('@ai-sdk/openai');
const { z } = require('zod');

if (mode === 'otel') {
  registerTelemetry(new otel.OpenTelemetry());
} else if (mode === 'legacy') {
  registerTelemetry(new otel.LegacyOpenTelemetry());
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}

upstream.listen(0, '127.0.0.1', async () => {
  try {
    const openai = createOpenAI({
      baseURL: `http://127.0.0.1:${upstream.address().port}/v1`, apiKey: 'sk-test' });
    const common = {
      model: openai.chat('gpt-4o'),
      maxRetries: 0,
      system: 'You are terse.',
      tools: { get_weather: tool({ description: 'The weather in a city.',
        inputSchema: z.object({ city: z.string() }), execute: async () => '18C sunny' }) },
      stopWhen: stepCountIs(3),
      experimental_telemetry: { functionId: 'weather-agent' },
    };
    // One conversation, one trace: both calls under the app's own span.
    const tracer = trace.getTracer('weather-agent');
    const [first, second] = await tracer.startActiveSpan('weather', async (span) => {
      const a = await generateText({ ...common, prompt: 'Weather in Paris?' });
      const b = await generateText({ ...common, messages: [
        { role: 'user', content: 'Weather in Paris?' },
        ...a.responseMessages,
        { role: 'user', content: 'And tomorrow?' },
      ] });
      span.end();
      return [a, b];
    });
    await provider.forceFlush();
    await provider.shutdown();
    console.log(JSON.stringify({ answers: [first.text, second.text] }));
    upstream.close();
  } catch (e) {
    console.error(e);
    process.exit(1);
  }
});
