package natsconn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/internal/natsconn"
)

// bound is how long any refused connection may take: never a hang.
const bound = 5 * time.Second

func TestBadCredentials(t *testing.T) {
	env := authtest.Start(t)
	dir := t.TempDir()

	garbage := filepath.Join(dir, "garbage.creds")
	if err := os.WriteFile(garbage, []byte("not a creds file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.creds")
	b, _ := os.ReadFile(env.TenantCreds(authtest.TenantA))
	if err := os.WriteFile(unreadable, b, 0o000); err != nil {
		t.Fatal(err)
	}
	// Creds of another operator: well-formed, but the server trusts no one
	// who signed them.
	other, _, err := auth.Init(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	expired := filepath.Join(dir, "expired.creds")
	if _, err := auth.IssueUser(env.Dir, authtest.TenantA, expired, auth.UserOptions{Name: "old", Expires: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	revoked := filepath.Join(dir, "revoked.creds")
	revokedUser, err := auth.IssueUser(env.Dir, authtest.TenantA, revoked, auth.UserOptions{Name: "leaver"})
	if err != nil {
		t.Fatal(err)
	}
	// The user works until revoked.
	nc, err := natsconn.Connect(context.Background(), natsconn.Options{URL: env.URL, Creds: revoked})
	if err != nil {
		t.Fatalf("before revocation: %v", err)
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	accJWT, err := auth.RevokeUser(env.Dir, authtest.TenantA, revokedUser)
	if err != nil {
		t.Fatal(err)
	}
	env.Push(t, accJWT)
	select {
	case <-closed: // the server cut the revoked user's live connection
	case <-time.After(10 * time.Second):
		t.Error("the revoked user's connection stayed open")
	}
	nc.Close()

	cases := []struct {
		name string
		o    natsconn.Options
		want error
		// the message must name this
		names string
	}{
		{"missing creds file", natsconn.Options{Creds: filepath.Join(dir, "nope.creds")}, natsconn.ErrBadSettings, "nope.creds"},
		{"malformed creds file", natsconn.Options{Creds: garbage}, natsconn.ErrBadSettings, garbage},
		{"wrong operator", natsconn.Options{Creds: other.Creds(auth.RoleAdmin)}, natsconn.ErrAuthorization, other.Creds(auth.RoleAdmin)},
		{"expired user", natsconn.Options{Creds: expired}, natsconn.ErrAuthorization, expired},
		{"revoked user", natsconn.Options{Creds: revoked}, natsconn.ErrAuthorization, revoked},
		{"no credentials", natsconn.Options{}, natsconn.ErrAuthorization, "no credentials"},
		{"user and password", natsconn.Options{User: "u", Password: "hunter2"}, natsconn.ErrAuthorization, "user u"},
		{"token", natsconn.Options{Token: "s3cret"}, natsconn.ErrAuthorization, "a token"},
		{"missing nkey file", natsconn.Options{NKey: filepath.Join(dir, "nope.nk")}, natsconn.ErrBadSettings, "nope.nk"},
		{"nkey file without a seed", natsconn.Options{NKey: garbage}, natsconn.ErrBadSettings, garbage},
		{"two kinds of credentials", natsconn.Options{Creds: expired, Token: "x"}, natsconn.ErrBadSettings, "one of"},
		{"certificate without key", natsconn.Options{Cert: garbage}, natsconn.ErrBadSettings, "--tlskey"},
		{"missing CA file", natsconn.Options{CA: filepath.Join(dir, "ca.pem")}, natsconn.ErrBadSettings, "ca.pem"},
		{"missing context", natsconn.Options{Context: "nosuch"}, natsconn.ErrBadSettings, "nosuch"},
	}
	if os.Geteuid() != 0 { // root reads a mode-000 file
		cases = append(cases, struct {
			name  string
			o     natsconn.Options
			want  error
			names string
		}{"unreadable creds file", natsconn.Options{Creds: unreadable}, natsconn.ErrBadSettings, unreadable})
	}
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.o.URL = env.URL
			c.o.Wait = time.Minute // refused credentials must not be retried
			start := time.Now()
			nc, err := natsconn.Connect(context.Background(), c.o)
			took := time.Since(start)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.names) {
				t.Fatalf("error %q does not name %q", err, c.names)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error %q shows a secret", err)
			}
			if took > bound {
				t.Fatalf("took %v (a hang or a retry)", took)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}

func TestUnreachable(t *testing.T) {
	start := time.Now()
	_, err := natsconn.Connect(context.Background(), natsconn.Options{URL: "nats://127.0.0.1:1"})
	if !errors.Is(err, natsconn.ErrUnreachable) || time.Since(start) > bound {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
	// With Wait it tries about once a second, then gives up.
	start = time.Now()
	_, err = natsconn.Connect(context.Background(), natsconn.Options{URL: "nats://127.0.0.1:1", Wait: 2 * time.Second})
	if took := time.Since(start); !errors.Is(err, natsconn.ErrUnreachable) || took < 2*time.Second || took > 2*time.Second+bound {
		t.Fatalf("%v after %v", err, took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = natsconn.Connect(ctx, natsconn.Options{URL: "nats://127.0.0.1:1", Wait: time.Hour})
	if !errors.Is(err, natsconn.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

func TestGoodCredentials(t *testing.T) {
	env := authtest.Start(t)
	dir := t.TempDir()
	// A nats CLI context.
	ctxDir := filepath.Join(dir, "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "sbx-a.json"),
		[]byte(`{"description":"tenant a","url":"`+env.URL+`","creds":"`+env.TenantCreds(authtest.TenantA)+`","color_scheme":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, c := range []struct {
		name string
		o    func() natsconn.Options
	}{
		{"creds flag", func() natsconn.Options { return natsconn.Options{URL: env.URL, Creds: env.Creds(auth.RoleRouter)} }},
		{"context", func() natsconn.Options { return natsconn.Options{Context: "sbx-a"} }},
		{"context file path", func() natsconn.Options { return natsconn.Options{Context: filepath.Join(ctxDir, "sbx-a.json")} }},
		{"environment", func() natsconn.Options {
			t.Setenv(natsconn.EnvURL, env.URL)
			t.Setenv(natsconn.EnvCreds, env.TenantCreds(authtest.TenantB))
			return natsconn.Options{}.Merge(natsconn.FromEnv())
		}},
		{"flag beats environment", func() natsconn.Options {
			t.Setenv(natsconn.EnvURL, env.URL)
			t.Setenv(natsconn.EnvCreds, filepath.Join(dir, "nope.creds"))
			return natsconn.Options{Creds: env.Creds(auth.RoleAdmin)}.Merge(natsconn.FromEnv())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, err := natsconn.Connect(context.Background(), c.o())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestErrorsNameTheSource: a bad file from the environment or a context
// says where it came from.
func TestErrorsNameTheSource(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(natsconn.EnvCreds, filepath.Join(dir, "env.creds"))
	_, err := natsconn.Connect(context.Background(), natsconn.Options{}.Merge(natsconn.FromEnv()))
	if !errors.Is(err, natsconn.ErrBadSettings) || !strings.Contains(err.Error(), natsconn.EnvCreds) || !strings.Contains(err.Error(), "env.creds") {
		t.Fatalf("from the environment: %v", err)
	}
	t.Setenv(natsconn.EnvCreds, "")
	t.Setenv("XDG_CONFIG_HOME", dir)
	if err := os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats", "context", "c1.json"), []byte(`{"nkey":"`+filepath.Join(dir, "ctx.nk")+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = natsconn.Connect(context.Background(), natsconn.Options{Context: "c1"})
	if !errors.Is(err, natsconn.ErrBadSettings) || !strings.Contains(err.Error(), "nats context c1") || !strings.Contains(err.Error(), "ctx.nk") {
		t.Fatalf("from a context: %v", err)
	}
}
