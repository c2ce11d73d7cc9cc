package worker

import (
	"strings"
	"testing"
	"unsafe"
)

// TestPIDSetKeepsCopies: a sandbox remembers its last maxRememberedPIDs
// process ids for as long as it lives; an id kept as given would keep the
// message it was cut from.
func TestPIDSetKeepsCopies(t *testing.T) {
	msg := strings.Repeat("m", 2000) + "proc-1"
	id := msg[2000:]
	var s pidSet
	s.add(id)
	if !s.seen("proc-1") {
		t.Fatal("the set does not have the id it was given")
	}
	if unsafe.StringData(s.ring[0]) == unsafe.StringData(id) {
		t.Fatal("the set keeps the caller's string")
	}
	for k := range s.ids {
		if unsafe.StringData(k) == unsafe.StringData(id) {
			t.Fatal("the set's map keeps the caller's string")
		}
	}
}
