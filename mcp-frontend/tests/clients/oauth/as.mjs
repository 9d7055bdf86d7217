// Test-only OAuth 2.1 authorization server for vivarium-mcp's HTTP auth tests: oidc-provider
// (panva's OpenID-certified implementation) on a loopback port, with
//   - authorization code + PKCE (S256; required for every client),
//   - dynamic client registration (RFC 7591, open: no initial access token),
//   - resource indicators (RFC 8707, `resource` required): access tokens are JWTs (RFC 9068,
//     `typ: at+jwt`) with `aud` = the resource, `iss` = the issuer, `sub`, `exp`, `scope`,
//     `client_id`, `jti`, signed RS256 (or ES256 with --alg ES256) by a key in /jwks,
//   - OIDC discovery at /.well-known/openid-configuration, also served at the RFC 8414
//     path /.well-known/oauth-authorization-server (same document),
//   - oidc-provider's devInteractions: an HTML login form that accepts any login and
//     password (the login becomes `sub`), then a consent form. A client drives both by
//     posting the forms (see ../oauth_client.py).
// Everything is in memory and the signing keys are made at start: nothing survives a restart.
//
// Usage: node as.mjs [--port 0] [--resource URL]... [--scopes "a b c"] [--alg RS256|ES256]
//                    [--token-ttl SECONDS] [--no-stdin-watch]
// Prints `READY <issuer>` on stdout once listening (issuer http://127.0.0.1:PORT), logs to
// stderr, and exits on SIGTERM/SIGINT or when its stdin reaches EOF (so a test that holds
// the pipe cannot leak it; pass --no-stdin-watch to run it with stdin at /dev/null).
// Without --resource any loopback http(s) URL is accepted as a resource (so a test can
// start the AS before it knows the resource server's port); with it, only those URLs.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const DEFAULT_SCOPES = 'vivarium:run vivarium:sessions vivarium:packages';

function fail(message) {
  process.stderr.write(`as.mjs: ${message}\n`);
  process.exit(2);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      resource: { type: 'string', multiple: true, default: [] },
      scopes: { type: 'string', default: DEFAULT_SCOPES },
      alg: { type: 'string', default: 'RS256' },
      'token-ttl': { type: 'string', default: '3600' },
      'no-stdin-watch': { type: 'boolean', default: false },
    },
    strict: true,
  }));
} catch (err) {
  fail(err.message);
}

const port = Number(args.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`bad --port ${args.port}`);
const scopes = args.scopes.split(/[\s,]+/).filter(Boolean);
if (scopes.length === 0) fail('--scopes is empty');
if (!['RS256', 'ES256'].includes(args.alg)) fail(`--alg must be RS256 or ES256, not ${args.alg}`);
const tokenTtl = Number(args['token-ttl']);
if (!Number.isInteger(tokenTtl) || tokenTtl < 1) fail(`bad --token-ttl ${args['token-ttl']}`);

function isLoopbackUrl(value) {
  let url;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  return (url.protocol === 'http:' || url.protocol === 'https:') && !url.hash
    && ['127.0.0.1', '[::1]', 'localhost'].includes(url.hostname);
}
for (const r of args.resource) {
  if (!isLoopbackUrl(r)) fail(`--resource ${r} is not a loopback http(s) URL without a fragment`);
}
const resources = new Set(args.resource);

// Signing keys, made fresh: an RSA key (ID tokens are RS256 by default, and RS256 access
// tokens) and a P-256 key (ES256 access tokens). Both are published at /jwks.
function jwk(type, options, alg) {
  const { privateKey } = generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), alg, use: 'sig', kid: `${alg.toLowerCase()}-${randomBytes(6).toString('hex')}` };
}
const keys = [
  jwk('rsa', { modulusLength: 2048 }, 'RS256'),
  jwk('ec', { namedCurve: 'P-256' }, 'ES256'),
];

// The listener comes first: the issuer names its port.
const server = createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(port, '127.0.0.1', resolve);
}).catch((err) => fail(`listen on 127.0.0.1:${port}: ${err.message}`));
const issuer = `http://127.0.0.1:${server.address().port}`;

const configuration = {
  jwks: { keys },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  // No pre-registered clients: clients register dynamically.
  clients: [],
  // The scopes a client may register with (RFC 7591 `scope`, checked against this list):
  // the resource server's scopes are here too, as the MCP SDK registers with the scopes it
  // is about to ask for. Which of them an access token for a resource carries comes from
  // getResourceServerInfo below. offline_access enables refresh tokens (the MCP SDK's
  // clients register for the refresh_token grant, and ask for offline_access when it is
  // listed in scopes_supported).
  scopes: ['openid', 'offline_access', ...scopes],
  claims: { openid: ['sub'] },
  async findAccount(_ctx, sub) {
    return { accountId: sub, async claims() { return { sub }; } };
  },
  pkce: { required: () => true },
  responseTypes: ['code'],
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // No default resource: an authorization request must name its resource (RFC 8707),
      // as MCP clients do; one without is refused with invalid_target (otherwise it
      // would get an opaque token for userinfo, carrying the scopes it asked for).
      defaultResource(_ctx, _client, oneOf) {
        if (oneOf) return oneOf;
        throw new errors.InvalidTarget('a resource parameter is required');
      },
      // The token request may omit `resource`: the one granted at authorization is used.
      useGrantedResource: () => true,
      getResourceServerInfo(_ctx, indicator) {
        const known = resources.size ? resources.has(indicator) : isLoopbackUrl(indicator);
        if (!known) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
        return {
          scope: scopes.join(' '),
          audience: indicator,
          accessTokenTTL: tokenTtl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: args.alg } },
        };
      },
    },
  },
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? tokenTtl,
    AuthorizationCode: 60,
    Grant: 3600,
    Interaction: 600,
    Session: 3600,
    IdToken: 3600,
  },
  // Print the cause of a rejected request on stderr (it helps when a client misbehaves).
  renderError(ctx, out, error) {
    process.stderr.write(`as.mjs: error page: ${JSON.stringify(out)}${error?.stack ? `\n${error.stack}` : ''}\n`);
    ctx.type = 'json';
    ctx.body = out;
  },
};

const provider = new Provider(issuer, configuration);

provider.on('server_error', (_ctx, err) => process.stderr.write(`as.mjs: server_error: ${err.stack}\n`));
for (const event of ['authorization.error', 'grant.error', 'registration_create.error', 'introspection.error']) {
  provider.on(event, (_ctx, err) => process.stderr.write(`as.mjs: ${event}: ${err.name}: ${err.message} ${err.error_description ?? ''}\n`));
}

// RFC 8414 path: the same document as OIDC discovery.
provider.use(async (ctx, next) => {
  if (ctx.path === '/.well-known/oauth-authorization-server') ctx.path = '/.well-known/openid-configuration';
  await next();
});

server.on('request', provider.callback());

function shutdown(why) {
  process.stderr.write(`as.mjs: exiting (${why})\n`);
  server.close();
  server.closeAllConnections();
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
if (!args['no-stdin-watch']) {
  process.stdin.on('end', () => shutdown('stdin EOF'));
  process.stdin.on('error', () => shutdown('stdin error'));
  process.stdin.resume();
}

process.stdout.write(`READY ${issuer}\n`);
