// Preloaded with NODE_OPTIONS="--import .../log_fetch.mjs": wraps the global fetch (the
// MCP SDK's transport uses it) and logs on stderr, one line each, what the client sent
// and got: `mcp-http: POST initialize -> 200 ...`, with the MCP-Protocol-Version header
// sent and, for initialize, the protocolVersion the server answered. Never the token.
const inner = globalThis.fetch;

function header(init, input, name) {
  const h = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  return h.get(name);
}

globalThis.fetch = async (input, init) => {
  const method = init?.method ?? (input instanceof Request ? input.method : "GET");
  let rpc = "";
  if (typeof init?.body === "string") {
    try {
      const body = JSON.parse(init.body);
      rpc = Array.isArray(body) ? body.map((m) => m.method).join(",") : body.method ?? "";
    } catch {}
  }
  const sent = header(init, input, "mcp-protocol-version");
  const response = await inner(input, init);
  let negotiated = "";
  if (rpc === "initialize" && (response.headers.get("content-type") ?? "").includes("json")) {
    try {
      negotiated = ` negotiated=${(await response.clone().json()).result?.protocolVersion}`;
    } catch {}
  }
  console.error(
    `mcp-http: ${method} ${rpc || "-"} -> ${response.status} mcp-protocol-version=${sent ?? "(none)"}` +
      ` mcp-session-id=${response.headers.get("mcp-session-id") ?? "(none)"}${negotiated}`,
  );
  return response;
};
