#!/usr/bin/env bash
# Installs what the test suite needs from Debian's packages when it is missing: nats-server
# (events tests), the PostgreSQL server binaries (the Postgres half of every database test) and
# litecoind (the litecoin chain's tests run the real Litecoin Core; chains/litecoin/profile.yaml
# pins the build Debian bookworm ships, 0.21.2.1), openssl, and openssh-server with iproute2 (the
# host fleet's tests run a real sshd per Linux network namespace, test/helpers/netns.ts).
# Needs root for apt-get; otherwise says what to install.
set -euo pipefail

missing=()
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ] && [ -z "${TEST_NATS_URL:-}" ]; then
  missing+=(nats-server)
fi
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && [ -z "${TEST_DATABASE_URL:-}" ] && [ -z "${PG_BIN_DIR:-}" ]; then
  missing+=(postgresql)
fi
if [ ! -x /usr/lib/litecoin/litecoind ]; then
  missing+=(litecoind)
fi
# The development PKI's test issues from an RSA CA made by the openssl tool (a data directory's
# CA from before the PKI used ECDSA).
if ! command -v openssl >/dev/null 2>&1; then
  missing+=(openssl)
fi
# The host fleet's tests: `ip netns` and a veth pair per test host, Debian's sshd in each.
if [ ! -x /usr/sbin/sshd ]; then
  missing+=(openssh-server)
fi
if ! command -v ip >/dev/null 2>&1 && [ ! -x /usr/sbin/ip ] && [ ! -x /sbin/ip ]; then
  missing+=(iproute2)
fi
# systemd readiness (test/e2e/daemon-readiness.test.ts): the daemons send READY=1 through
# systemd-notify; the test listens on the unix datagram socket with python3 (Node.js has none).
if ! command -v systemd-notify >/dev/null 2>&1; then
  missing+=(systemd)
fi
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "The test suite needs: ${missing[*]}. Install them (Debian: sudo apt-get install -y ${missing[*]}), or set TEST_DATABASE_URL / TEST_NATS_URL to servers of your own." >&2
  exit 1
fi
echo "Installing ${missing[*]} from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
