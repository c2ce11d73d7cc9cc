// Package process holds the protoc-gen-go messages for envd's "process" proto package,
// generated from services/e2b-worker/proto/process/process.proto by proto/generate.sh.
package process
