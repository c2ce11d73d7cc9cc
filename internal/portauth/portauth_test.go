package portauth

import (
	"strings"
	"testing"
	"time"
)

func TestTokenAndSignedValues(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	h := Hash(tok)
	now := time.Unix(1_800_000_000, 0)
	link := Sign(h, PurposeLink, "sb1", 8000, now.Add(time.Minute))
	other, _ := NewToken()
	cases := []struct {
		name string
		ok   bool
		err  error
	}{
		{"token", CheckToken(tok, h), nil},
		{"wrong token", !CheckToken(other, h), nil},
		{"empty token", !CheckToken("", h), nil},
		{"link", true, Verify(link, h, PurposeLink, "sb1", 8000, now)},
		{"link as cookie", Verify(link, h, PurposeCookie, "sb1", 8000, now) != nil, nil},
		{"other port", Verify(link, h, PurposeLink, "sb1", 8001, now) != nil, nil},
		{"other sandbox", Verify(link, h, PurposeLink, "sb2", 8000, now) != nil, nil},
		{"rotated", Verify(link, Hash(other), PurposeLink, "sb1", 8000, now) != nil, nil},
		{"expired", Verify(link, h, PurposeLink, "sb1", 8000, now.Add(time.Minute)) != nil, nil},
		{"tampered expiry", Verify("9"+link, h, PurposeLink, "sb1", 8000, now) != nil, nil},
		{"garbage", Verify(strings.Repeat("x", 300), h, PurposeLink, "sb1", 8000, now) != nil, nil},
	}
	for _, c := range cases {
		if !c.ok || c.err != nil {
			t.Errorf("%s: ok=%v err=%v", c.name, c.ok, c.err)
		}
	}
}
