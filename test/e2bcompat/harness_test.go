//go:build integration

package e2bcompat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// dockerRouting serves E2B's two default templates: base on the Python
// image (bash, as the SDKs' /bin/bash -l -c needs), code-interpreter-v1 on
// the data image.
const dockerRouting = `default_class: standard
classes:
  standard: {backend: docker, image: "sandboxio/python:3.11", require_isolation: container}
  data: {backend: docker, image: "sandboxio/python-data:3.11", require_isolation: container}
`

var templates = map[string]e2bapi.Template{
	"base":                {Class: "standard", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024},
	"code-interpreter-v1": {Class: "data", CPUCount: 2, MemoryMB: 1024, DiskSizeMB: 1024},
}

func testLogger() *slog.Logger {
	if os.Getenv("E2BCOMPAT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// harness is the front door on an httptest server in front of a sandboxio
// with the Docker backend (the account layout with SBX_TEST_AUTH=1).
type harness struct {
	env  *sbxtest.Env
	srv  *httptest.Server
	keys map[string]string // tenant name -> API key
}

func startHarness(t *testing.T) *harness {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no docker daemon: %v", err)
	}
	_ = cli.Close()
	b, err := dockerworker.NewBackend(ctx, dockerworker.Config{WorkerID: "e2bc" + events.NewID()[:10], Logger: testLogger()})
	if err != nil {
		t.Fatalf("docker backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: dockerRouting, Logger: testLogger()})
	h := &harness{env: env, keys: map[string]string{}}
	js, err := jetstream.New(env.Conn("admin"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, e2bapi.BucketAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{authtest.TenantA, authtest.TenantB} {
		acc := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if env.Auth != nil {
			acc = env.Auth.TenantAccount(name)
		}
		key, _, err := e2bapi.AddKey(ctx, kv, acc, name)
		if err != nil {
			t.Fatal(err)
		}
		h.keys[name] = key
	}
	api, err := e2bapi.New(e2bapi.Config{Conn: env.Conn("e2b-frontdoor"), Templates: templates, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	h.srv = httptest.NewServer(api)
	t.Cleanup(h.srv.Close)
	return h
}

// sdkHeaders are what the Python SDK sends on the control plane.
func sdkHeaders(req *http.Request, key string) {
	req.Header.Set("X-API-KEY", key)
	req.Header.Set("User-Agent", "e2b-python-sdk/2.63.0")
	req.Header.Set("lang", "python")
	req.Header.Set("lang_version", "3.12.3")
	req.Header.Set("package_version", "2.63.0")
	req.Header.Set("publisher", "e2b")
	req.Header.Set("sdk_runtime", "python")
	req.Header.Set("system", "Linux")
}

func (h *harness) rest(t *testing.T, method, path, key string, body any) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, h.srv.URL+path, rd)
	sdkHeaders(req, key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// created is the SDK's view of a create reply.
type created struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

func (h *harness) create(t *testing.T, key, template string) created {
	t.Helper()
	resp, body := h.rest(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": template, "timeout": 300,
		"secure": true, "allow_internet_access": false, "metadata": map[string]string{"suite": "e2bcompat"}})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var c created
	if err := json.Unmarshal(body, &c); err != nil || c.SandboxID == "" || c.EnvdAccessToken == "" {
		t.Fatalf("create reply %s: %v", body, err)
	}
	t.Cleanup(func() { h.rest(t, "DELETE", "/sandboxes/"+c.SandboxID, key, nil) })
	return c
}

// envdReq is one sandbox-plane request as the SDKs send it.
type envdReq struct {
	method, path, contentType string
	body                      []byte
	header                    map[string]string
}

func (h *harness) envd(t *testing.T, sb created, port int, r envdReq) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(r.method, h.srv.URL+r.path, bytes.NewReader(r.body))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", itoa(port))
	req.Header.Set("User-Agent", "e2b-python-sdk/2.63.0")
	if sb.EnvdAccessToken != "" {
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	for k, v := range r.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// rpc is a unary Connect call with the JSON codec.
func (h *harness) rpc(t *testing.T, sb created, method string, msg any) (*http.Response, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(msg)
	resp, body := h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "POST", path: method, contentType: "application/json", body: b,
		header: map[string]string{"Connect-Protocol-Version": "1", "Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"))}})
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: body %q: %v", method, body, err)
	}
	return resp, m
}

// stream is a server-streaming Connect call; it returns the envelopes.
func (h *harness) stream(t *testing.T, sb created, method string, msg any, header map[string]string) []frame {
	t.Helper()
	b, _ := json.Marshal(msg)
	hdr := map[string]string{"Connect-Protocol-Version": "1", "Keepalive-Ping-Interval": "50",
		"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"))}
	for k, v := range header {
		hdr[k] = v
	}
	resp, body := h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "POST", path: method, contentType: "application/connect+json",
		body: envelope(0, b), header: hdr})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("%s: %d %q %s", method, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return frames(t, body)
}

func envelope(flags byte, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}

type frame struct {
	flags byte
	raw   string
	json  map[string]any
}

// frames splits a Connect streaming body strictly: whole envelopes, flags
// 0 or 2, the end-stream one last and only once.
func frames(t *testing.T, b []byte) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated envelope prefix %x", b)
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			t.Fatalf("envelope of %d bytes, %d left", n, len(b)-5)
		}
		f := frame{flags: b[0], raw: string(b[5 : 5+n])}
		if err := json.Unmarshal(b[5:5+n], &f.json); err != nil {
			t.Fatalf("envelope payload %q: %v", f.raw, err)
		}
		if f.flags != 0 && f.flags != 2 {
			t.Fatalf("envelope flags %d", f.flags)
		}
		if len(out) > 0 && out[len(out)-1].flags == 2 {
			t.Fatal("an envelope after the end-stream envelope")
		}
		out = append(out, f)
		b = b[5+n:]
	}
	if len(out) == 0 || out[len(out)-1].flags != 2 {
		t.Fatalf("stream without an end-stream envelope: %+v", out)
	}
	return out
}

// events of a process stream: kinds in order, stdout and stderr decoded,
// the end event and the end-stream error.
type procEvents struct {
	kinds          []string
	pid            float64
	stdout, stderr string
	end            map[string]any
	endErr         map[string]any
}

func decodeProc(t *testing.T, fs []frame) procEvents {
	t.Helper()
	var pe procEvents
	for _, f := range fs {
		if f.flags == 2 {
			if e, ok := f.json["error"].(map[string]any); ok {
				pe.endErr = e
			} else if len(f.json) != 0 {
				t.Fatalf("end-stream envelope %s", f.raw)
			}
			continue
		}
		ev, _ := f.json["event"].(map[string]any)
		if len(ev) != 1 {
			t.Fatalf("event %s: want exactly one of start, data, end, keepalive", f.raw)
		}
		for k, v := range ev {
			pe.kinds = append(pe.kinds, k)
			m, _ := v.(map[string]any)
			switch k {
			case "start":
				pe.pid, _ = m["pid"].(float64)
			case "data":
				for s, enc := range m {
					raw, err := base64.StdEncoding.DecodeString(enc.(string))
					if err != nil {
						t.Fatalf("data %s is not standard base64: %v", f.raw, err)
					}
					if s == "stdout" {
						pe.stdout += string(raw)
					} else if s == "stderr" {
						pe.stderr += string(raw)
					} else {
						t.Fatalf("data stream %q", s)
					}
				}
			case "end":
				pe.end = m
			case "keepalive":
			default:
				t.Fatalf("event kind %q", k)
			}
		}
	}
	if len(pe.kinds) == 0 || pe.kinds[0] != "start" || pe.pid <= 0 {
		t.Fatalf("first event %v (pid %v), want start with a pid", pe.kinds, pe.pid)
	}
	return pe
}

// bash is the SDK's commands.run body.
func bash(cmd string, stdin bool) map[string]any {
	return map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}, "envs": map[string]string{}},
		"stdin": stdin}
}
