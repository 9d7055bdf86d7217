#!/usr/bin/env bash
# By hand, no MCP: the whole authorization-code + PKCE flow against as.mjs with curl, then
# the access token's JOSE header and claims decoded, and the JWKS key members (public only).
# The resource needs no server behind it: the AS only names it in `aud`.
cd "$(dirname "$0")"
set -euo pipefail
J=$(mktemp)
node as.mjs --no-stdin-watch > "${TMPDIR:-/tmp}/as-curl.out" 2>"${TMPDIR:-/tmp}/as-curl.err" & ASPID=$!
trap 'kill $ASPID; rm -f "$J" "$J.tok"' EXIT
for _ in $(seq 100); do grep -q '^READY ' "${TMPDIR:-/tmp}/as-curl.out" && break; sleep 0.1; done
ISS=$(awk '/^READY /{print $2}' "${TMPDIR:-/tmp}/as-curl.out"); echo "issuer $ISS"
RES=http://127.0.0.1:8123/mcp; RURI=http://127.0.0.1:9/cb
CID=$(curl -s -XPOST $ISS/reg -H 'content-type: application/json' \
  -d "{\"redirect_uris\":[\"$RURI\"],\"application_type\":\"native\",\"token_endpoint_auth_method\":\"none\",\"grant_types\":[\"authorization_code\"]}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_id"])')
VER=$(python3 -c 'import secrets; print(secrets.token_urlsafe(48))')
CH=$(printf %s "$VER" | openssl dgst -sha256 -binary | basenc --base64url | tr -d '=')

# 1. authorize -> 303 to the login interaction
LOC=$(curl -s -c $J -b $J -o /dev/null -w '%{redirect_url}' -G $ISS/auth --data-urlencode client_id=$CID \
  --data-urlencode response_type=code --data-urlencode redirect_uri=$RURI --data-urlencode "scope=vivarium:run vivarium:sessions" \
  --data-urlencode resource=$RES --data-urlencode code_challenge=$CH --data-urlencode code_challenge_method=S256 --data-urlencode state=xyz)
# 2. login form (any login), 3. back through /auth to consent, 4. consent form
LOC=$(curl -s -c $J -b $J -o /dev/null -w '%{redirect_url}' -XPOST $LOC -d prompt=login -d login=bob -d password=x)
LOC=$(curl -s -c $J -b $J -o /dev/null -w '%{redirect_url}' $LOC)
LOC=$(curl -s -c $J -b $J -o /dev/null -w '%{redirect_url}' -XPOST $LOC -d prompt=consent)
LOC=$(curl -s -c $J -b $J -o /dev/null -w '%{redirect_url}' $LOC)
echo "redirect: $LOC"
CODE=$(python3 -c 'import sys,urllib.parse as u; print(u.parse_qs(u.urlparse(sys.argv[1]).query)["code"][0])' "$LOC")
# 5. token
curl -s $ISS/token -d grant_type=authorization_code -d code=$CODE -d redirect_uri=$RURI -d client_id=$CID -d code_verifier=$VER -d resource=$RES > "$J.tok"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k:v for k,v in d.items() if k!="access_token"})' "$J.tok"
AT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["access_token"])' "$J.tok")
for i in 1 2; do printf %s "$AT" | cut -d. -f$i | tr '_-' '/+' | base64 -d 2>/dev/null || true; echo; done
echo "kid in JWKS:"; curl -s $ISS/jwks | python3 -c 'import json,sys; print([sorted(k) for k in json.load(sys.stdin)["keys"]])'
