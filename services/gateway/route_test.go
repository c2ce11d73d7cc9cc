package gateway

import "testing"

func TestHostTarget(t *testing.T) {
	cases := []struct {
		host string
		id   string
		port int
		ok   bool
	}{
		{"8000-abc.sbx.localhost", "abc", 8000, true},
		{"8000-abc.sbx.localhost:8480", "abc", 8000, true},
		{"8000-ABC.SBX.localhost.", "abc", 8000, true},
		{"8000-a-b_c.sbx.localhost", "a-b_c", 8000, true},
		{"65535-x.sbx.localhost", "x", 65535, true},
		{"0-x.sbx.localhost", "", 0, false},
		{"08000-x.sbx.localhost", "", 0, false},
		{"65536-x.sbx.localhost", "", 0, false},
		{"+80-x.sbx.localhost", "", 0, false},
		{"80-.sbx.localhost", "", 0, false},
		{"80x.sbx.localhost", "", 0, false},
		{"80-x.y.sbx.localhost", "", 0, false},
		{"sbx.localhost", "", 0, false},
		{"80-x.sbx.localhost.evil", "", 0, false},
		{"80-x.evilsbx.localhost", "", 0, false},
		{"80-x%2e.sbx.localhost", "", 0, false},
	}
	for _, c := range cases {
		got, ok := hostTarget(c.host, "sbx.localhost")
		if ok != c.ok || got.sandboxID != c.id || got.port != c.port {
			t.Errorf("%q: got %+v %v, want %s:%d %v", c.host, got, ok, c.id, c.port, c.ok)
		}
	}
}

func TestPathTarget(t *testing.T) {
	cases := []struct {
		path          string
		id            string
		port          int
		rest, rawRest string
		slash, ok     bool
	}{
		{"/sandboxes/abc/ports/8000/", "abc", 8000, "/", "", true, true},
		{"/sandboxes/abc/ports/8000/x/y?q", "abc", 8000, "/x/y?q", "", true, true},
		{"/sandboxes/abc/ports/8000/a%2Fb", "abc", 8000, "/a/b", "/a%2Fb", true, true},
		{"/sandboxes/abc/ports/8000", "abc", 8000, "", "", false, true},
		{"/sandboxes/abc/ports/0/", "", 0, "", "", false, false},
		{"/sandboxes/a.b/ports/80/", "", 0, "", "", false, false},
		{"/sandboxes/a%2Fb/ports/80/", "", 0, "", "", false, false},
		{"/sandboxes/abc/port/80/", "", 0, "", "", false, false},
		{"/sandboxes//ports/80/", "", 0, "", "", false, false},
		{"/other", "", 0, "", "", false, false},
	}
	for _, c := range cases {
		got, slash, ok := pathTarget(c.path)
		if ok != c.ok || slash != c.slash || got.sandboxID != c.id || got.port != c.port || got.path != c.rest || got.rawPath != c.rawRest {
			t.Errorf("%q: got %+v slash=%v ok=%v", c.path, got, slash, ok)
		}
	}
}

func TestWithoutParam(t *testing.T) {
	cases := []struct{ in, out string }{
		{"", ""},
		{"sbx_link=1", ""},
		{"a=1&sbx_link=2&b=3", "a=1&b=3"},
		{"sbx%5Flink=2&b=%2F", "b=%2F"},
		{"z=1&a=2", "z=1&a=2"},
	}
	for _, c := range cases {
		if got, _ := withoutParam(c.in, "sbx_link"); got != c.out {
			t.Errorf("%q: %q, want %q", c.in, got, c.out)
		}
	}
}
