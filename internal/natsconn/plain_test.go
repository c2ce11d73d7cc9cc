package natsconn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/natsconn"
)

func startPlain(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return s.ClientURL()
}

// TestPlainCredentials: user/password, token and nkey seed against
// servers configured for them (a config-file deployment), right and wrong.
func TestPlainCredentials(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(dir, "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	userURL := startPlain(t, &server.Options{Username: "sbx", Password: "pw-1"})
	tokenURL := startPlain(t, &server.Options{Authorization: "tok-1"})
	nkeyURL := startPlain(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	for _, c := range []struct {
		name string
		o    natsconn.Options
		ok   bool
	}{
		{"user and password", natsconn.Options{URL: userURL, User: "sbx", Password: "pw-1"}, true},
		{"wrong password", natsconn.Options{URL: userURL, User: "sbx", Password: "nope"}, false},
		{"token", natsconn.Options{URL: tokenURL, Token: "tok-1"}, true},
		{"wrong token", natsconn.Options{URL: tokenURL, Token: "nope"}, false},
		{"nkey seed", natsconn.Options{URL: nkeyURL, NKey: seedFile}, true},
		{"unknown nkey", natsconn.Options{URL: nkeyURL, NKey: otherFile}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			nc, err := natsconn.Connect(context.Background(), c.o)
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				nc.Close()
				return
			}
			if !errors.Is(err, natsconn.ErrAuthorization) || time.Since(start) > bound {
				t.Fatalf("%v after %v, want ErrAuthorization at once", err, time.Since(start))
			}
		})
	}
}
