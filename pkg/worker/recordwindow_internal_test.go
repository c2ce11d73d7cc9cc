package worker

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/bus"
)

// TestRecordRetryWithinDuplicateWindow: a record is published again with
// the same Nats-Msg-Id for recordRetryFor and one ack wait; SBX_OPS drops
// those as duplicates only while its window covers them (ADR 25).
func TestRecordRetryWithinDuplicateWindow(t *testing.T) {
	if span := recordRetryFor + 2*recordAckWait; span >= bus.RecordDuplicates {
		t.Fatalf("records are re-published for up to %v, SBX_OPS's duplicate window is %v", span, bus.RecordDuplicates)
	}
}
