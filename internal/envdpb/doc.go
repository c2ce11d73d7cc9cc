// Package envdpb holds the wire types of E2B's envd daemon, written for
// sandboxio from the public description of the protocol: the proto sources
// (proto/process, proto/filesystem; proto/generate.sh regenerates), the
// generated messages and connect-go stubs (process, filesystem and their
// *connect packages) and the Connect "json" codec (connectjson). The E2B
// worker's client and its fake, and the E2B-compatible front door, share
// them: a proto package may be registered only once per binary.
package envdpb
