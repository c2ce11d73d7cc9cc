package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/auditor"
)

// TestAuditVerifySignatures: `audit verify` names every line whose record
// is not signed by a trusted worker and exits non-zero; a log of signed
// records passes.
func TestAuditVerifySignatures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sigs     []string
		wantCode bool
		want     []string
	}{
		{"all signed", []string{"ok", "ok", "ok"}, false, []string{"chain intact", "3 records signed by a trusted worker, 0 not"}},
		{"forged", []string{"ok", "missing", "ok", "invalid"}, true, []string{"chain intact", "line 2: seq 2: record op1-closed: signature missing",
			"line 4: seq 4: record op3-closed: signature invalid"}},
		{"before signatures", []string{"", ""}, true, []string{"chain intact", "line 1: seq 1: record op0-closed: signature unsigned"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			l, err := auditor.OpenLog(path)
			if err != nil {
				t.Fatal(err)
			}
			var entries []auditor.Entry
			for i, sig := range tc.sigs {
				id := "op" + string(rune('0'+i)) + "-closed"
				entries = append(entries, signedAs(t, auditor.Entry{ID: id, Type: events.TypeOpClosed, Source: "s", Time: time.Now().UTC(),
					Subject: "sbx.ops.fake.sb.closed", Record: []byte(`{}`), Sig: sig}))
			}
			if _, err := l.Append(entries); err != nil {
				t.Fatal(err)
			}
			l.Close()
			var out, errb bytes.Buffer
			code := run(context.Background(), "sandboxio", []string{"audit", "verify", path}, &out, &errb)
			if (code != 0) != tc.wantCode {
				t.Fatalf("exit %d; stdout %s stderr %s", code, out.String(), errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestAuditVerifyReadable: a changed line is named in words (line, seq,
// what is wrong), never as a Go struct, and verify exits 1 as its help
// says (not 125).
func TestAuditVerifyReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := auditor.OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []auditor.Entry
	for i := 0; i < 3; i++ {
		entries = append(entries, signedAs(t, auditor.Entry{ID: "op" + string(rune('0'+i)) + "-closed", Type: events.TypeOpClosed, Source: "s",
			Time: time.Now().UTC(), Subject: "sbx.ops.fake.sb.closed", Record: []byte(`{"n":` + string(rune('0'+i)) + `}`), Sig: "ok"}))
	}
	if _, err := l.Append(entries); err != nil {
		t.Fatal(err)
	}
	l.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = strings.Replace(lines[1], `"n":1`, `"n":7`, 1) // tamper with line 2
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), "sandboxio", []string{"audit", "verify", path}, &out, &errb)
	if code != exitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^line 2 \(seq 2\): [a-z_ ]+: .+`).MatchString(out.String()) || strings.Contains(out.String(), "{Line:") {
		t.Errorf("the problem is not said in words:\n%s", out.String())
	}
}

// signedAs gives e the signature its verdict says: a valid one for "ok"
// and "untrusted", one that does not verify for "invalid", none otherwise.
func signedAs(t *testing.T, e auditor.Entry) auditor.Entry {
	t.Helper()
	if e.Sig != "ok" && e.Sig != "invalid" && e.Sig != "untrusted" {
		return e
	}
	k, err := recsign.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(e.Subject)
	m.Header.Set(events.HeaderCEID, e.ID)
	m.Data = e.Record
	if e.Sig == "invalid" {
		m.Data = []byte(`{"altered":true}`)
	}
	if err := k.Sign(m); err != nil {
		t.Fatal(err)
	}
	e.Signer, e.Signature = k.Public(), m.Header.Get(events.HeaderSignature)
	return e
}
