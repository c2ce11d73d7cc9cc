#!/usr/bin/env bash
# Build the sandboxio service image from a static binary, with no registry:
#
#   deploy/build-image.sh [IMAGE]        (default sandboxio/sandboxio:dev)
#
# The binary is built here with CGO_ENABLED=0 and copied onto `FROM scratch`
# (deploy/Dockerfile); nothing is pulled. The same image runs every role:
# nats-server, router, docker-worker, fake-worker, e2b-worker, auditor, reaper.
# See docs/deploy.md.
set -Eeuo pipefail

readonly IMAGE=${1:-sandboxio/sandboxio:dev}
readonly ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build-image.sh: error: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
rootfs=$ctx/rootfs
mkdir -p "$rootfs/tmp" "$rootfs/data" "$rootfs/etc/ssl/certs"
chmod 1777 "$rootfs/tmp"
chmod 0777 "$rootfs/data"

# The daemon's architecture, so the image runs where it is built.
arch=$(docker version --format '{{.Server.Arch}}' 2>/dev/null || true)
arch=${arch:-$($GO env GOARCH)}
version=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo dev)

log "building sandboxio ($version) for linux/$arch, CGO_ENABLED=0"
(cd "$ROOT" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags='-s -w' \
	-o "$rootfs/sandboxio" ./cmd/sandboxio)

if [[ -r /etc/ssl/certs/ca-certificates.crt ]]; then
	cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
else
	log "no /etc/ssl/certs/ca-certificates.crt here: the image will not verify HTTPS (E2B)"
fi
printf 'root:x:0:0:root:/data:/sandboxio\nsandboxio:x:65532:65532:sandboxio:/data:/sandboxio\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nsandboxio:x:65532:\n' >"$rootfs/etc/group"
cp "$ROOT/deploy/Dockerfile" "$ctx/Dockerfile"

log "docker build -t $IMAGE (FROM scratch)"
docker build --quiet --label "io.sandboxio.version=$version" -t "$IMAGE" "$ctx" >/dev/null
docker image inspect --format '{{.RepoTags}} {{.Size}} bytes' "$IMAGE"
