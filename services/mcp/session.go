package mcpserver

import (
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// maxSandboxesPerSession bounds what one session may hold at once.
const maxSandboxesPerSession = 32

// session is what one MCP session owns: its sandboxes and its background
// commands.
type session struct {
	id string

	mu        sync.Mutex
	sandboxes map[string]*client.Sandbox
	procs     map[string]*background
	ended     bool
	// killed holds the ids of sandboxes kill_sandbox ended (at most
	// maxKilledRemembered), so that a second kill succeeds as the API's
	// does.
	killed []string
}

// maxKilledRemembered bounds the killed ids a session remembers.
const maxKilledRemembered = 256

// sessionOf returns the state of the session a request came in, creating
// it — and the goroutine that kills its sandboxes when it ends — on first
// use.
func (s *Server) sessionOf(ss *mcp.ServerSession) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		return st
	}
	st := &session{id: ss.ID(), sandboxes: map[string]*client.Sandbox{}, procs: map[string]*background{}}
	s.sessions[ss] = st
	s.reapers.Add(1)
	go func() {
		defer s.reapers.Done()
		_ = ss.Wait()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
		s.endSession(st)
	}()
	return st
}

// endSession kills the session's sandboxes, all at once, each within the
// kill grace, and waits for its background commands to finish.
func (s *Server) endSession(st *session) {
	st.mu.Lock()
	st.ended = true
	sbs := make([]*client.Sandbox, 0, len(st.sandboxes))
	for _, sb := range st.sandboxes {
		sbs = append(sbs, sb)
	}
	procs := make([]*background, 0, len(st.procs))
	for _, p := range st.procs {
		procs = append(procs, p)
	}
	st.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Teardown of an ended session's sandboxes: within the kill grace, whatever ended the session.
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.KillGrace)
			defer cancel()
			if err := sb.Kill(ctx); err != nil {
				s.log.Warn("session ended: kill not confirmed; the sandbox's lifetime will end it",
					"session", st.id, "sandbox_id", sb.ID(), "deadline", sb.Deadline, "err", err)
				return
			}
			s.log.Info("session ended: sandbox killed", "session", st.id, "sandbox_id", sb.ID())
		}()
	}
	wg.Wait()
	for _, p := range procs {
		p.stop()
	}
}

// add records a sandbox the session created; false when the session has
// ended meanwhile (the caller kills it).
func (st *session) add(sb *client.Sandbox) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended {
		return false
	}
	st.sandboxes[sb.ID()] = sb
	return true
}

func (st *session) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.sandboxes)
}

// sandbox returns a sandbox of the session, or SandboxNotFound.
func (st *session) sandbox(id string) (*client.Sandbox, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if sb, ok := st.sandboxes[id]; ok {
		return sb, nil
	}
	return nil, events.Errorf(events.CodeSandboxNotFound, "no sandbox %q in this session (list_sandboxes names them; create_sandbox makes one)", id).With("field", "sandbox_id")
}

// remove forgets a sandbox the session killed, remembering that it did.
func (st *session) remove(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.sandboxes, id)
	if len(st.killed) >= maxKilledRemembered {
		st.killed = st.killed[1:]
	}
	st.killed = append(st.killed, id)
}

// wasKilled reports whether kill_sandbox ended the sandbox id.
func (st *session) wasKilled(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Contains(st.killed, id)
}

func (st *session) list() []*client.Sandbox {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*client.Sandbox, 0, len(st.sandboxes))
	for _, sb := range st.sandboxes {
		out = append(out, sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out
}
