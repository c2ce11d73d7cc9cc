// Package schemas generates the JSON Schemas (draft 2020-12) of every
// client-facing message of protocol v1 from the Go types of pkg/events, and
// docs/errors.md from events.Catalog. The generated files live in
// docs/protocol/ and docs/errors.md; TestSchemas keeps them equal to what the
// code generates (`make schemas` rewrites them).
//
// Requests are strict (additionalProperties false), like the router's
// decoder; replies allow properties they do not list, because changes within
// a protocol version are additive.
package schemas
