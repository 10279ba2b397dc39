#!/bin/sh
# Certificates for deploy/compose/compose.yaml: a CA, one node certificate per
# container (n1..n3, with its DNS name), a client certificate (ops) for the CLI and
# curl, and the gossip key in .env. Uses bin/keel (or $KEEL). Run from anywhere.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
keel=${KEEL:-$here/../../bin/keel}
mkdir -p "$here/tls"
cd "$here/tls"
"$keel" tls ca create
for i in 1 2 3; do "$keel" tls cert create -node "n$i" -dns "n$i"; done
"$keel" tls cert create -client ops
echo "KEEL_GOSSIP_KEY=$("$keel" tls gossip-key)" > "$here/.env"
chmod 0600 "$here/.env"
# The containers run as user 65532: the node keys must be readable by it.
if chown 65532:65532 n1-key.pem n2-key.pem n3-key.pem 2>/dev/null; then
  chmod 0755 .
else
  echo "certs.sh: not root, so the node keys are made world-readable for the containers (an example only)" >&2
  chmod 0755 . && chmod 0644 n1-key.pem n2-key.pem n3-key.pem
fi
echo "deploy/compose/tls and .env written; the CA key keel-ca-key.pem stays here: keep it offline"
