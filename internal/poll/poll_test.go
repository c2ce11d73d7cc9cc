package poll

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		okAfter int // calls before f succeeds; -1 never
		within  time.Duration
		wantErr error
	}{
		{"at once", 0, time.Second, nil},
		{"after a few calls", 3, time.Second, nil},
		{"never", -1, 50 * time.Millisecond, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			start := time.Now()
			err := Until(context.Background(), tt.within, func() error {
				calls++
				if tt.okAfter >= 0 && calls > tt.okAfter {
					return nil
				}
				return boom
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Until = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil && time.Since(start) > tt.within+time.Second {
				t.Fatalf("Until took %s, longer than its bound %s", time.Since(start), tt.within)
			}
		})
	}
}

func TestBool(t *testing.T) {
	if err := Bool("x", func() bool { return false })(); !errors.Is(err, ErrNotYet) {
		t.Fatalf("Bool(false) = %v, want ErrNotYet", err)
	}
	if err := Bool("x", func() bool { return true })(); err != nil {
		t.Fatalf("Bool(true) = %v", err)
	}
}
