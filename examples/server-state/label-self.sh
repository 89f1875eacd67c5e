#!/bin/sh
# label-self.sh STATE: a game server labels its own pod with
#   gamedeployment.tkex.tencent.com/server-state=STATE
# (Idle, Allocated, WaitToBeDeleted, Draining, Maintaining), using its ServiceAccount token and nothing but curl.
#
# Inputs (the defaults are what a pod sees; each can be overridden, e.g. by a test):
#   TOKEN_FILE      the token       (default /var/run/secrets/kubernetes.io/serviceaccount/token)
#   NAMESPACE_FILE  the namespace   (default /var/run/secrets/kubernetes.io/serviceaccount/namespace)
#   CA_FILE         the API server's CA (default /var/run/secrets/kubernetes.io/serviceaccount/ca.crt)
#   POD_NAME        this pod's name (set it with the downward API, see below; required)
#   APISERVER       the API server's URL (default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)
#
# The pod spec that feeds it:
#
#   spec:
#     serviceAccountName: game-server
#     containers:
#       - name: server
#         env:
#           - name: POD_NAME
#             valueFrom:
#               fieldRef:
#                 fieldPath: metadata.name
#
# Exit status: 0 when the label is set; 1 with the API server's message on stderr when it refuses (401, 403, 404,
# 422, ...); 2 on a usage error.
set -eu

KEY=gamedeployment.tkex.tencent.com/server-state
SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount
TOKEN_FILE=${TOKEN_FILE:-$SA_DIR/token}
NAMESPACE_FILE=${NAMESPACE_FILE:-$SA_DIR/namespace}
CA_FILE=${CA_FILE:-$SA_DIR/ca.crt}

if [ $# -ne 1 ]; then
  echo "usage: $0 Idle|Allocated|WaitToBeDeleted|Draining|Maintaining" >&2
  exit 2
fi
STATE=$1
case $STATE in
  Idle|Allocated|WaitToBeDeleted|Draining|Maintaining) ;;
  *) echo "$0: unknown state '$STATE'" >&2; exit 2 ;;
esac
if [ -z "${POD_NAME:-}" ]; then
  echo "$0: POD_NAME is not set (give it metadata.name through the downward API)" >&2
  exit 2
fi
if [ -z "${APISERVER:-}" ]; then
  if [ -z "${KUBERNETES_SERVICE_HOST:-}" ]; then
    echo "$0: neither APISERVER nor KUBERNETES_SERVICE_HOST is set" >&2
    exit 2
  fi
  APISERVER=https://$KUBERNETES_SERVICE_HOST:${KUBERNETES_SERVICE_PORT:-443}
fi
NAMESPACE=$(cat "$NAMESPACE_FILE")
# Read the token at each call: a projected token is rotated by the kubelet.
TOKEN=$(cat "$TOKEN_FILE")

# A JSON merge patch of that one label: nothing else of the pod is sent, so nothing else can change.
BODY="{\"metadata\":{\"labels\":{\"$KEY\":\"$STATE\"}}}"
CA=
if [ -r "$CA_FILE" ]; then CA="--cacert $CA_FILE"; fi

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
# shellcheck disable=SC2086 # $CA is empty or two words
CODE=$(curl -sS $CA -o "$OUT" -w '%{http_code}' -X PATCH \
  -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/merge-patch+json' \
  -H 'Accept: application/json' \
  --data "$BODY" \
  "$APISERVER/api/v1/namespaces/$NAMESPACE/pods/$POD_NAME") || {
  echo "$0: cannot reach $APISERVER" >&2
  exit 1
}
case $CODE in
  2??) exit 0 ;;
esac
# The API server answers a refusal with a Status object: show its (first, top-level) message, or the body as is.
MESSAGE=$(sed -n 's/"message": *"/@@MESSAGE@@/; s/^.*@@MESSAGE@@\(\([^"\\]\|\\.\)*\)".*/\1/p' "$OUT" | head -n 1 | sed 's/\\"/"/g')
echo "$0: HTTP $CODE: ${MESSAGE:-$(cat "$OUT")}" >&2
exit 1
