package router

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestListNewestFirst: list answers the newest matching live sandboxes
// first, at most Limit of them, equal creation times ordered by id, ended
// and other tenants' sandboxes left out.
func TestListNewestFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := &Service{sandboxes: map[string]events.Sandbox{}}
	add := func(id string, at time.Duration, state events.State, owner string) {
		s.sandboxes[id] = events.Sandbox{SandboxID: id, CreatedAt: t0.Add(at), State: state, Backend: "fake", Owner: owner}
	}
	for i := range 50 {
		add(fmt.Sprintf("s%02d", i), time.Duration(i)*time.Second, events.StateRunning, "")
	}
	add("tie-b", 100*time.Second, events.StateRunning, "")
	add("tie-a", 100*time.Second, events.StateRunning, "")
	add("gone", 200*time.Second, events.StateGone, "")
	add("other", 300*time.Second, events.StateRunning, "team-x")

	ids := func(r events.ListReply) []string {
		var out []string
		for _, sb := range r.Sandboxes {
			out = append(out, sb.SandboxID)
		}
		return out
	}
	if got, want := ids(s.list(caller{}, &events.ListRequest{Limit: 4})), []string{"other", "tie-a", "tie-b", "s49"}; !slices.Equal(got, want) {
		t.Errorf("limit 4: %v, want %v", got, want)
	}
	if got := ids(s.list(caller{}, &events.ListRequest{})); len(got) != 53 || slices.Contains(got, "gone") {
		t.Errorf("all: %d sandboxes %v", len(got), got)
	}
	if got := ids(s.list(caller{}, &events.ListRequest{Owner: "team-x"})); !slices.Equal(got, []string{"other"}) {
		t.Errorf("owner: %v", got)
	}
	if got := ids(s.list(caller{}, &events.ListRequest{State: events.StateGone})); !slices.Equal(got, []string{"gone"}) {
		t.Errorf("killed: %v", got)
	}
}
