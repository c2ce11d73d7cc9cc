package events

// ProtocolVersion is the version of the client protocol and of the bus
// contract defined by this package.
const ProtocolVersion = 1

// Changelog records every change to the protocol, newest first. Entries are
// additive within a version.
var Changelog = []ChangelogEntry{
	{Version: 1, Date: "2026-12-01", Change: "tenancy: the tenant token in output, live and progress subjects (sbx.out.<tenant>.<sandbox>.<process>.<stream>); ops attach (replay through the API), quota, files.get, files.put (large files in parts); sealed_secrets; signed records (Sbx-Signer, Sbx-Signature); seal_key and signing_key in leases; tenant in sandbox records and create commands"},
	{Version: 1, Date: "2026-11-29", Change: "initial protocol: create, exec (buffered and streamed), run_code, files, signal, stdin, kill, get, list, set_timeout, backends; SBX_CMD/SBX_OPS/SBX_OUT; error catalog SBX_E10xx-16xx"},
}

// ChangelogEntry is one change to the protocol.
type ChangelogEntry struct {
	Version int
	Date    string
	Change  string
}
