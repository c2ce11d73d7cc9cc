package backendkit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker/backendkit"
)

var errCause = errors.New("backend said no")

func TestClassify(t *testing.T) {
	already := events.Errorf(events.CodeSandboxGone, "gone")
	tests := []struct {
		name     string
		err      error
		code     *events.Error
		wantCode events.Code // "" = err unchanged
	}{
		{"nil is nil", nil, events.Errorf(events.CodeBackendError, "x"), ""},
		{"an SBX error is kept", already, events.Errorf(events.CodeBackendError, "x"), ""},
		{"nil code leaves err", context.Canceled, nil, ""},
		{"coded and wrapped", errCause, events.Errorf(events.CodeBackendUnavailable, "op: no"), events.CodeBackendUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := backendkit.Classify(tc.err, func(error) *events.Error { return tc.code })
			if tc.wantCode == "" {
				if got != tc.err {
					t.Fatalf("Classify = %v, want %v unchanged", got, tc.err)
				}
				return
			}
			var sbx *events.Error
			if !errors.As(got, &sbx) || sbx.Code != tc.wantCode || !errors.Is(got, tc.err) || got.Error() != tc.code.Error() {
				t.Fatalf("Classify = %v, want %s keeping its cause", got, tc.wantCode)
			}
		})
	}
	if got := backendkit.Wrap(already, nil); got != already {
		t.Fatalf("Wrap without a cause = %v", got)
	}
}

type handle struct{ n int }

func TestHandlesLookupAdoptsOnce(t *testing.T) {
	var h backendkit.Handles[*handle]
	var mu sync.Mutex
	finds, discarded := 0, 0
	find := func(ctx context.Context) (*handle, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("find runs without the timeout")
		}
		mu.Lock()
		defer mu.Unlock()
		finds++
		return &handle{n: finds}, nil
	}
	discard := func(*handle) { mu.Lock(); discarded++; mu.Unlock() }
	var wg sync.WaitGroup
	got := make([]*handle, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := h.Lookup(context.Background(), "sb", time.Second, find, discard)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		}()
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatalf("lookups returned different handles: %v", got)
		}
	}
	if finds-discarded != 1 {
		t.Fatalf("%d finds, %d discarded: want every handle but the kept one discarded", finds, discarded)
	}
	if _, err := h.Lookup(context.Background(), "other", time.Second, func(context.Context) (*handle, error) { return nil, errCause }, nil); !errors.Is(err, errCause) {
		t.Fatalf("failed find: %v", err)
	}
	if _, ok := h.Get("other"); ok {
		t.Fatal("a failed find left a handle")
	}
	if v, ok := h.Delete("sb"); !ok || v != got[0] {
		t.Fatalf("Delete = %v, %t", v, ok)
	}
	h.Put("a", &handle{})
	h.Put("b", &handle{})
	if all := h.TakeAll(); len(all) != 2 {
		t.Fatalf("TakeAll = %v", all)
	}
	if _, ok := h.Get("a"); ok {
		t.Fatal("TakeAll left a handle")
	}
}
