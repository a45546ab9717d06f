#!/bin/sh
# Exec issuer: a GitHub App installation token limited to named repositories and
# permissions.
#
# Scopes are "PERMISSION:LEVEL repo=NAME", e.g. "contents:write repo=app" or
# "pull_requests:write repo=app". The token covers the union of the repositories and
# permissions named, and expires after one hour at most (GitHub's limit).
# Needs: openssl, curl, jq. Environment: AIRLOCK_GH_APP_ID, AIRLOCK_GH_INSTALLATION_ID,
# AIRLOCK_GH_KEY (path to the App's private key, PEM), optionally AIRLOCK_GH_API.
set -eu
: "${AIRLOCK_GH_APP_ID:?}" "${AIRLOCK_GH_INSTALLATION_ID:?}" "${AIRLOCK_GH_KEY:?}"
api="${AIRLOCK_GH_API:-https://api.github.com}"
req="$(cat)"
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
now="$(date +%s)"
header="$(printf '{"alg":"RS256","typ":"JWT"}' | b64url)"
claims="$(printf '{"iat":%d,"exp":%d,"iss":"%s"}' "$((now - 30))" "$((now + 540))" "$AIRLOCK_GH_APP_ID" | b64url)"
sig="$(printf '%s.%s' "$header" "$claims" | openssl dgst -sha256 -sign "$AIRLOCK_GH_KEY" | b64url)"
body="$(printf '%s' "$req" | jq -c '{
  repositories: [.scopes[] | capture("repo=(?<r>[^ ]+)").r] | unique,
  permissions: ([.scopes[] | split(" ")[0] | split(":") | {(.[0]): .[1]}] | add)
}')"
curl -fsS -X POST \
	-H "Authorization: Bearer $header.$claims.$sig" \
	-H "Accept: application/vnd.github+json" \
	-d "$body" \
	"$api/app/installations/$AIRLOCK_GH_INSTALLATION_ID/access_tokens" |
	jq -c '{token: .token, expires_at: .expires_at}'
