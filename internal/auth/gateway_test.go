package auth

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

func pubOf(t *testing.T, seedFile string) string {
	t.Helper()
	seed, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		t.Fatalf("%s: %v", seedFile, err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// The layout's gateway: a key trusted for opens of ports and nothing else
// (its command scope), which signs no records, and a user of its own.
func TestLayoutHasTheGateway(t *testing.T) {
	l, _, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gpub := pubOf(t, l.SigningKeyFile(GatewaySigner))
	scopes, err := ReadCommandScopes(l.CommandScopesFile())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(scopes[gpub], []string{events.OpPortsOpen}) {
		t.Fatalf("the gateway's scope %q, want [%s]", scopes[gpub], events.OpPortsOpen)
	}
	signers, err := os.ReadFile(l.SignersFile())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(strings.Fields(string(signers)), gpub) {
		t.Error("the gateway's key is a trusted record signer")
	}
	if _, err := os.Stat(l.Creds(RoleGateway)); err != nil {
		t.Errorf("no gateway creds: %v", err)
	}
	if _, _, err := InitWorkers(t.TempDir(), []string{GatewaySigner}); !errors.Is(err, ErrBadName) {
		t.Errorf("a worker named %q: %v, want ErrBadName", GatewaySigner, err)
	}
}
