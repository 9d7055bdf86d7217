"""Drive an OAuth-protected MCP server over Streamable HTTP with the official Python MCP SDK's
OAuth client (`mcp.client.auth.OAuthClientProvider`), headless, and call `run_python`.

    python oauth_client.py --url http://127.0.0.1:PORT/mcp [--scope "vivarium:run ..."]
        [--code 'print(6*7)'] [--login alice]

The SDK does the discovery: the 401 and its `WWW-Authenticate: Bearer resource_metadata=...`,
the RFC 9728 protected-resource metadata, the authorization server's metadata (RFC 8414,
then OIDC discovery), dynamic client registration (RFC 7591; a loopback http client cannot
use a Client ID Metadata Document, which the SDK only sends for an https URL), then the
authorization-code flow with PKCE and the RFC 8707 `resource` parameter. This script is the
"browser": its redirect handler fetches the authorization URL and submits the login and
consent forms the authorization server shows (any HTML form: hidden inputs are kept, text
and password inputs are filled with --login / a dummy password) until the server redirects
to the client's redirect URI, whose code/state/iss it hands to the callback handler. No
listener is opened on the redirect URI: the redirect is caught before it is followed.

Prints one JSON line on stdout:
    {"ok": true, "result": {structuredContent, text, isError}, "steps": {...}, "requests": [...],
     "token": {"header": ..., "claims": ...}}
`steps` names the URLs of the 401, the resource-metadata, AS-metadata, registration,
authorization and token requests as the SDK's HTTP client sent them (an httpx event hook);
`token` is the access token's decoded JOSE header and claims (not verified here);
`authorize_request` and `token_request` are the parameters the SDK sent (less the state,
code, PKCE challenge and verifier), e.g. the RFC 8707 `resource`.
Exit 0 on success; on failure 1 with {"ok": false, "error": ...} on stdout and the cause on
stderr.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import traceback
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlparse

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, oauth2
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

# Never listened on: the redirect handler stops at this URL (loopback, so a native client's
# redirect URI is acceptable to the authorization server without a custom scheme).
REDIRECT_URI = "http://127.0.0.1:9/oauth/callback"
MAX_BROWSER_STEPS = 12


class MemoryStorage:
    """TokenStorage in memory: every run registers afresh."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class FormParser(HTMLParser):
    """The forms of a page: action, method and inputs (name, type, value)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "method": a.get("method", "get").lower(), "inputs": []})
        elif tag in ("input", "button") and self.forms and a.get("name"):
            self.forms[-1]["inputs"].append((a["name"], a.get("type", "text").lower(), a.get("value", "")))


class HeadlessBrowser:
    """Plays the user agent: follows the authorization server's redirects and submits its
    login and consent forms until it is sent to the redirect URI."""

    def __init__(self, login: str, log: list[str]) -> None:
        self.login = login
        self.log = log
        self.send, self.receive = anyio.create_memory_object_stream[AuthorizationCodeResult](1)
        self.authorize_params: dict[str, str] = {}

    def fill(self, form: dict) -> dict[str, str]:
        data: dict[str, str] = {}
        for name, kind, value in form["inputs"]:
            if kind in ("submit", "button", "image", "reset"):
                continue
            if kind == "password":
                data[name] = "any-password"
            elif kind in ("text", "email") and not value:
                data[name] = self.login
            else:
                data[name] = value
        return data

    async def redirect_handler(self, authorization_url: str) -> None:
        self.log.append(f"authorize {authorization_url.split('?')[0]}")
        query = parse_qs(urlparse(authorization_url).query)
        self.authorize_params = {k: v[0] for k, v in query.items() if k not in ("state", "code_challenge")}
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as ua:
            request = ua.build_request("GET", authorization_url)
            for _ in range(MAX_BROWSER_STEPS):
                response = await ua.send(request)
                self.log.append(f"{request.method} {request.url.copy_with(query=None)} -> {response.status_code}")
                if response.is_redirect:
                    location = urljoin(str(request.url), response.headers["location"])
                    if location.split("?")[0] == REDIRECT_URI:
                        query = parse_qs(urlparse(location).query)
                        one = lambda k: query.get(k, [None])[0]  # noqa: E731
                        if one("error"):
                            raise RuntimeError(f"authorization failed: {one('error')}: {one('error_description')}")
                        if not one("code"):
                            raise RuntimeError(f"redirect without a code: {location}")
                        await self.send.send(AuthorizationCodeResult(code=one("code"), state=one("state"), iss=one("iss")))
                        return
                    request = ua.build_request("GET", location)
                    continue
                if response.status_code != 200:
                    raise RuntimeError(f"authorization server answered {response.status_code}: {response.text[:500]}")
                parser = FormParser()
                parser.feed(response.text)
                # Submit the first form that is not an "abort"/"cancel" link.
                forms = [f for f in parser.forms if "abort" not in f["action"]]
                if not forms:
                    raise RuntimeError(f"no form on the authorization server's page: {response.text[:500]}")
                form = forms[0]
                action = urljoin(str(request.url), form["action"] or str(request.url))
                data = self.fill(form)
                self.log.append(f"form {form['method'].upper()} {action} fields={sorted(data)}")
                if form["method"] == "post":
                    request = ua.build_request("POST", action, data=data)
                else:
                    request = ua.build_request("GET", action, params=data)
            raise RuntimeError(f"no redirect to the client after {MAX_BROWSER_STEPS} steps")

    async def callback_handler(self) -> AuthorizationCodeResult:
        return await self.receive.receive()


def classify(request: httpx2.Request, response: httpx2.Response, mcp_url: str) -> str | None:
    path = request.url.path
    if str(request.url.copy_with(query=None)) == mcp_url and response.status_code == 401:
        return "unauthorized"
    if "/.well-known/oauth-protected-resource" in path:
        return "resource_metadata"
    if "/.well-known/oauth-authorization-server" in path or "/.well-known/openid-configuration" in path:
        return "as_metadata"
    return None


def decode_jwt(token: str) -> dict:
    parts = token.split(".")
    if len(parts) != 3:
        return {"opaque": True}

    def part(s: str) -> dict:
        return json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))

    return {"header": part(parts[0]), "claims": part(parts[1])}


def summarize(out: dict, storage: MemoryStorage, provider: OAuthClientProvider, browser: HeadlessBrowser) -> None:
    """What the flow got as far as, for success and failure alike."""
    if storage.client_info is not None:
        out["client"] = {
            # The SDK registers dynamically unless the AS advertises Client ID Metadata
            # Documents and the client has an https metadata URL (not the case here).
            "registration": "dynamic (RFC 7591)" if "registration" in out["steps"] else "client ID metadata document",
            "client_id": storage.client_info.client_id,
            "token_endpoint_auth_method": storage.client_info.token_endpoint_auth_method,
        }
    if storage.tokens is not None:
        out["token"] = decode_jwt(storage.tokens.access_token)
        out["token"]["scope"] = storage.tokens.scope
        out["token"]["refresh_token"] = storage.tokens.refresh_token is not None
    if browser.authorize_params:
        out["authorize_request"] = browser.authorize_params
    if provider.context.oauth_metadata is not None:
        out["issuer"] = str(provider.context.oauth_metadata.issuer)
    if provider.context.protected_resource_metadata is not None:
        out["resource"] = str(provider.context.protected_resource_metadata.resource)
    last = next((r for r in reversed(out["requests"]) if r["url"] == out["url"]), None)
    if last is not None and last["status"] in (401, 403):
        out["last_mcp_response"] = last


async def run(args: argparse.Namespace, out: dict) -> None:
    requests: list[dict] = out["requests"]
    steps: dict[str, list[str]] = out["steps"]
    browser = HeadlessBrowser(args.login, out["browser"])
    storage = MemoryStorage()

    if args.scope is not None:
        # The SDK picks the scope itself (the 401's `scope`, else the resource metadata's
        # scopes_supported, else the AS's) and has no option to override it: replace its
        # selection so a test can ask for less (or more) than the server advertises.
        oauth2.get_client_metadata_scopes = lambda *_a, **_k: args.scope

    metadata = OAuthClientMetadata(
        client_name="vivarium oauth_client.py",
        redirect_uris=[REDIRECT_URI],
        # A public client: PKCE, no client secret.
        token_endpoint_auth_method="none",
        scope=args.scope,
    )
    provider = OAuthClientProvider(
        server_url=args.url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )

    async def on_response(response: httpx2.Response) -> None:
        request = response.request
        url = str(request.url.copy_with(query=None))
        entry = {"method": request.method, "url": url, "status": response.status_code}
        if response.status_code in (401, 403) and "www-authenticate" in response.headers:
            entry["www_authenticate"] = response.headers["www-authenticate"]
        requests.append(entry)
        kind = classify(request, response, args.url)
        if kind is None and request.method == "POST":
            if storage.client_info is None and provider.context.oauth_metadata is not None:
                reg = provider.context.oauth_metadata.registration_endpoint
                if reg is not None and url == str(reg):
                    kind = "registration"
            tok = provider.context.oauth_metadata.token_endpoint if provider.context.oauth_metadata else None
            if tok is not None and url == str(tok):
                kind = "token"
                form = parse_qs(request.content.decode())
                out["token_request"] = {k: v[0] for k, v in form.items() if k not in ("code", "code_verifier")}
        if kind is not None:
            steps.setdefault(kind, []).append(f"{request.method} {url} -> {response.status_code}")

    try:
        async with httpx2.AsyncClient(
            auth=provider,
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"response": [on_response]},
        ) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("run_python", {"code": args.code})
    finally:
        summarize(out, storage, provider, browser)
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    out["result"] = {
        "structuredContent": dumped.get("structuredContent"),
        "text": "\n".join(c.get("text", "") for c in dumped.get("content", []) if c.get("type") == "text"),
        "isError": dumped.get("isError", False),
    }
    missing = [s for s in ("unauthorized", "resource_metadata", "as_metadata", "token") if s not in steps]
    if missing:
        raise RuntimeError(f"the OAuth flow skipped {missing}")
    if out["result"]["isError"]:
        raise RuntimeError(f"run_python returned an error: {out['result']['text'][:500]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:PORT/mcp")
    parser.add_argument("--scope", default=None, help="scope to ask for instead of the one the SDK picks from the 401 / resource metadata")
    parser.add_argument("--code", default="print(6*7)")
    parser.add_argument("--login", default="alice", help="the login to type into the AS's form (becomes sub)")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()

    out: dict = {"ok": False, "url": args.url, "steps": {}, "requests": [], "browser": []}

    async def bounded() -> None:
        with anyio.fail_after(args.timeout):
            await run(args, out)

    try:
        anyio.run(bounded)
    except BaseException as exc:  # noqa: BLE001 - report anything, including exception groups
        traceback.print_exc(file=sys.stderr)
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        out["error"] = f"{type(leaf).__name__}: {leaf}"
        if "last_mcp_response" in out:
            last = out["last_mcp_response"]
            out["error"] += f" (the MCP endpoint last answered {last['status']}: {last.get('www_authenticate')})"
        print(f"oauth_client.py: {out['error']}", file=sys.stderr)
        print(json.dumps(out), flush=True)
        return 1
    out["ok"] = True
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
