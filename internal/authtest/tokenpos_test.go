package authtest

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestAccountTokenGuard: even an account the operator signed cannot
// import another tenant's output; the server checks that the third token
// of an import of sbx.live.*.> is the importer's own account
// (AccountTokenPosition 3 on the SVC export). Its own import works.
func TestAccountTokenGuard(t *testing.T) {
	env := Start(t)
	b, err := os.ReadFile(filepath.Join(env.Dir, "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	okp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	accB := env.TenantAccount(TenantB)
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "rogue"
	ac.Imports.Add(
		&jwt.Import{Name: "b-live", Subject: jwt.Subject("sbx.live." + accB + ".>"), Account: env.Layout.SVC, Type: jwt.Stream},
		&jwt.Import{Name: "own-live", Subject: jwt.Subject("sbx.live." + apub + ".>"), Account: env.Layout.SVC, Type: jwt.Stream},
	)
	accJWT, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	env.Push(t, accJWT)
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	ujwt, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	creds, _ := jwt.FormatUserConfig(ujwt, seed)
	path := filepath.Join(t.TempDir(), "rogue.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	rogue := env.Connect(t, path)
	var stolen, own atomic.Int64
	if _, err := rogue.Subscribe("sbx.live.>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "sbx.live."+accB+".") {
			stolen.Add(1)
		} else {
			own.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	worker := env.Connect(t, env.Creds(auth.RoleWorker))
	const n = 10
	for range n {
		for _, acc := range []string{accB, apub} {
			if _, err := worker.Request(events.OutputSubject(acc, "sb1", "p1", events.Stdout), []byte("x"), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for own.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the account's own import delivered %d of %d", own.Load(), n)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, with a deadline
	}
	_ = rogue.Flush()
	if stolen.Load() != 0 {
		t.Fatalf("an import of another account's subjects delivered %d messages", stolen.Load())
	}
	t.Logf("own import delivered %d, the import of tenant B's output %d", own.Load(), stolen.Load())
}
