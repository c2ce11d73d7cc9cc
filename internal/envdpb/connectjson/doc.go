// Package connectjson is the Connect "json" codec used by both the envd client
// and the fake envd: proto3 JSON like connect.WithProtoJSON, but with stable
// output.
//
// protojson deliberately randomises insignificant whitespace and the space in
// its "proto: " error prefix per binary, so two builds of the same program can
// produce different bytes. E2B's envd happens to emit compact JSON; this codec
// always compacts its output and normalises the error prefix so that the fake
// reproduces envd's recorded bytes in every build.
package connectjson
