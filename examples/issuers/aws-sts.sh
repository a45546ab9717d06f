#!/bin/sh
# Exec issuer: AWS STS session credentials limited by a session policy.
#
# Scopes are "ACTION RESOURCE", e.g. "s3:GetObject arn:aws:s3:::bench-artifacts/dev/*".
# The session policy allows exactly those; STS intersects it with the role's own policy.
# Needs: aws CLI v2, jq. Environment: AIRLOCK_AWS_ROLE_ARN (the role to assume).
set -eu
: "${AIRLOCK_AWS_ROLE_ARN:?set AIRLOCK_AWS_ROLE_ARN to the role sessions assume}"
req="$(cat)"
session="$(printf '%s' "$req" | jq -r .session)"
ttl="$(printf '%s' "$req" | jq -r '.ttl_seconds | if . < 900 then 900 else . end')"
policy="$(printf '%s' "$req" | jq -c '{
  Version: "2012-10-17",
  Statement: [.scopes[] | split(" ") | {Effect: "Allow", Action: .[0], Resource: (.[1] // "*")}]
}')"
out="$(aws sts assume-role \
	--role-arn "$AIRLOCK_AWS_ROLE_ARN" \
	--role-session-name "airlock-$session" \
	--duration-seconds "$ttl" \
	--policy "$policy" \
	--output json)"
printf '%s' "$out" | jq -c '{
  token: .Credentials.SessionToken,
  expires_at: .Credentials.Expiration,
  id: .AssumedRoleUser.AssumedRoleId,
  env: {
    AWS_ACCESS_KEY_ID: .Credentials.AccessKeyId,
    AWS_SECRET_ACCESS_KEY: .Credentials.SecretAccessKey,
    AWS_SESSION_TOKEN: .Credentials.SessionToken
  }
}'
