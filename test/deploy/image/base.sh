#!/usr/bin/env bash
# A local stand-in for the Dockerfile's base image, node:24-bookworm-slim,
# which this machine cannot pull: Debian bookworm (debootstrap minbase, from
# the machine's apt mirror) with this machine's node and npm, a `node` user
# (uid 1000) and the machine's CA bundle (NODE_EXTRA_CA_CERTS), so that npm
# and apt reach their registries through the machine's egress during a build.
# Test-only (test/deploy/image.test.ts); the shipped Dockerfile is unchanged.
#
#   CONTAINERS_CONF=test/deploy/image/containers.conf bash test/deploy/image/base.sh
#
# Does nothing when the image exists (FORCE=1 rebuilds it).
set -euo pipefail
IMAGE=${BASE_IMAGE:-node:24-bookworm-slim}
if [[ -z "${FORCE:-}" ]] && podman image exists "$IMAGE"; then
  echo "base.sh: $IMAGE exists"
  exit 0
fi
for cmd in podman debootstrap; do
  command -v "$cmd" >/dev/null || {
    echo "base.sh: $cmd missing: apt-get install -y podman runc debootstrap" >&2
    exit 1
  }
done

# The first Debian mirror apt uses here (deb822 .sources or a one-line sources.list).
mirror=$(grep -hoE '^URIs:\s*\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
if [[ -z "$mirror" ]]; then
  mirror=$(grep -hoE '^deb\s+\S+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

node_bin=$(readlink -f "$(command -v node)")
[[ "$("$node_bin" -p "process.versions.node.split('.')[0]")" -ge 24 ]] || { echo "base.sh: $node_bin is older than Node 24 (run it under npm, after scripts/setup.sh)" >&2; exit 1; }
npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
[[ -f "$npm_dir/package.json" ]] || { echo "base.sh: npm not found at $npm_dir" >&2; exit 1; }
ca=/etc/ssl/certs/ca-certificates.crt

root=$(mktemp -d /var/tmp/stt-base-XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base.sh: debootstrap bookworm from $mirror into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -n 20 "$root.log" >&2
  exit 1
}
rm -f "$root.log"
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" >"$root/etc/apt/sources.list"

install -m 0755 "$node_bin" "$root/usr/local/bin/node"
mkdir -p "$root/usr/local/lib/node_modules"
cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
# Outside /etc/ssl/certs: the image's own `apt-get install ca-certificates` regenerates that bundle.
mkdir -p "$root/usr/local/share/stt-test-ca"
cp "$ca" "$root/usr/local/share/stt-test-ca/ca-certificates.crt"
chroot "$root" groupadd --gid 1000 node
chroot "$root" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
# Slim like Debian's -slim images: dpkg leaves out documentation and translations
# (their /etc/dpkg/dpkg.cfg.d/docker), for the packages the Dockerfile installs too.
cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
CFG
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/man/* \
  "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/usr/share/lintian/*
find "$root/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true

tar -C "$root" -c . | podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV NODE_EXTRA_CA_CERTS=/usr/local/share/stt-test-ca/ca-certificates.crt' \
  --change 'ENV NODE_VERSION='"$("$node_bin" --version | tr -d v)" \
  --change 'CMD ["node"]' \
  - "$IMAGE" >/dev/null
echo "base.sh: imported $IMAGE"
