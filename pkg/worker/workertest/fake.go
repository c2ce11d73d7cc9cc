package workertest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// FakeCommands are the probes for the fake backend.
var FakeCommands = Commands{
	Echo:       func(s string) []string { return []string{"echo", s} },
	EchoStderr: func(s string) []string { return []string{"echo-stderr", s} },
	Exit:       func(code int) []string { return []string{"exit", strconv.Itoa(code)} },
	Sleep:      func(d time.Duration) []string { return []string{"sleep", strconv.FormatInt(d.Milliseconds(), 10)} },
	Write:      func(n int) []string { return []string{"write", strconv.Itoa(n), "8192"} },
	Pattern:    fake.Pattern,
	Interleave: func(n int) []string { return []string{"interleave", strconv.Itoa(n)} },
	Drip: func(n int, d time.Duration) []string {
		return []string{"drip", strconv.Itoa(n), strconv.FormatInt(d.Milliseconds(), 10)}
	},
	Cat:     []string{"cat"},
	Env:     func(name string) []string { return []string{"env", name} },
	Pwd:     []string{"pwd"},
	Cwd:     "/work",
	Missing: []string{"no-such-command"},
}

// ShellCommands are the probes for a backend with a POSIX shell and
// coreutils or busybox (printf, head, tr, cat, sleep).
var ShellCommands = Commands{
	Echo:       func(s string) []string { return []string{"sh", "-c", `printf '%s\n' "$1"`, "sh", s} },
	EchoStderr: func(s string) []string { return []string{"sh", "-c", `printf '%s\n' "$1" >&2`, "sh", s} },
	Exit:       func(code int) []string { return []string{"sh", "-c", fmt.Sprintf("exit %d", code)} },
	Sleep: func(d time.Duration) []string {
		return []string{"sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)}
	},
	// yes prints "abcdefghijklmnopqrstuvwxy" lines: 26 bytes each with the newline.
	Write: func(n int) []string {
		return []string{"sh", "-c", fmt.Sprintf("yes abcdefghijklmnopqrstuvwxy | head -c %d", n)}
	},
	Pattern: shellPattern,
	Interleave: func(n int) []string {
		return []string{"sh", "-c", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done`, n)}
	},
	Drip: func(n int, d time.Duration) []string {
		return []string{"sh", "-c", fmt.Sprintf(`i=1; while [ $i -le %d ]; do [ $i -gt 1 ] && sleep %s; echo "drip $i"; i=$((i+1)); done`, n, strconv.FormatFloat(d.Seconds(), 'f', 3, 64))}
	},
	Cat: []string{"cat"},
	Env: func(name string) []string {
		return []string{"sh", "-c", `eval "v=\${$1}"; printf '%s\n' "$v"`, "sh", name}
	},
	Pwd:     []string{"pwd"},
	Cwd:     "/tmp",
	Missing: []string{"/no/such/command"},
	Shell:   func(script string) []string { return []string{"sh", "-c", script} },
	// One child in the shell's group, one in a session of its own.
	Spawn: []string{"sh", "-c", `sleep 300 & a=$!; setsid sleep 300 & b=$!; echo "$a $b"; wait`},
	Alive: func(pid string) []string {
		return []string{"sh", "-c", `[ -d /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status`, "sh", pid}
	},
}

func shellPattern(n int) []byte {
	line := []byte("abcdefghijklmnopqrstuvwxy\n")
	out := make([]byte, n)
	for i := range out {
		out[i] = line[i%len(line)]
	}
	return out
}
