package deadline

import (
	"testing"
	"time"
)

func TestDeadline(t *testing.T) {
	closed := func(d *Deadline) bool {
		select {
		case <-d.Done():
			return true
		default:
			return false
		}
	}
	var d Deadline
	d.Init()
	if closed(&d) {
		t.Fatal("closed with no deadline")
	}
	d.Set(time.Now().Add(-time.Second))
	if !closed(&d) {
		t.Fatal("a past deadline is not closed")
	}
	d.Set(time.Time{})
	if closed(&d) {
		t.Fatal("cleared deadline still closed")
	}
	d.Set(time.Now().Add(20 * time.Millisecond))
	select {
	case <-d.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a future deadline never passed")
	}
	d.Set(time.Now().Add(time.Hour))
	d.Stop()
	if closed(&d) {
		t.Fatal("a moved deadline is closed")
	}
}
