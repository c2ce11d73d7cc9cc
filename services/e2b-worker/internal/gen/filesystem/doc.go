// Package filesystem holds the protoc-gen-go messages for envd's "filesystem" proto package,
// generated from services/e2b-worker/proto/filesystem/filesystem.proto by proto/generate.sh.
package filesystem
