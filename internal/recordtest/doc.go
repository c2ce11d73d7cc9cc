// Package recordtest holds test helpers about operation records shared by
// the packages that code them by hand (the worker's encoder, the auditor's
// decoder).
package recordtest
