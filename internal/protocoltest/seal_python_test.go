package protocoltest

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestDocSealInPython runs the Python sealing code of docs/protocol.md
// (PyNaCl's Box) and opens its box with the recipient's xkey as a worker
// does: a plain client can seal secrets exactly as the doc says.
func TestDocSealInPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	var withNaCl string
	for _, p := range []string{py, "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import nacl.public").Run() == nil {
			withNaCl = p
			break
		}
	}
	if withNaCl == "" {
		t.Skip("no PyNaCl (Debian: python3-nacl)")
	}
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "Sealing in Python")
	if !ok {
		t.Fatal("docs/protocol.md has no Python sealing example")
	}
	_, rest, _ = strings.Cut(rest, "```python\n")
	code, _, _ := strings.Cut(rest, "```")
	worker, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := worker.PublicKey()
	const canary = "canary-py-0b7d"
	prog := code + "\nimport sys\nprint(json.dumps(seal({\"API_KEY\": \"" + canary + "\"}, sys.argv[1])))\n"
	out, err := exec.Command(withNaCl, "-c", prog, pub).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var box events.SealedBox
	if err := json.Unmarshal(out, &box); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if box.Recipient != pub || !strings.HasPrefix(box.Sender, "X") {
		t.Fatalf("box: %+v", box)
	}
	if _, err := nkeys.FromPublicKey(box.Sender); err != nil {
		t.Fatalf("sender %s is no valid xkey: %v", box.Sender, err)
	}
	data, err := base64.StdEncoding.DecodeString(box.Data)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := worker.Open(data, box.Sender)
	if err != nil {
		t.Fatalf("the worker's key does not open the Python box: %v", err)
	}
	var secrets map[string]string
	if err := json.Unmarshal(plain, &secrets); err != nil || secrets["API_KEY"] != canary {
		t.Fatalf("opened %q (%v)", plain, err)
	}
}
