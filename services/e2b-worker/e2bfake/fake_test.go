package e2bfake_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
)

// raw sends one API request and returns status, headers and body.
func raw(t *testing.T, method, url, key, body string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestControlPlaneWire(t *testing.T) {
	fake := e2bfake.New(e2bfake.Options{})
	fake.Start()
	defer fake.Close()
	api, key := fake.APIURL(), fake.APIKey()

	st, _, body := raw(t, "POST", api+"/sandboxes", key, `{"templateID":"base","timeout":60,"secure":true,"allow_internet_access":true,"metadata":{"k":"v"}}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	var sb map[string]any
	_ = json.Unmarshal([]byte(body), &sb)
	id, _ := sb["sandboxID"].(string)
	for _, k := range []string{"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken"} {
		if _, ok := sb[k]; !ok {
			t.Errorf("create answer lacks %s: %s", k, body)
		}
	}
	tests := []struct {
		name, method, path, key, body string
		status                        int
		wantBody                      string
		wantHeader                    string
	}{
		{name: "no key", method: "GET", path: "/v2/sandboxes", status: 401, wantBody: `{"code":401,"message":"Authorization header is missing"}`},
		{name: "bad key", method: "GET", path: "/v2/sandboxes", key: "e2b_bad", status: 401, wantBody: `{"code":401,"message":"Invalid API key"}`},
		{name: "timeout zero", method: "POST", path: "/sandboxes", key: key, body: `{"templateID":"base","timeout":0,"secure":true}`, status: 400, wantBody: `{"code":400,"message":"Timeout must be greater than 0"}`},
		{name: "timeout too long", method: "POST", path: "/sandboxes", key: key, body: `{"templateID":"base","timeout":7200,"secure":true}`, status: 400, wantBody: `{"code":400,"message":"Timeout cannot be greater than 1 hours"}`},
		{name: "wrong type", method: "POST", path: "/sandboxes", key: key, body: `{"templateID":"base","timeout":"60","secure":true}`, status: 400},
		{name: "get missing", method: "GET", path: "/sandboxes/inope", key: key, status: 404, wantBody: `{"code":404,"message":"sandbox \"inope\" doesn't exist or you don't have access to it"}`},
		{name: "list", method: "GET", path: "/v2/sandboxes?metadata=k%3Dv&limit=1", key: key, status: 200, wantHeader: "X-Total-Running"},
		{name: "list bad limit", method: "GET", path: "/v2/sandboxes?limit=500", key: key, status: 400},
		{name: "timeout", method: "POST", path: "/sandboxes/" + id + "/timeout", key: key, body: `{"timeout":30}`, status: 204},
		{name: "connect running", method: "POST", path: "/sandboxes/" + id + "/connect", key: key, body: `{"timeout":30}`, status: 200},
		{name: "pause", method: "POST", path: "/sandboxes/" + id + "/pause", key: key, status: 204},
		{name: "pause again", method: "POST", path: "/sandboxes/" + id + "/pause", key: key, status: 409},
		{name: "connect resumes", method: "POST", path: "/sandboxes/" + id + "/connect", key: key, body: `{"timeout":30}`, status: 201},
		{name: "kill", method: "DELETE", path: "/sandboxes/" + id, key: key, status: 204},
		{name: "kill again", method: "DELETE", path: "/sandboxes/" + id, key: key, status: 404},
		{name: "health", method: "GET", path: "/health", status: 200, wantBody: "Health check successful"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, hdr, body := raw(t, tc.method, api+tc.path, tc.key, tc.body)
			if st != tc.status {
				t.Fatalf("status = %d, want %d (%s)", st, tc.status, body)
			}
			if tc.wantBody != "" && body != tc.wantBody {
				t.Errorf("body = %s, want %s", body, tc.wantBody)
			}
			if st >= 400 && !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Errorf("error Content-Type = %q", hdr.Get("Content-Type"))
			}
			if tc.wantHeader != "" && hdr.Get(tc.wantHeader) == "" {
				t.Errorf("missing header %s", tc.wantHeader)
			}
		})
	}
	// Deviations were recorded for the malformed requests above.
	devs := strings.Join(fake.Deviations(), "\n")
	for _, want := range []string{"missing X-API-Key", "wrong type", "limit"} {
		if !strings.Contains(devs, want) {
			t.Errorf("deviations lack %q:\n%s", want, devs)
		}
	}
}

func TestDataPlaneRouting(t *testing.T) {
	fake := e2bfake.New(e2bfake.Options{})
	fake.Start()
	defer fake.Close()
	sb, err := fake.CreateSandbox(e2bfake.SandboxOptions{Secure: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	do := func(id, port, path, token string) (int, string) {
		req, _ := http.NewRequest("GET", fake.SandboxURL()+path, nil)
		if id != "" {
			req.Header.Set("E2b-Sandbox-Id", id)
		}
		if port != "" {
			req.Header.Set("E2b-Sandbox-Port", port)
		}
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, id, port, path, token string
		status                      int
		body                        string
	}{
		{name: "health", id: sb.ID, port: "49983", path: "/health", status: 204},
		{name: "missing port header", id: sb.ID, path: "/health", status: 400, body: "Missing header: E2b-Sandbox-Port\n"},
		{name: "unknown sandbox", id: "inope", port: "49983", path: "/health", status: 502, body: `{"sandboxId":"inope","message":"The sandbox was not found","code":502}`},
		{name: "closed port", id: sb.ID, port: "8080", path: "/", status: 502, body: `{"sandboxId":"` + sb.ID + `","message":"The sandbox is running but port is not open","port":8080,"code":502}`},
		{name: "envs needs token", id: sb.ID, port: "49983", path: "/envs", status: 401, body: `{"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"}` + "\n"},
		{name: "envs with token", id: sb.ID, port: "49983", path: "/envs", token: sb.EnvdAccessToken, status: 200, body: "{}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, body := do(tc.id, tc.port, tc.path, tc.token)
			if st != tc.status || tc.body != "" && body != tc.body {
				t.Fatalf("= %d %q, want %d %q", st, body, tc.status, tc.body)
			}
		})
	}
	fake.ExpireSandbox(sb.ID)
	if st, _ := do(sb.ID, "49983", "/health", ""); st != 502 {
		t.Fatalf("health after expiry = %d, want 502", st)
	}
}

// recorder is a TB that records failures instead of failing.
type recorder struct {
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Cleanup(f func())                  { r.cleanups = append(r.cleanups, f) }

func TestFailOnDeviation(t *testing.T) {
	rec := &recorder{}
	fake := e2bfake.New(e2bfake.Options{TB: rec})
	fake.Start()
	resp, err := http.Post(fake.APIURL()+"/sandboxes", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i := len(rec.cleanups) - 1; i >= 0; i-- {
		rec.cleanups[i]()
	}
	if len(rec.errs) == 0 {
		t.Fatal("a request without X-API-Key must fail the test")
	}
}
