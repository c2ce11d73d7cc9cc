// Package process holds the protoc-gen-go messages for envd's "process" proto package,
// generated from internal/envdpb/proto/process/process.proto by proto/generate.sh.
package process
