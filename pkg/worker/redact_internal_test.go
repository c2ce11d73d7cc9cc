package worker

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRedactShortcutIsExact: skipping the regular expressions for a string
// that holds no credential hint changes no answer: Redact gives what the
// patterns alone give, for every shape they redact, in any letter case,
// with Unicode case folds, and for random strings built from their parts.
func TestRedactShortcutIsExact(t *testing.T) {
	corpus := []string{
		"", "echo hi", "ls -la /work", "python3 -c print(1)",
		"PASSWORD=hunter2 ./run", "db_passwd: x1", "MY_SECRET='a b'", "token=abc", "X-Api-Key: k123", "apikey=zz",
		"aws_access_key=AK", "private-key=pp", "credentials=c", "AUTH=basic", "Authorization: Bearer abcdefgh12345",
		"basic dXNlcjpwYXNz", "AKIAABCDEFGHIJKLMNOP", "sk-proj-abcdefghijklmnop1234", "pk_live_abcdefghijklmnopqrst",
		"ghp_abcdefghijklmnopqrstuvwxyz", "e2b_0123456789abcdef01234", "-----BEGIN RSA PRIVATE KEY-----\nxx\n-----END RSA PRIVATE KEY-----",
		"curl --password hunter2 host", "cmd -api-key k", "--Token T",
		"paſsword=x", "\u212Aey=v", "api_\u212Aey=v", "ſecret=1", "ToKeN = v", "BeArEr abcdefghij",
		"[REDACTED]", "café token=1", "no hints at all, just text 12345",
	}
	parts := []string{"pass", "word", "secret", "tok", "en", "api", "_", "-", "key", "auth", "=", ":", " ", "bearer", "basic",
		"AKIA", "ABCDEFGHIJKLMNOP", "sk", "pk", "rk", "gh", "p_", "o_", "u_", "s_", "r_", "live", "test", "proj", "e2b_", "0123456789abcdef0123", "--", "x", "Y", "ſ", "\u212A", "-----BEGIN ", "PRIVATE KEY-----"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range 1 + r.IntN(8) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		corpus = append(corpus, b.String())
	}
	for _, s := range corpus {
		for _, v := range []string{s, strings.ToUpper(s), strings.ToLower(s)} {
			if got, want := Redact(v, nil), redactPatterns(v); got != want {
				t.Fatalf("Redact(%q) = %q, the patterns give %q", v, got, want)
			}
		}
	}
}

// TestIDsSkipThePatterns: the ids an operation record holds (ULIDs, lower
// case Crockford base32) almost never look like a credential, so they do not
// pay for the regular expressions. With bare "sk", "pk", "rk" and "gh" as
// hints, one in ten did.
func TestIDsSkipThePatterns(t *testing.T) {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	r := rand.New(rand.NewPCG(3, 4))
	slow := 0
	const n = 20000
	for range n {
		var b [26]byte
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if mayHoldCredential(string(b[:])) {
			slow++
		}
	}
	if slow > n/200 {
		t.Fatalf("%d of %d ids would go through the patterns", slow, n)
	}
}
