package auth

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// CommandScopesFile narrows what a commander of CommandersFile may
// command: one line per scoped key, "U… op[,op…]". The layout scopes the
// reaper's key to kill (the workers' Config.CommandScopes).
func (l *Layout) CommandScopesFile() string {
	return filepath.Join(l.Dir, "keys", "command-scopes.txt")
}

// ReaperCommandScope is what the reaper's key may command.
var ReaperCommandScope = []string{events.OpKill}

// ReadCommandScopes reads a command-scopes file (see CommandScopesFile).
// A missing file is no scope (nil, nil): every commander may command
// everything, as before the file existed.
func ReadCommandScopes(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: command scopes: %w", err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, ops, ok := strings.Cut(line, " ")
		if !ok || !nkeys.IsValidPublicUserKey(key) {
			return nil, fmt.Errorf("auth: command scopes %s:%d: want \"U… op[,op…]\"", path, n)
		}
		for _, op := range strings.Split(strings.TrimSpace(ops), ",") {
			if _, known := events.OpFromCommandType(events.CommandType(op)); !known && op != events.OpPortsOpen {
				return nil, fmt.Errorf("auth: command scopes %s:%d: unknown operation %q", path, n, op)
			}
			out[key] = append(out[key], op)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: command scopes %s: %w", path, err)
	}
	return out, nil
}
