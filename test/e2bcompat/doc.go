// Package e2bcompat holds the whole-system tests of the E2B-compatible
// front door (services/gateway/e2bapi) on real Docker sandboxes: the SDKs'
// exact requests, the project's own E2B client run against it, and envd's
// recorded answers. Build tag integration.
package e2bcompat
