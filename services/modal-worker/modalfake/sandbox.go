package modalfake

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/internal/fakejail"
	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
)

// sandbox is one fake Modal sandbox. Fields other than execs and its own
// mu are guarded by Server.mu.
type sandbox struct {
	id, appID, envName, taskID string
	def                        *pb.Sandbox
	tags                       []*pb.SandboxTag
	created                    time.Time
	scheduledAt                time.Time
	root                       string
	result                     *pb.GenericResult // nil while running
	done                       chan struct{}
	timer                      *time.Timer
	net                        *sandboxNet // nil: the host's network

	mu    sync.Mutex
	execs map[string]*proc
	env   map[string]string // from the sandbox's secrets
}

func (sb *sandbox) running() bool {
	select {
	case <-sb.done:
		return false
	default:
		return true
	}
}

// finish ends a sandbox with a result and kills its processes. It is
// idempotent: the first result wins.
func (s *Server) finish(sb *sandbox, st pb.GenericResult_GenericStatus, code int32, msg string) {
	s.mu.Lock()
	if sb.result != nil {
		s.mu.Unlock()
		return
	}
	sb.result = &pb.GenericResult{Status: st, Exitcode: code, Exception: msg}
	if sb.timer != nil {
		sb.timer.Stop()
	}
	close(sb.done)
	delete(s.tasks, sb.taskID)
	s.mu.Unlock()
	sb.killAll()
	sb.net.close()
	s.log.Debug("sandbox finished", "sandbox_id", sb.id, "status", st.String())
}

func (sb *sandbox) allProcs() []*proc {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	out := make([]*proc, 0, len(sb.execs))
	for _, p := range sb.execs {
		out = append(out, p)
	}
	return out
}

// aliveProcs lists the pids of the sandbox's live processes (members).
func (sb *sandbox) aliveProcs() []string {
	pids := sb.members()
	sort.Ints(pids)
	ids := make([]string, 0, len(pids))
	for _, pid := range pids {
		ids = append(ids, strconv.Itoa(pid))
	}
	return ids
}

// waitProcs kills every process of the sandbox until none is left, bounded
// by d, and returns those still alive.
func (sb *sandbox) waitProcs(d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		if sb.killAll() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return sb.aliveProcs()
		}
		time.Sleep(20 * time.Millisecond) // polling process exit, bounded by d
	}
}

// newRoot creates the sandbox's directory jail.
func (s *Server) newRoot(id string) (string, error) {
	root := filepath.Join(s.dir, id)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	if err := fakejail.PrepareRoot(root, "work", "__modal/.bin"); err != nil {
		return "", err
	}
	return root, nil
}
