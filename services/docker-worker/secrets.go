package dockerworker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

// The exec environment of a sandbox (its secrets, and for an adopted pool
// member its env) is kept, besides the worker's memory, in a root-only
// tmpfs inside the container, so that a worker restarted with the same id
// can give re-adopted sandboxes their secrets back. It never touches a disk,
// a label, the container config or `docker inspect`, and it goes with the
// container.
const (
	stateDir  = "/run/sandboxio"
	stateFile = stateDir + "/env.json"
)

// stateTmpfs is the mount that holds it: root only, no exec, 1 MiB.
var stateTmpfs = "rw,noexec,nosuid,nodev,mode=0700,uid=0,gid=0,size=1m"

type savedEnv struct {
	Env     []string `json:"env"`
	Secrets []string `json:"secrets"` // the secret values, for record redaction
}

var _ worker.SecretKeeper = (*Backend)(nil)

// saveEnv writes the sandbox's exec environment into its state tmpfs, in
// the background: creates do not wait for it (execs use the copy in memory).
func (b *Backend) saveEnv(sb *sandbox, secrets map[string]string) {
	if len(sb.env) == 0 {
		return
	}
	if !sb.hasAgent {
		b.log.Warn("sandbox env not saved (no agent binary in the container): a restarted worker will not restore its secrets", "sandbox", sb.id)
		return
	}
	saved := savedEnv{Env: sb.env}
	for _, v := range secrets {
		saved.Secrets = append(saved.Secrets, v)
	}
	data, err := json.Marshal(saved)
	if err != nil {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Saved after the create answered, on a goroutine the backend waits for: its own bound, no caller.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The worker's own static helper, as root, with none of the
		// sandbox's environment: never the image's shell or cat.
		err := b.helper(ctx, sb, "0:0", []string{"files", "write", stateFile, "--mode", "600",
			"--size", strconv.Itoa(len(data))}, bytes.NewReader(data), nil)
		if err != nil {
			b.log.Warn("sandbox env not saved: a restarted worker will not restore its secrets",
				"sandbox", sb.id, slog.Any("err", err))
		}
	}()
}

// restoreEnv reads the saved environment of a sandbox found after a restart.
func (b *Backend) restoreEnv(ctx context.Context, sb *sandbox) {
	if !sb.hasAgent {
		return // nothing was saved
	}
	var out bytes.Buffer
	err := b.helper(ctx, sb, "0:0", []string{"files", "read", stateFile, "--max", "1048576"}, nil,
		&limitedBuffer{b: &out, max: 1 << 20})
	if err != nil {
		return // nothing saved (no secrets)
	}
	var saved savedEnv
	if json.Unmarshal(out.Bytes(), &saved) != nil {
		return
	}
	sb.env, sb.secretValues, sb.envRestored = saved.Env, saved.Secrets, true
}

// SecretValues implements worker.SecretKeeper: the secret values of a
// sandbox, restored from the container after a worker restart. A sandbox
// whose processes run as root could have rewritten the saved file, so its
// values are not trusted for redaction (known is false).
func (b *Backend) SecretValues(ctx context.Context, sandboxID string) ([]string, bool) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return nil, false
	}
	if b.runsAsRoot(ctx, sb) {
		return nil, false
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.secretValues, sb.envRestored || sb.secretValues != nil
}

// runsAsRoot reports whether the sandbox's processes run as root (an image
// without the sandbox user); unknown counts as root.
func (b *Backend) runsAsRoot(ctx context.Context, sb *sandbox) bool {
	c, err := b.cli.ContainerInspect(ctx, sb.containerID)
	if err != nil || c.Config == nil {
		return true
	}
	user := c.Config.User
	if l := c.Config.Labels[LabelUser]; l != "" {
		user = l // init runs as root, the processes as this user
	}
	u := uidOf(user)
	return u == "" || u == "0" || u == "root"
}
