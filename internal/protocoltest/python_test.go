package protocoltest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestPythonWithoutSDK runs examples/python/sandboxio_raw.py — a client that
// speaks the NATS wire protocol by hand — against a live system: create,
// streamed exec followed on sbx.live.<tenant>…, a replay by attach, kill,
// and a coded error for bad input.
func TestPythonWithoutSDK(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	env := sbxtest.Start(t, sbxtest.Options{Listen: true})
	if env.Auth != nil {
		t.Skip("the raw client sends no creds (an ed25519 signature the standard library cannot make)")
	}
	cmd := exec.Command(py, "../../examples/python/sandboxio_raw.py", env.URL, "fake", "--", "interleave", "3")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python client: %v\n%s\n%s", err, out, stderr.String())
	}
	var stdout, errout strings.Builder
	var sawCreate, sawExit, sawKill, sawBad, sawReplay bool
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not JSON: %q", sc.Text())
		}
		switch {
		case line["bad_request_code"] != nil:
			sawBad = line["bad_request_code"] == "SBX_E1005"
		case line["created"] != nil:
			sawCreate = true
		case line["chunk"] == "stdout":
			stdout.WriteString(line["data"].(string))
		case line["chunk"] == "stderr":
			errout.WriteString(line["data"].(string))
		case line["exit"] != nil:
			sawExit = line["exit_code_header"] == "0"
		case line["replayed"] != nil:
			// Every stored message: at least a stdout and a stderr chunk
			// and the exit marker.
			n, _ := line["replayed"].(float64)
			sawReplay = line["replayed"] == line["stored"] && n >= 3
		case line["killed"] != nil:
			sawKill = line["killed"].(map[string]any)["state"] == "gone"
		}
	}
	if !sawBad || !sawCreate || !sawExit || !sawKill || !sawReplay {
		t.Fatalf("python client output incomplete (bad=%v create=%v exit=%v replay=%v kill=%v):\n%s", sawBad, sawCreate, sawExit, sawReplay, sawKill, out)
	}
	if stdout.String() != "out 1\nout 2\nout 3\n" || errout.String() != "err 1\nerr 2\nerr 3\n" {
		t.Fatalf("streamed output: stdout %q stderr %q", stdout.String(), errout.String())
	}
}
