// An MCP client made with the official TypeScript SDK
// (@modelcontextprotocol/sdk), run by the Rust tests in test_mcp.rs; the
// same steps and output as mcp_client.py:
//
//   node mcp_client.mjs STEPS_JSON stdio CMD [ARGS...]
//   node mcp_client.mjs STEPS_JSON http URL
//
// Steps: list_tools, call_tool NAME ARGS, call_tool_progress NAME ARGS,
// list_resources, read_resource URI, list_prompts, get_prompt NAME ARGS,
// ping. Prints {server, results}; a step the server answered with an
// error gives {error, code}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";

const [stepsJson, kind, ...rest] = process.argv.slice(2);
const steps = JSON.parse(stepsJson);
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env })
    : new StreamableHTTPClientTransport(new URL(rest[0]));
const client = new Client({ name: "convo-test-ts", version: "1.0.0" });
await client.connect(transport);

const ops = {
  list_tools: () => client.listTools(),
  call_tool: (name, args) => client.callTool({ name, arguments: args }),
  call_tool_progress: (name, args) =>
    client.callTool({ name, arguments: args }, undefined, { onprogress: () => {} }),
  list_resources: () => client.listResources(),
  read_resource: (uri) => client.readResource({ uri }),
  list_prompts: () => client.listPrompts(),
  get_prompt: (name, args) => client.getPrompt({ name, arguments: args }),
  ping: () => client.ping(),
};
const results = [];
for (const [op, ...args] of steps) {
  try {
    results.push(await ops[op](...args));
  } catch (e) {
    if (!(e instanceof McpError)) throw e;
    results.push({ error: e.message, code: e.code });
  }
}
const server = client.getServerVersion()?.name;
await client.close();
console.log(JSON.stringify({ server, results }));
