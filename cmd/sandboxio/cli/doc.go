// Package cli is the sandboxio command line: the all-in-one `dev` and
// `demo`, the split service roles, and the client commands. cmd/sandboxio
// and cmd/sbx only call Main.
package cli
