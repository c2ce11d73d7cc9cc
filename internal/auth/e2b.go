package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// RoleE2B is the E2B-compatible front door's user (the gateway's
// --e2b-listen, services/gateway/e2bapi): it calls the router's API on
// behalf of the tenant whose API key a request carries (Nats-Request-Info,
// which only a services-account user may set), reads the API keys, and
// follows its tenants' live and replayed output. It faces the internet:
// it gets nothing else (no command, record, registry write or stream).
const RoleE2B = "e2b"

// e2bPermissions: the API (on behalf of tenants) and its inboxes, the
// router's micro stats (the client's router refresh), a read of the API
// keys' bucket (stream info and gets of KV_sbx_apikeys only); it
// subscribes to its inboxes and the tenants' live and replay subjects.
func e2bPermissions() perms {
	return perms{
		pubAllow: append([]string{events.SubjectAPIPrefix + ".>", "_INBOX.>",
			"$SRV.*." + events.ServiceName, "$SRV.*." + events.ServiceName + ".>"},
			kvRead(bus.BucketAPIKeys, false)...),
		subAllow: []string{"_INBOX.>", events.SubjectLiveAll, "sbx.replay.>"},
	}
}

// EnsureE2BCreds writes the e2b user's creds into the layout at dir when
// it has none (a layout written before the role existed); written says
// whether it did.
func EnsureE2BCreds(dir string) (written bool, err error) {
	l, err := Load(dir)
	if err != nil {
		return false, err
	}
	if _, err := os.Stat(l.Creds(RoleE2B)); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("auth: %w", err)
	}
	svc, err := readSeed(l.accountFile(SVCName, ".nk"))
	if err != nil {
		return false, err
	}
	creds, _, err := newUserCreds(svc, RoleE2B, e2bPermissions(), time.Time{})
	if err != nil {
		return false, err
	}
	if err := writeFile(l.Creds(RoleE2B), creds, true); err != nil {
		return false, err
	}
	return true, nil
}
