package e2bapi_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/authtest"
)

// endlessA is n bytes of 'A' (valid base64), made as they are read.
type endlessA struct{ n int64 }

func (r *endlessA) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	for i := range p {
		p[i] = 'A'
	}
	r.n -= int64(len(p))
	return len(p), nil
}

// envdCall posts one Connect request to a sandbox's envd and returns the
// answer's status, content type and body.
func envdCall(t *testing.T, h *harness, id, token, path, contentType string, body io.Reader) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", h.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
		"Content-Type": contentType, "Connect-Protocol-Version": "1"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// TestEnvdMessageBound: a Connect message larger than the largest legal
// one (a stdin chunk sandboxio accepts, with room for the rest) is
// envd's resource_exhausted, unary or streamed, before it is read
// whole; calls of legal size go on being served.
func TestEnvdMessageBound(t *testing.T) {
	h := startHarness(t)
	resp, body := h.do(t, "POST", "/sandboxes", h.keys[authtest.TenantA], map[string]any{"templateID": "base", "timeout": 120})
	var sb struct{ SandboxID, EnvdAccessToken string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	const huge = 64 << 20

	// Unary SendInput: a 64 MiB JSON body.
	big := io.MultiReader(strings.NewReader(`{"process":{"pid":7},"input":{"stdin":"`), &endlessA{huge},
		strings.NewReader(`"}}`))
	status, _, b := envdCall(t, h, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/SendInput", "application/json", big)
	var ce struct{ Code, Message string }
	if status != http.StatusTooManyRequests || json.Unmarshal(b, &ce) != nil || ce.Code != "resource_exhausted" {
		t.Fatalf("64 MiB SendInput: %d %.300s, want 429 resource_exhausted", status, b)
	}

	// Streamed Start: an envelope that says 64 MiB.
	var env bytes.Buffer
	env.Write([]byte{0, 0, 0, 0, 0})
	binary.BigEndian.PutUint32(env.Bytes()[1:], huge)
	env.WriteString(`{"process":{"cmd":"echo","args":["`)
	status, ct, b := envdCall(t, h, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/Start", "application/connect+json",
		io.MultiReader(&env, &endlessA{huge}))
	if status != http.StatusOK || ct != "application/connect+json" || len(b) < 5 || b[0]&2 == 0 ||
		!bytes.Contains(b[5:], []byte(`"code":"resource_exhausted"`)) {
		t.Fatalf("64 MiB Start: %d %s %.300q, want an end-stream resource_exhausted", status, ct, b)
	}

	// A legal call is still served: it reaches sandboxio, which does not
	// know the pid.
	status, _, b = envdCall(t, h, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/SendInput", "application/json",
		strings.NewReader(`{"process":{"pid":7},"input":{"stdin":"aGk="}}`))
	if status != http.StatusNotFound || json.Unmarshal(b, &ce) != nil || ce.Code != "not_found" {
		t.Fatalf("SendInput: %d %s, want 404 not_found", status, b)
	}
}
