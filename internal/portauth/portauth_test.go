package portauth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTokenAndSignedValues(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := NewKey()
	h := Hash(tok)
	now := time.Unix(1_800_000_000, 0)
	sign := func(k []byte, hash string, p Purpose, id string, port int, exp time.Time) string {
		v, err := Sign(k, hash, p, id, port, exp)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	link := sign(key, h, PurposeLink, "sb1", 8000, now.Add(time.Minute))
	day := 24 * time.Hour
	other, _ := NewToken()
	cases := []struct {
		name string
		ok   bool
		err  error
	}{
		{"token", CheckToken(tok, h), nil},
		{"wrong token", !CheckToken(other, h), nil},
		{"empty token", !CheckToken("", h), nil},
		{"link", true, Verify(key, link, h, PurposeLink, "sb1", 8000, now, day)},
		{"link as cookie", Verify(key, link, h, PurposeCookie, "sb1", 8000, now, day) != nil, nil},
		{"other port", Verify(key, link, h, PurposeLink, "sb1", 8001, now, day) != nil, nil},
		{"other sandbox", Verify(key, link, h, PurposeLink, "sb2", 8000, now, day) != nil, nil},
		{"rotated", Verify(key, link, Hash(other), PurposeLink, "sb1", 8000, now, day) != nil, nil},
		{"another key", Verify(otherKey, link, h, PurposeLink, "sb1", 8000, now, day) != nil, nil},
		{"no key", Verify(nil, link, h, PurposeLink, "sb1", 8000, now, day) != nil, nil},
		{"expired", Verify(key, link, h, PurposeLink, "sb1", 8000, now.Add(time.Minute), day) != nil, nil},
		{"tampered expiry", Verify(key, "9"+link, h, PurposeLink, "sb1", 8000, now, day) != nil, nil},
		{"garbage", Verify(key, strings.Repeat("x", 300), h, PurposeLink, "sb1", 8000, now, day) != nil, nil},
		// A value that lives longer than its kind may was not made by a
		// router or a gateway: refused even with a good MAC.
		{"expiry past the max age", Verify(key, sign(key, h, PurposeLink, "sb1", 8000, now.Add(day+2*time.Minute)), h, PurposeLink, "sb1", 8000, now, day) != nil, nil},
		{"expiry at the max age", true, Verify(key, sign(key, h, PurposeLink, "sb1", 8000, now.Add(day)), h, PurposeLink, "sb1", 8000, now, day)},
	}
	for _, c := range cases {
		if !c.ok || c.err != nil {
			t.Errorf("%s: ok=%v err=%v", c.name, c.ok, c.err)
		}
	}
	if _, err := Sign(nil, h, PurposeLink, "sb1", 8000, now); err != ErrNoKey {
		t.Errorf("Sign without a key: %v, want ErrNoKey", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "port-link.key")
	if err := WriteKey(f); err != nil {
		t.Fatal(err)
	}
	if err := WriteKey(f); err == nil {
		t.Error("WriteKey replaced a key")
	}
	if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", st.Mode(), err)
	}
	k, err := LoadKey(f)
	if err != nil || len(k) != KeySize {
		t.Fatalf("LoadKey: %d bytes, %v", len(k), err)
	}
	for name, content := range map[string]string{"short": "abcd\n", "not hex": strings.Repeat("zz", 32), "empty": ""} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(p); err == nil {
			t.Errorf("%s key file accepted", name)
		}
	}
}
