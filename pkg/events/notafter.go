package events

import (
	"strconv"
	"time"
)

// HeaderNotAfter is set by the router on every command it publishes to
// SBX_CMD: the time (Unix milliseconds, decimal) after which it will have
// answered the caller without the worker (CreateTimeout, WorkerTimeout,
// "not queued"). A worker that takes the command later refuses it with
// CodeCommandExpired instead of running it: a create the caller was told
// had failed never makes a sandbox, an exec never runs behind its caller's
// back. The header is not part of the command's signature (recsign signs
// subject, ce-id and data); JetStream's de-duplication window and the
// signature bound what a replay of a stored command can do.
const HeaderNotAfter = "Sbx-Not-After"

// FormatNotAfter renders t for HeaderNotAfter.
func FormatNotAfter(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// ParseNotAfter reads a HeaderNotAfter value; ok is false when it is
// missing or malformed.
func ParseNotAfter(v string) (t time.Time, ok bool) {
	if v == "" || len(v) > 20 {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}
