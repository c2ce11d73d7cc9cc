// Package backendkit holds what third-party backends of sandboxio would
// otherwise each write again: errors that carry an SBX code and keep their
// cause (Wrap, Classify), and the table of the sandboxes a backend serves
// with lookup-and-adopt of the ones a previous run of the worker created
// (Handles). It depends only on pkg/events and the standard library; a
// backend supplies what is its own (how to map its failures, how to find
// and attach a sandbox).
package backendkit
