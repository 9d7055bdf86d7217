"""HARNESS STUB, not Vivarium: an OAuth-protected MCP resource server made with the MCP
Python SDK's own server side, to check the test AS (as.mjs) and the driver
(../oauth_client.py) against each other without vivarium-mcp.

    python stub_rs.py --issuer http://127.0.0.1:ASPORT [--port 0] [--scopes "a b c"]

(--scopes: required of every token and advertised as scopes_supported; default
"vivarium:run vivarium:sessions vivarium:packages".)

Serves Streamable HTTP at http://127.0.0.1:PORT/mcp with the SDK's bearer middleware (401
with `WWW-Authenticate: Bearer ... resource_metadata=...`) and RFC 9728 metadata at
/.well-known/oauth-protected-resource/mcp naming the issuer. Its TokenVerifier checks the
JWT itself: signature against the issuer's JWKS (from its discovery document), `typ`
at+jwt, `iss`, `aud` = this resource, `exp`, and the required scopes. Its one tool,
`run_python`, runs nothing: it answers a fixed "42\\n" for `print(6*7)` and an error
otherwise. Prints `READY http://127.0.0.1:PORT/mcp` once listening; exits on SIGTERM or
stdin EOF (unless --no-stdin-watch).
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import warnings

import anyio
import httpx2
import jwt
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

log = logging.getLogger("stub_rs")


class StubRun(BaseModel):
    exit_code: int
    stdout: str
    stub: bool


class JwksTokenVerifier:
    def __init__(self, issuer: str, resource: str, required_scopes: list[str]) -> None:
        self.issuer = issuer
        self.resource = resource
        self.required = set(required_scopes)
        self.jwks: jwt.PyJWKSet | None = None

    async def keys(self) -> jwt.PyJWKSet:
        if self.jwks is None:
            async with httpx2.AsyncClient(timeout=10) as http:
                meta = (await http.get(f"{self.issuer}/.well-known/openid-configuration")).raise_for_status().json()
                if meta["issuer"] != self.issuer:
                    raise ValueError(f"issuer mismatch in discovery: {meta['issuer']}")
                self.jwks = jwt.PyJWKSet.from_dict((await http.get(meta["jwks_uri"])).raise_for_status().json())
        return self.jwks

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            header = jwt.get_unverified_header(token)
            if header.get("typ", "").lower() not in ("at+jwt", "application/at+jwt"):
                raise jwt.InvalidTokenError(f"typ {header.get('typ')!r} is not at+jwt")
            keys = await self.keys()
            key = next((k for k in keys.keys if k.key_id == header.get("kid")), None)
            if key is None:
                raise jwt.InvalidTokenError(f"no key {header.get('kid')!r} in the JWKS")
            claims = jwt.decode(
                token,
                key=key,
                algorithms=["RS256", "ES256"],
                audience=self.resource,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.InvalidTokenError, httpx2.HTTPError, ValueError, KeyError) as exc:
            log.warning("token rejected: %s", exc)
            return None
        scopes = claims.get("scope", "").split()
        if not self.required.issubset(scopes):
            # The SDK's middleware answers 403 insufficient_scope for these.
            log.warning("token lacks scopes %s", sorted(self.required - set(scopes)))
        log.info("token accepted: sub=%s client_id=%s scope=%s", claims["sub"], claims.get("client_id"), scopes)
        return AccessToken(
            token=token,
            client_id=claims.get("client_id", ""),
            scopes=scopes,
            expires_at=claims["exp"],
            resource=self.resource,
            subject=claims["sub"],
            claims={"iss": claims["iss"]},
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--scopes", default="vivarium:run vivarium:sessions vivarium:packages")
    parser.add_argument("--no-stdin-watch", action="store_true", help="do not exit on stdin EOF")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="stub_rs: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(64)
    port = sock.getsockname()[1]
    resource = f"http://127.0.0.1:{port}/mcp"
    # Required of every token, and what its resource metadata advertises (the SDK's
    # metadata route publishes required_scopes as scopes_supported).
    required = args.scopes.split()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auth = AuthSettings(
            issuer_url=args.issuer,
            resource_server_url=resource,
            required_scopes=required,
            validate_token_resource=True,
        )
    server = MCPServer(
        "vivarium-oauth-stub",
        token_verifier=JwksTokenVerifier(args.issuer, resource, required),
        auth=auth,
    )

    @server.tool(name="run_python", description="HARNESS STUB: pretends to run Python")
    def run_python(code: str) -> StubRun:
        if code.strip() != "print(6*7)":
            raise ValueError("stub_rs only 'runs' print(6*7)")
        return StubRun(exit_code=0, stdout="42\n", stub=True)

    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:

            async def watch_stdin() -> None:
                await anyio.to_thread.run_sync(sys.stdin.buffer.read)
                log.info("exiting (stdin EOF)")
                uv.should_exit = True

            if not args.no_stdin_watch:
                tg.start_soon(watch_stdin)
            async def announce() -> None:
                while not uv.started:
                    await anyio.sleep(0.02)
                print(f"READY {resource}", flush=True)

            tg.start_soon(announce)
            await uv.serve(sockets=[sock])
            tg.cancel_scope.cancel()

    anyio.run(serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
