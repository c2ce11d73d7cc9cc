package client_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestMain starts one sandboxio (router and the fake backend on an
// embedded nats-server listening on a random port) for the Example
// functions, which connect to it as a user connects to `sandboxio dev`:
// client.Connect("") with SBX_NATS_URL (and, under SBX_TEST_AUTH=1,
// SBX_NATS_CREDS naming tenant A's creds).
func TestMain(m *testing.M) {
	env, stop, err := sbxtest.StartMain(sbxtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("SBX_NATS_URL", env.URL)
	if env.Auth != nil {
		os.Setenv("SBX_NATS_CREDS", env.Auth.TenantCreds(authtest.TenantA))
	}
	code := m.Run()
	stop()
	os.Exit(code)
}
