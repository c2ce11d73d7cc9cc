#!/usr/bin/env bash
# Regenerates the Go and connect-go stubs for envd's process and filesystem
# services into internal/envdpb/{process,filesystem} (used by the E2B
# worker's client, its fake, and the E2B-compatible front door).
#
# Needs protoc (Debian: protobuf-compiler) and the two plugins, pinned to the
# versions in go.mod:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${here}/.."
export PATH="$(go env GOPATH)/bin:${PATH}"

for tool in protoc protoc-gen-go protoc-gen-connect-go; do
  command -v "${tool}" >/dev/null || { echo "generate.sh: ${tool} not found" >&2; exit 1; }
done

module="github.com/sandboxio/sandboxio/internal/envdpb"
protoc \
  --proto_path="${here}" \
  --go_out="${out}" --go_opt=module="${module}" \
  --connect-go_out="${out}" --connect-go_opt=module="${module}" \
  process/process.proto filesystem/filesystem.proto
