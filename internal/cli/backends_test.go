package cli

import "testing"

func TestParsePools(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		fail bool
	}{
		{"", 0, false},
		{"sandboxio/python:3.11=4", 1, false},
		{"sandboxio/python:3.11=4, sandboxio/base:latest@runsc=1", 2, false},
		{"sandboxio/python:3.11", 0, true},
		{"img=-1", 0, true},
		{"img=x", 0, true},
	} {
		pools, err := parsePools(tc.in)
		if (err != nil) != tc.fail || len(pools) != tc.n {
			t.Errorf("parsePools(%q) = %+v, %v", tc.in, pools, err)
		}
	}
	pools, _ := parsePools("sandboxio/base:latest@runsc=2")
	if p := pools[0]; p.Image != "sandboxio/base:latest" || p.Runtime != "runsc" || p.Size != 2 {
		t.Errorf("parsed %+v", p)
	}
}
