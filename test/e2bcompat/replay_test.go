//go:build integration

package e2bcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/authtest"
)

// Transcript replay: exchanges recorded from E2B's real envd 0.6.13
// (shared/reference/e2b-envd-transcripts, as e2bfake's replay uses them)
// are sent, in their recorded order, to the front door in front of a
// Docker sandbox, and the answers are compared with the recording: the
// status, the content type, and the body, JSON compared as values, Connect
// streams event by event (data merged per stream, end and end-stream
// exact). Normalised: pids; /home/user (which sandboxio's images do not
// have) is /tmp/hu on the way in and back; an entry's owner, group,
// modifiedTime and a directory's size (the file systems differ); output
// that depends on the image (whoami, a missing binary's wording) is
// compared by stream only.

type transcript struct {
	Case     string `json:"case"`
	Instance string `json:"envd_instance"`
	Sequence int    `json:"sequence"`
	Request  struct {
		Method  string      `json:"method"`
		Path    string      `json:"path"`
		Headers [][2]string `json:"headers"`
		Body    string      `json:"body_base64"`
	} `json:"request"`
	Response struct {
		Status  int         `json:"status"`
		Headers [][2]string `json:"headers"`
		Body    string      `json:"body_base64"`
	} `json:"response"`
}

// replayed are the cases replayed: every single exchange whose outcome
// does not depend on timing between concurrent requests, on gzip, PTY or
// watchers (not served), or on the capture host's environment.
var replayed = map[string]bool{
	"01-start-exit3": true, "02-start-missing-binary": true, "03c-start-missing-cwd": true, "04-start-keepalive": true,
	"09a-makedir-new": true, "09b-makedir-existing": true, "09c-makedir-nested": true,
	"10a-upload-multipart": true, "10b-upload-octet-stream": true, "10c-upload-multipart-two-files": true,
	"10d-download-existing": true, "10e-download-missing": true, "10f-download-directory": true, "10h-download-binary": true,
	"10i-health": true, "10j-upload-octet-no-path": true,
	"09d-stat-dir": true, "09e-stat-file": true, "09f-stat-missing": true, "09g-listdir-depth1": true, "09h-listdir-depth2": true,
	"09i-listdir-missing": true, "09j-move": true, "09k-move-missing": true, "09l-remove-existing": true,
	"09m-remove-missing": true, "09n-remove-dir-recursive": true,
	"11a-unknown-method": true, "11b-unknown-service": true, "11c-malformed-json-unary": true, "11d-malformed-json-stream": true,
	"11e-unknown-field": true, "11f-wrong-content-type": true, "11g-get-unary": true, "11h-unary-content-type-on-stream": true,
	"11i-invalid-user": true, "11j-no-authorization": true, "11k-connect-unknown-pid": true, "11l-bad-timeout-header": true,
	"11m-no-connect-protocol-version": true, "11n-sendsignal-unspecified-missing-pid": true,
	"10k-download-invalid-user": true, "11o-invalid-user-stream": true, "18-start-sdk-style": true,
}

// imageOutput: cases whose output text depends on the image or user.
var imageOutput = map[string]bool{"02-start-missing-binary": true, "18-start-sdk-style": true}

func transcriptsDir(t *testing.T) string {
	if d := os.Getenv("E2B_TRANSCRIPTS_DIR"); d != "" {
		return d
	}
	wd, _ := os.Getwd()
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		for _, c := range []string{filepath.Join(d, "services", "e2b-worker", "e2bfake", "testdata", "envd-transcripts"),
			filepath.Join(d, "shared", "reference", "e2b-envd-transcripts")} {
			if _, err := os.Stat(filepath.Join(c, "index.json")); err == nil {
				return c
			}
		}
	}
	t.Skip("envd transcripts not found (set E2B_TRANSCRIPTS_DIR)")
	return ""
}

const homeSub = "/tmp/hu"

func subHome(b []byte) []byte {
	b = bytes.ReplaceAll(b, []byte("/home/user"), []byte(homeSub))
	return bytes.ReplaceAll(b, []byte("%2Fhome%2Fuser"), []byte("%2Ftmp%2Fhu"))
}

func TestTranscriptReplay(t *testing.T) {
	dir := transcriptsDir(t)
	files, _ := filepath.Glob(filepath.Join(dir, "[0-9]*.json"))
	var all []*transcript
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := &transcript{}
		if err := json.Unmarshal(raw, tr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if replayed[tr.Case] {
			all = append(all, tr)
		}
	}
	if len(all) != len(replayed) {
		t.Fatalf("found %d of the %d cases in %s", len(all), len(replayed), dir)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Instance != all[j].Instance {
			return all[i].Instance < all[j].Instance
		}
		return all[i].Sequence < all[j].Sequence
	})
	h := startHarness(t)
	sb := h.create(t, h.keys[authtest.TenantA], "base")
	// The capture's fresh /home/user.
	decodeProc(t, h.stream(t, sb, "/process.Process/Start", bash("rm -rf "+homeSub+" && mkdir -p "+homeSub, false), nil))
	matched := 0
	for _, tr := range all {
		if ok := t.Run(tr.Case, func(t *testing.T) { replayOne(t, h, sb, tr) }); ok {
			matched++
		}
	}
	t.Logf("%d of %d recorded envd exchanges answered alike", matched, len(all))
}

func replayOne(t *testing.T, h *harness, sb created, tr *transcript) {
	body, _ := base64.StdEncoding.DecodeString(tr.Request.Body)
	body = subHome(body)
	if len(body) >= 5 && strings.HasPrefix(headerOf(tr.Request.Headers, "Content-Type"), "application/connect+") && body[0] == 0 {
		body = envelope(0, body[5:]) // the length after the substitution
	}
	req, _ := http.NewRequest(tr.Request.Method, h.srv.URL+string(subHome([]byte(tr.Request.Path))), bytes.NewReader(body))
	for _, kv := range tr.Request.Headers {
		if k := http.CanonicalHeaderKey(kv[0]); k != "Host" && k != "Content-Length" {
			req.Header.Set(kv[0], string(subHome([]byte(kv[1]))))
		}
	}
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want, _ := base64.StdEncoding.DecodeString(tr.Response.Body)
	want = subHome(want)
	if resp.StatusCode != tr.Response.Status {
		t.Fatalf("status %d, recorded %d (body %q, recorded %q)", resp.StatusCode, tr.Response.Status, got, want)
	}
	wantCT := headerOf(tr.Response.Headers, "Content-Type")
	if gotCT := resp.Header.Get("Content-Type"); gotCT != wantCT && !(wantCT == "" && len(want) == 0) {
		t.Fatalf("Content-Type %q, recorded %q", gotCT, wantCT)
	}
	switch {
	case strings.HasPrefix(wantCT, "application/connect+json"):
		g, w := streamView(t, tr.Case, got), streamView(t, tr.Case, want)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("stream\n got  %v\n want %v", g, w)
		}
	case strings.HasPrefix(wantCT, "application/json"):
		var g, w any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil {
			t.Fatalf("JSON: got %q, recorded %q", got, want)
		}
		normalise(g)
		normalise(w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("JSON\n got  %s\n want %s", got, want)
		}
	case strings.HasPrefix(wantCT, "text/plain") && strings.HasPrefix(string(want), "["):
		var g, w any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("upload reply %q, recorded %q", got, want)
		}
	default:
		if !bytes.Equal(got, want) {
			t.Fatalf("body %q, recorded %q", got, want)
		}
	}
}

func headerOf(h [][2]string, name string) string {
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

// normalise drops what depends on the file system or host from envd JSON.
func normalise(v any) {
	switch x := v.(type) {
	case map[string]any:
		if x["type"] == "FILE_TYPE_DIRECTORY" {
			delete(x, "size")
		}
		for _, k := range []string{"owner", "group", "modifiedTime"} {
			delete(x, k)
		}
		for _, e := range x {
			normalise(e)
		}
	case []any:
		for _, e := range x {
			normalise(e)
		}
		sort.Slice(x, func(i, j int) bool { return fmt.Sprint(x[i]) < fmt.Sprint(x[j]) })
	}
}

// streamView is a Connect stream as the SDK sees it: the event kinds in
// order (consecutive data merged, keepalives counted as one), the output
// per stream, the end event and the end-stream message.
func streamView(t *testing.T, name string, b []byte) []string {
	fs := frames(t, b)
	var view []string
	var out = map[string]string{}
	for _, f := range fs {
		if f.flags == 2 {
			view = append(view, "end-stream "+f.raw)
			continue
		}
		ev := f.json["event"].(map[string]any)
		for k, v := range ev {
			kind := k
			switch k {
			case "start":
				kind = "start"
			case "data":
				for s, enc := range v.(map[string]any) {
					raw, _ := base64.StdEncoding.DecodeString(enc.(string))
					out[s] += string(raw)
					kind = "data" // stdout and stderr are read apart: no order between them
				}
			case "end":
				e, _ := json.Marshal(v)
				kind = "end " + string(e)
			}
			if n := len(view); n > 0 && view[n-1] == kind && (strings.HasPrefix(kind, "data") || kind == "keepalive") {
				continue
			}
			view = append(view, kind)
		}
	}
	for s, o := range out {
		if imageOutput[name] {
			o = fmt.Sprintf("%d lines", strings.Count(o, "\n"))
		}
		view = append(view, s+" "+o)
	}
	sort.Strings(view[max(len(view)-len(out), 0):])
	return view
}
