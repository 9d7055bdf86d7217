// The official MCP TypeScript SDK's client over Streamable HTTP, against vivarium-mcp
// --http (tests/tests/mcp_http_clients.rs): connect (initialize), tools/list, and one
// run_python call. Usage: node sdk_client.mjs URL  (the bearer token in MCP_TOKEN).
// Prints one JSON line on stdout: the negotiated revision, the tool names, the result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";

const url = process.argv[2];
const token = process.env.MCP_TOKEN;
if (!url || !token) {
  console.error("usage: MCP_TOKEN=... node sdk_client.mjs URL");
  process.exit(2);
}
// The package's exports do not include its package.json: read the installed file.
const sdkVersion = JSON.parse(
  readFileSync(
    new URL("node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url),
    "utf8",
  ),
).version;

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "vivarium-sdk-test", version: "0.0.0" });
transport.onerror = (e) => console.error(`transport error: ${e?.message ?? e}`);

try {
  await client.connect(transport);
  const tools = await client.listTools();
  const result = await client.callTool({
    name: "run_python",
    arguments: { code: "print(6*7)" },
  });
  console.log(
    JSON.stringify({
      sdk_version: sdkVersion,
      offered_protocol_version: LATEST_PROTOCOL_VERSION,
      negotiated_protocol_version: transport.protocolVersion,
      session_id: transport.sessionId ?? null,
      server: client.getServerVersion(),
      tools: tools.tools.map((t) => t.name),
      result,
    }),
  );
  await client.close();
} catch (e) {
  console.error(`sdk client failed: ${e?.stack ?? e}`);
  process.exit(1);
}
