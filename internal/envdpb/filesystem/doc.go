// Package filesystem holds the protoc-gen-go messages for envd's "filesystem" proto package,
// generated from internal/envdpb/proto/filesystem/filesystem.proto by proto/generate.sh.
package filesystem
