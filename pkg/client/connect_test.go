package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/client"
)

// runServer starts a bare nats-server (no sandboxio) with opts on a free
// local port.
func runServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// operatorMode is a server in JWT mode trusting one operator, with one
// account registered; creds writes a user of acc to a file.
type operatorMode struct {
	srv     *server.Server
	okp     nkeys.KeyPair
	account nkeys.KeyPair
}

func startOperatorMode(t *testing.T) *operatorMode {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	if _, err := oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	srv := runServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver})
	return &operatorMode{srv: srv, okp: okp, account: akp}
}

func (m *operatorMode) creds(t *testing.T, signer nkeys.KeyPair, expires time.Time) string {
	t.Helper()
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	ujwt, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	b, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConnectCredentials: every kind of credential connects when right and
// fails at once when wrong, with an error that names what was used (never
// the secret) and classifies as the server's refusal.
func TestConnectCredentials(t *testing.T) {
	userPass := runServer(t, &server.Options{Username: "bob", Password: "hunter2"})
	token := runServer(t, &server.Options{Authorization: "s3cret-token"})
	op := startOperatorMode(t)
	unknownAccount, _ := nkeys.CreateAccount()
	okCreds := op.creds(t, op.account, time.Time{})
	missing := filepath.Join(t.TempDir(), "nope.creds")
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	seed, _ := ukp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	nkeyUsers := runServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: upub}}})
	otherUser, _ := nkeys.CreateUser()
	otherSeed, _ := otherUser.Seed()
	otherSeedFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherSeedFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		url    string
		opts   []client.Option
		refuse bool     // errors.Is nats.ErrAuthorization
		names  []string // in the error
		secret string   // never in the error
		env    map[string]string
	}{
		{name: "user and password", url: userPass.ClientURL(), opts: []client.Option{client.WithUserInfo("bob", "hunter2")}},
		{name: "wrong password", url: userPass.ClientURL(), opts: []client.Option{client.WithUserInfo("bob", "wrong-pw")},
			refuse: true, names: []string{"user bob", "refused"}, secret: "wrong-pw"},
		{name: "no credentials where some are needed", url: userPass.ClientURL(), refuse: true, names: []string{"no credentials"}},
		{name: "token", url: token.ClientURL(), opts: []client.Option{client.WithToken("s3cret-token")}},
		{name: "wrong token", url: token.ClientURL(), opts: []client.Option{client.WithToken("guessed-token")},
			refuse: true, names: []string{"token"}, secret: "guessed-token"},
		{name: "creds file", url: op.srv.ClientURL(), opts: []client.Option{client.WithCreds(okCreds)}},
		{name: "creds of an account the server does not know", url: op.srv.ClientURL(),
			opts:   []client.Option{client.WithCreds(op.creds(t, unknownAccount, time.Time{}))},
			refuse: true, names: []string{"creds file", "user.creds"}},
		{name: "expired creds", url: op.srv.ClientURL(),
			opts:   []client.Option{client.WithCreds(op.creds(t, op.account, time.Now().Add(-time.Hour)))},
			refuse: true, names: []string{"creds file", "user.creds"}},
		{name: "creds file from SBX_NATS_CREDS", url: op.srv.ClientURL(), env: map[string]string{"SBX_NATS_CREDS": okCreds}},
		{name: "wrong password from SBX_NATS_*", url: userPass.ClientURL(), env: map[string]string{"SBX_NATS_USER": "bob", "SBX_NATS_PASSWORD": "env-pw"},
			refuse: true, names: []string{"user bob"}, secret: "env-pw"},
		{name: "missing creds file", url: op.srv.ClientURL(), opts: []client.Option{client.WithCreds(missing)},
			names: []string{"creds file", missing}},
		{name: "nkey seed", url: nkeyUsers.ClientURL(), opts: []client.Option{client.WithNKey(seedFile)}},
		{name: "nkey the server does not know", url: nkeyUsers.ClientURL(), opts: []client.Option{client.WithNKey(otherSeedFile)},
			refuse: true, names: []string{"nkey seed file", "other.nk"}, secret: string(otherSeed)},
		{name: "missing nkey seed file", url: op.srv.ClientURL(), opts: []client.Option{client.WithNKey(missing)},
			names: []string{"nkey seed file", missing}},
		{name: "TLS CA file missing", url: userPass.ClientURL(), opts: []client.Option{client.WithTLS(missing, "", "")},
			names: []string{"TLS CA file", missing}},
		{name: "TLS cert without key", url: userPass.ClientURL(), opts: []client.Option{client.WithTLS("", "c.pem", "")},
			names: []string{"both a certificate and a key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"SBX_NATS_CREDS", "SBX_NATS_NKEY", "SBX_NATS_USER", "SBX_NATS_PASSWORD",
				"SBX_NATS_TOKEN", "SBX_NATS_CA", "SBX_NATS_CERT", "SBX_NATS_KEY"} {
				t.Setenv(k, "") // TestMain's, for the examples
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			start := time.Now()
			cl, err := client.Connect(tc.url, append(tc.opts, client.WithRequestTimeout(2*time.Second))...)
			took := time.Since(start)
			if took > 10*time.Second {
				t.Fatalf("Connect took %v", took)
			}
			if tc.names == nil && !tc.refuse {
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				cl.Close()
				return
			}
			if err == nil {
				cl.Close()
				t.Fatal("connected with bad credentials")
			}
			if tc.refuse && !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("not classified as the server's refusal: %v", err)
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Fatalf("error does not name %q: %v", n, err)
				}
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("error shows the secret: %v", err)
			}
			t.Logf("%v (%v)", err, took.Round(time.Millisecond))
		})
	}
}
