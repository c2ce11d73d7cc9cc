package auditor

import (
	"strings"
	"testing"
	"unsafe"
)

// TestIndexKeepsOnlyTheID: a record's id reaches the log as a substring of
// its message's header block (nats.go decodes every header from one copy of
// the block). The index keeps its last DefaultIndexSize ids for as long as
// the auditor runs, so an id kept as it came kept the whole block: 3 KiB of
// the auditor's heap per exec, 300 MiB once the index was full
// (docs/benchmarks.md).
func TestIndexKeepsOnlyTheID(t *testing.T) {
	block := strings.Repeat("x", 100) + "01JDX8Z5Q1W2E3R4T5Y6U7I8O9" + strings.Repeat("y", 900)
	id := block[100:126]
	x := newIDIndex(4)
	x.add(id, true)
	if !x.has(id) {
		t.Fatal("the index does not have the id it was given")
	}
	for kept := range x.ids {
		if unsafe.StringData(kept) == unsafe.StringData(id) {
			t.Fatal("the index keeps the caller's string, and with it the whole header block it is a substring of")
		}
	}
	if unsafe.StringData(x.fifo[0]) == unsafe.StringData(id) {
		t.Fatal("the index's ring keeps the caller's string")
	}
}
