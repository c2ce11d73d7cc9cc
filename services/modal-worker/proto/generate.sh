#!/usr/bin/env bash
# Regenerates the Go and gRPC stubs of our subset of Modal's protos
# (modal_proto/api.proto, modal_proto/task_command_router.proto) into
# services/modal-worker/internal/gen/. Run it through `go generate
# ./services/modal-worker/` (see doc.go).
#
# Needs protoc (Debian: apt-get install protobuf-compiler) and the plugins,
# pinned:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${here}/../internal/gen"
export PATH="$(go env GOPATH)/bin:${PATH}"

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "${tool}" >/dev/null || { echo "generate.sh: ${tool} not found" >&2; exit 1; }
done

mkdir -p "${out}"
module="github.com/sandboxio/sandboxio/services/modal-worker/internal/gen"
protoc \
  --proto_path="${here}" \
  --go_out="${out}" --go_opt=module="${module}" \
  --go-grpc_out="${out}" --go-grpc_opt=module="${module}" \
  modal_proto/api.proto modal_proto/task_command_router.proto
