//go:build integration

package e2bcompat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// TestSDKRequests sends exactly the SDKs' sandbox-plane requests (routing
// headers, access token, Basic user, the Start body with /bin/bash -l -c,
// multipart field "file", the JSON codec) to sandboxes on real Docker
// containers, and decodes every answer as strictly as the SDK parsers.
func TestSDKRequests(t *testing.T) {
	h := startHarness(t)
	ka := h.keys[authtest.TenantA]
	sb := h.create(t, ka, "base")

	t.Run("health", func(t *testing.T) {
		resp, body := h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "GET", path: "/health"})
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("health: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("commands.run exit 3", func(t *testing.T) {
		pe := decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("echo hello; echo oops >&2; exit 3", false),
			map[string]string{"Connect-Timeout-Ms": "60000"}))
		if pe.stdout != "hello\n" || pe.stderr != "oops\n" || pe.endErr != nil {
			t.Fatalf("stdout %q stderr %q end-stream error %v", pe.stdout, pe.stderr, pe.endErr)
		}
		want := map[string]any{"exitCode": float64(3), "exited": true, "status": "exit status 3", "error": "exit status 3"}
		if fmt.Sprint(pe.end) != fmt.Sprint(want) {
			t.Fatalf("end %v, want %v", pe.end, want)
		}
	})
	t.Run("commands.run exit 0 omits exitCode", func(t *testing.T) {
		pe := decodeProc(t, h.stream(t, sb, "/process.Process/Start",
			map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "echo $FOO; pwd"},
				"envs": map[string]string{"FOO": "bar baz"}, "cwd": "/tmp"}, "stdin": false}, nil))
		if pe.stdout != "bar baz\n/tmp\n" {
			t.Fatalf("stdout %q", pe.stdout)
		}
		if _, ok := pe.end["exitCode"]; ok || pe.end["exited"] != true || pe.end["status"] != "exit status 0" {
			t.Fatalf("end %v: want exited, status exit status 0, no exitCode", pe.end)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		done := make(chan procEvents, 1)
		go func() { done <- decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("cat", true), nil)) }()
		// The process's pid is only in the stream: List finds it.
		var pid float64
		deadline := time.Now().Add(20 * time.Second)
		for pid == 0 && time.Now().Before(deadline) {
			_, m := h.rpc(t, sb, "/process.Process/List", map[string]any{})
			if ps, _ := m["processes"].([]any); len(ps) > 0 {
				pid, _ = ps[0].(map[string]any)["pid"].(float64)
			}
		}
		if pid == 0 {
			t.Fatal("List never showed the cat process")
		}
		sel := map[string]any{"pid": pid}
		if resp, m := h.rpc(t, sb, "/process.Process/SendInput", map[string]any{"process": sel,
			"input": map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("abc\n"))}}); resp.StatusCode != 200 || len(m) != 0 {
			t.Fatalf("SendInput: %d %v", resp.StatusCode, m)
		}
		if resp, m := h.rpc(t, sb, "/process.Process/CloseStdin", map[string]any{"process": sel}); resp.StatusCode != 200 {
			t.Fatalf("CloseStdin: %d %v", resp.StatusCode, m)
		}
		pe := <-done
		if pe.stdout != "abc\n" || pe.end["status"] != "exit status 0" {
			t.Fatalf("cat: stdout %q end %v", pe.stdout, pe.end)
		}
	})
	t.Run("kill", func(t *testing.T) {
		done := make(chan procEvents, 1)
		go func() {
			done <- decodeProc(t, h.stream(t, sb, "/process.Process/Start",
				map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "sleep 30"}}, "stdin": false, "tag": "sleeper"}, nil))
		}()
		var m map[string]any
		var resp *http.Response
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if resp, m = h.rpc(t, sb, "/process.Process/SendSignal", map[string]any{"process": map[string]any{"tag": "sleeper"}, "signal": "SIGNAL_SIGKILL"}); resp.StatusCode == 200 {
				break
			}
		}
		if resp.StatusCode != 200 {
			t.Fatalf("SendSignal by tag: %d %v", resp.StatusCode, m)
		}
		pe := <-done
		if pe.end["exitCode"] != float64(-1) || pe.end["status"] != "signal: killed" || pe.end["exited"] != nil {
			t.Fatalf("killed: end %v", pe.end)
		}
		resp, m = h.rpc(t, sb, "/process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 424242}, "signal": "SIGNAL_SIGKILL"})
		if resp.StatusCode != http.StatusNotFound || m["code"] != "not_found" {
			t.Fatalf("signal of an unknown pid: %d %v", resp.StatusCode, m)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		pe := decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("sleep 5", false), map[string]string{"Connect-Timeout-Ms": "1000"}))
		if pe.endErr["code"] != "deadline_exceeded" || pe.end != nil {
			t.Fatalf("Connect-Timeout-Ms: end %v, end-stream error %v", pe.end, pe.endErr)
		}
	})
	t.Run("files", func(t *testing.T) {
		var form bytes.Buffer
		mw := multipart.NewWriter(&form)
		fw, _ := mw.CreateFormFile("file", "/tmp/e2b/hello.txt")
		fw.Write([]byte("hello files\n"))
		mw.Close()
		resp, body := h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "POST", path: "/files?path=%2Ftmp%2Fe2b%2Fhello.txt&username=user",
			contentType: mw.FormDataContentType(), body: form.Bytes()})
		var wrote []map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(body, &wrote) != nil || len(wrote) != 1 || wrote[0]["path"] != "/tmp/e2b/hello.txt" || wrote[0]["type"] != "file" || wrote[0]["name"] != "hello.txt" {
			t.Fatalf("upload: %d %s", resp.StatusCode, body)
		}
		resp, body = h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "POST", path: "/files?path=%2Ftmp%2Fe2b%2Fraw.bin&username=user",
			contentType: "application/octet-stream", body: []byte{0, 1, 2, 255}})
		if resp.StatusCode != 200 {
			t.Fatalf("octet-stream upload: %d %s", resp.StatusCode, body)
		}
		resp, body = h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "GET", path: "/files?path=%2Ftmp%2Fe2b%2Fhello.txt&username=user"})
		if resp.StatusCode != 200 || string(body) != "hello files\n" {
			t.Fatalf("download: %d %q", resp.StatusCode, body)
		}
		resp, body = h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "GET", path: "/files?path=%2Ftmp%2Fe2b%2Fnope&username=user"})
		var e map[string]any
		if resp.StatusCode != 404 || json.Unmarshal(body, &e) != nil || e["code"] != float64(404) {
			t.Fatalf("download of a missing file: %d %s", resp.StatusCode, body)
		}
		_, m := h.rpc(t, sb, "/filesystem.Filesystem/ListDir", map[string]any{"path": "/tmp/e2b", "depth": 1})
		entries, _ := m["entries"].([]any)
		names := map[string]map[string]any{}
		for _, x := range entries {
			en := x.(map[string]any)
			names[en["name"].(string)] = en
		}
		if en := names["hello.txt"]; en == nil || en["type"] != "FILE_TYPE_FILE" || en["size"] != "12" || en["path"] != "/tmp/e2b/hello.txt" || !strings.HasPrefix(en["permissions"].(string), "-") {
			t.Fatalf("ListDir: %v", m)
		}
		resp, m = h.rpc(t, sb, "/filesystem.Filesystem/MakeDir", map[string]any{"path": "/tmp/e2b/d"})
		if resp.StatusCode != 200 || m["entry"].(map[string]any)["type"] != "FILE_TYPE_DIRECTORY" {
			t.Fatalf("MakeDir: %d %v", resp.StatusCode, m)
		}
		resp, m = h.rpc(t, sb, "/filesystem.Filesystem/MakeDir", map[string]any{"path": "/tmp/e2b/d"})
		if resp.StatusCode != http.StatusConflict || m["code"] != "already_exists" {
			t.Fatalf("MakeDir again: %d %v", resp.StatusCode, m)
		}
		resp, m = h.rpc(t, sb, "/filesystem.Filesystem/Move", map[string]any{"source": "/tmp/e2b/raw.bin", "destination": "/tmp/e2b/d/moved.bin"})
		if resp.StatusCode != 200 || m["entry"].(map[string]any)["size"] != "4" {
			t.Fatalf("Move: %d %v", resp.StatusCode, m)
		}
		resp, m = h.rpc(t, sb, "/filesystem.Filesystem/Stat", map[string]any{"path": "/tmp/e2b/raw.bin"})
		if resp.StatusCode != http.StatusNotFound || m["code"] != "not_found" {
			t.Fatalf("Stat of a moved file: %d %v", resp.StatusCode, m)
		}
		resp, m = h.rpc(t, sb, "/filesystem.Filesystem/Remove", map[string]any{"path": "/tmp/e2b/d"})
		if resp.StatusCode != 200 || len(m) != 0 {
			t.Fatalf("Remove: %d %v", resp.StatusCode, m)
		}
		resp, m = h.rpc(t, sb, "/filesystem.Filesystem/Stat", map[string]any{"path": "/tmp/e2b/d"})
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("Stat after Remove: %d %v", resp.StatusCode, m)
		}
	})
}

// TestSandboxPlaneRefusals: a bad token, another sandbox's token, another
// tenant's sandbox, a malformed Connect envelope, an oversized upload and
// a killed sandbox each get envd's or E2B's proxy's answer, and nothing
// runs in the sandbox addressed.
func TestSandboxPlaneRefusals(t *testing.T) {
	h := startHarness(t)
	a := h.create(t, h.keys[authtest.TenantA], "base")
	a2 := h.create(t, h.keys[authtest.TenantA], "base")
	b := h.create(t, h.keys[authtest.TenantB], "base")
	start, _ := json.Marshal(bash("touch /tmp/ran", false))
	startReq := envdReq{method: "POST", path: "/process.Process/Start", contentType: "application/connect+json",
		body: envelope(0, start), header: map[string]string{"Connect-Protocol-Version": "1", "Keepalive-Ping-Interval": "50"}}
	unauthorized := func(t *testing.T, resp *http.Response, body []byte) {
		t.Helper()
		var e map[string]any
		if resp.StatusCode != 401 || json.Unmarshal(body, &e) != nil || e["code"] != float64(401) {
			t.Fatalf("want 401 {code:401}: %d %s", resp.StatusCode, body)
		}
	}
	for _, c := range []struct {
		name string
		sb   created
	}{
		{"no token", created{SandboxID: a.SandboxID}},
		{"garbage token", created{SandboxID: a.SandboxID, EnvdAccessToken: "x.y"}},
		{"sibling's token", created{SandboxID: a.SandboxID, EnvdAccessToken: a2.EnvdAccessToken}},
		{"other tenant's token", created{SandboxID: a.SandboxID, EnvdAccessToken: b.EnvdAccessToken}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := h.envd(t, c.sb, e2bapi.EnvdPort, startReq)
			unauthorized(t, resp, body)
			resp, body = h.envd(t, c.sb, e2bapi.EnvdPort, envdReq{method: "GET", path: "/files?path=%2Fetc%2Fhostname"})
			unauthorized(t, resp, body)
		})
	}
	t.Run("bad envelopes", func(t *testing.T) {
		long := envelope(0, start)
		long[4] += 50 // declares more than it carries
		for name, body := range map[string][]byte{"length": long, "compressed flag": envelope(1, start), "end flag": envelope(2, start),
			"short": envelope(0, start)[:3]} {
			r := startReq
			r.body = body
			resp, out := h.envd(t, a, e2bapi.EnvdPort, r)
			if resp.StatusCode == 200 && resp.Header.Get("Content-Type") == "application/connect+json" {
				fs := frames(t, out)
				if len(fs) != 1 || fs[0].json["error"] == nil {
					t.Fatalf("%s: %d envelopes %+v, want one end-stream error", name, len(fs), fs)
				}
				t.Logf("%s: end-stream %s", name, fs[0].raw)
			} else if resp.StatusCode < 400 {
				t.Fatalf("%s: %d %s", name, resp.StatusCode, out)
			}
		}
	})
	t.Run("oversized upload", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 101<<20)
		resp, body := h.envd(t, a, e2bapi.EnvdPort, envdReq{method: "POST", path: "/files?path=%2Ftmp%2Fbig", contentType: "application/octet-stream", body: big})
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("101 MiB upload: %d %s", resp.StatusCode, body)
		}
	})
	// Nothing of the above ran in a.
	pe := decodeProc(t, h.stream(t, a, "/process.Process/Start", bash("test -e /tmp/ran && echo ran || echo clean; test -e /tmp/big && echo big", false), nil))
	if pe.stdout != "clean\n" {
		t.Fatalf("refused requests reached the sandbox: %q", pe.stdout)
	}
	t.Run("killed sandbox", func(t *testing.T) {
		if resp, body := h.rest(t, "DELETE", "/sandboxes/"+a2.SandboxID, h.keys[authtest.TenantA], nil); resp.StatusCode != 204 {
			t.Fatalf("kill: %d %s", resp.StatusCode, body)
		}
		resp, body := h.envd(t, a2, e2bapi.EnvdPort, envdReq{method: "GET", path: "/health"})
		var e map[string]any
		if resp.StatusCode != http.StatusBadGateway || json.Unmarshal(body, &e) != nil || e["code"] != float64(502) || e["sandboxId"] != a2.SandboxID {
			t.Fatalf("health of a killed sandbox: %d %s", resp.StatusCode, body)
		}
	})
}

// TestPauseAndConnect: the SDK's pause (204, then 409 when paused again),
// list with state=paused, get's state, and connect resuming it (201) with
// its files, on Docker's files-only snapshots.
func TestPauseAndConnect(t *testing.T) {
	h := startHarness(t)
	key := h.keys[authtest.TenantA]
	sb := h.create(t, key, "base")
	decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("echo kept > /tmp/kept.txt", false), nil))
	if resp, body := h.rest(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, map[string]bool{"memory": true}); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.rest(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil); resp.StatusCode != http.StatusConflict {
		t.Fatalf("pause of a paused sandbox: %d %s", resp.StatusCode, body)
	}
	resp, body := h.rest(t, "GET", "/v2/sandboxes?state=paused", key, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), sb.SandboxID) || !strings.Contains(string(body), `"state":"paused"`) {
		t.Fatalf("list paused: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.envd(t, sb, e2bapi.EnvdPort, envdReq{method: "GET", path: "/health"}); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("health of a paused sandbox: %d %s", resp.StatusCode, body)
	}
	resp, body = h.rest(t, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", key, map[string]int{"timeout": 120})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("connect to a paused sandbox: %d %s, want 201 (resumed)", resp.StatusCode, body)
	}
	var c created
	if err := json.Unmarshal(body, &c); err != nil || c.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("connect reply %s", body)
	}
	pe := decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("cat /tmp/kept.txt", false), nil))
	if pe.stdout != "kept\n" {
		t.Fatalf("after resume: %q", pe.stdout)
	}
	if resp, body := h.rest(t, "POST", "/sandboxes/"+sb.SandboxID+"/connect", key, map[string]int{"timeout": 120}); resp.StatusCode != http.StatusOK {
		t.Fatalf("connect to a running sandbox: %d %s", resp.StatusCode, body)
	}
}

// TestCodeInterpreterRequests: the code-interpreter SDK's /execute (port
// 49999, X-Access-Token) answers NDJSON, end_of_execution last, with the
// main result; /contexts (which the SDK sends with the traffic token
// only) creates a context whose state lasts.
func TestCodeInterpreterRequests(t *testing.T) {
	h := startHarness(t)
	sb := h.create(t, h.keys[authtest.TenantA], "code-interpreter-v1")
	lines := func(body []byte) []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("NDJSON line %q: %v", l, err)
			}
			if m["type"] != "keepalive" {
				out = append(out, m)
			}
		}
		if len(out) == 0 || out[len(out)-1]["type"] != "end_of_execution" {
			t.Fatalf("no end_of_execution last: %s", body)
		}
		return out
	}
	resp, body := h.envd(t, sb, 49999, envdReq{method: "POST", path: "/contexts", contentType: "application/json",
		body:   []byte(`{"language":"python","cwd":"/tmp"}`),
		header: map[string]string{"X-Access-Token": "", "E2B-Traffic-Access-Token": sb.EnvdAccessToken}})
	var ctxReply map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &ctxReply) != nil || ctxReply["id"] == "" {
		t.Fatalf("/contexts with the traffic token only (as the SDK sends it): %d %s", resp.StatusCode, body)
	}
	resp, body = h.envd(t, sb, 49999, envdReq{method: "POST", path: "/contexts", contentType: "application/json",
		body: []byte(`{}`), header: map[string]string{"X-Access-Token": ""}})
	if resp.StatusCode != 401 {
		t.Fatalf("/contexts with no token: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ code, want string }{{"x = 6", ""}, {"print('out'); x * 7", "42"}} {
		b, _ := json.Marshal(map[string]any{"code": c.code, "context_id": ctxReply["id"]})
		resp, body := h.envd(t, sb, 49999, envdReq{method: "POST", path: "/execute", contentType: "application/json", body: b})
		if resp.StatusCode != 200 {
			t.Fatalf("/execute: %d %s", resp.StatusCode, body)
		}
		got := ""
		for _, m := range lines(body) {
			if m["type"] == "result" && m["is_main_result"] == true {
				got, _ = m["text"].(string)
			}
			if m["type"] == "error" {
				t.Fatalf("/execute %q: %v", c.code, m)
			}
		}
		if got != c.want {
			t.Fatalf("/execute %q: main result %q, want %q (%s)", c.code, got, c.want, body)
		}
	}
}

// TestDisconnectLeavesProcessRunning: as with envd, a command whose client
// goes away keeps running, and Connect by pid re-attaches to it and gets
// its end.
func TestDisconnectLeavesProcessRunning(t *testing.T) {
	h := startHarness(t)
	sb := h.create(t, h.keys[authtest.TenantA], "base")
	body, _ := json.Marshal(bash("echo started; sleep 2; echo done > /tmp/survived", false))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/process.Process/Start", bytes.NewReader(envelope(0, body)))
	for k, v := range map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken,
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1", "Keepalive-Ping-Interval": "50"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read the start event's envelope, then go away.
	var hdr [5]byte
	if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	io.ReadFull(resp.Body, payload)
	var ev struct {
		Event struct {
			Start struct {
				Pid float64 `json:"pid"`
			} `json:"start"`
		} `json:"event"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil || ev.Event.Start.Pid == 0 {
		t.Fatalf("first event %s: %v", payload, err)
	}
	cancel()
	resp.Body.Close()
	pe := decodeProc(t, h.stream(t, sb, "/process.Process/Connect", map[string]any{"process": map[string]any{"pid": ev.Event.Start.Pid}}, nil))
	if pe.end["status"] != "exit status 0" {
		t.Fatalf("re-attached: end %v, stdout %q", pe.end, pe.stdout)
	}
	if pe := decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("cat /tmp/survived", false), nil)); pe.stdout != "done\n" {
		t.Fatalf("the process did not survive its client: %q", pe.stdout)
	}
}
