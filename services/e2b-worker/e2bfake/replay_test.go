package e2bfake_test

// Transcript replay: every exchange recorded from E2B's real envd 0.6.13
// (shared/reference/e2b-envd-transcripts) is sent to the fake and the answer
// is compared with the recording: status, headers, and body or Connect
// envelopes byte for byte after normalisation. What is normalised, and why,
// is listed in docs/backends/e2b-protocol-notes.md ("Transcript replay").

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envelope"
)

type transcript struct {
	Case     string `json:"case"`
	Instance string `json:"envd_instance"`
	Sequence int    `json:"sequence"`
	Request  struct {
		Method   string      `json:"method"`
		Path     string      `json:"path"`
		Headers  [][2]string `json:"headers"`
		Body     string      `json:"body_base64"`
		Envelope *struct {
			Payload string `json:"payload_text"`
		} `json:"envelope"`
	} `json:"request"`
	Response struct {
		Status   int         `json:"status"`
		Headers  [][2]string `json:"headers"`
		Transfer string      `json:"transfer"`
		Body     string      `json:"body_base64"`
		Closed   bool        `json:"connection_closed_by_server"`
	} `json:"response"`
	Decoded struct {
		Kind string `json:"kind"`
	} `json:"decoded"`
	Group *struct {
		Name     string   `json:"name"`
		Members  []string `json:"members"`
		Timeline []struct {
			T        float64 `json:"T_ms"`
			Exchange string  `json:"exchange"`
			Event    string  `json:"event"`
		} `json:"timeline"`
	} `json:"group"`
}

// transcriptsDir finds the recorded transcripts: E2B_TRANSCRIPTS_DIR, the
// copy checked in under testdata (what CI uses), or the reference folder
// beside the checkout.
func transcriptsDir(t *testing.T) string {
	if d := os.Getenv("E2B_TRANSCRIPTS_DIR"); d != "" {
		return d
	}
	if _, err := os.Stat(filepath.Join("testdata", "envd-transcripts", "index.json")); err == nil {
		return filepath.Join("testdata", "envd-transcripts")
	}
	wd, _ := os.Getwd()
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		for _, c := range []string{filepath.Join(d, "shared", "reference", "e2b-envd-transcripts"), filepath.Join(d, "reference", "e2b-envd-transcripts")} {
			if _, err := os.Stat(filepath.Join(c, "index.json")); err == nil {
				return c
			}
		}
	}
	t.Fatal("transcripts not found: testdata/envd-transcripts is missing (or set E2B_TRANSCRIPTS_DIR)")
	return ""
}

// Cases whose requests deliberately break the SDK conventions: the fake must
// record at least one deviation for them, and none for the others.
var expectDeviation = map[string]bool{
	"10j-upload-octet-no-path": true, "11a-unknown-method": true, "11b-unknown-service": true,
	"11c-malformed-json-unary": true, "11d-malformed-json-stream": true, "11e-unknown-field": true,
	"11f-wrong-content-type": true, "11g-get-unary": true, "11h-unary-content-type-on-stream": true,
	"11l-bad-timeout-header": true, "11m-no-connect-protocol-version": true,
	"11n-sendsignal-unspecified-missing-pid": true, "12a-start-gzip": true, "12b-unary-gzip": true,
	"99-keepalive-zero": true,
}

// Cases whose stdout is random bytes: only sizes are compared.
var randomOutput = map[string]bool{"08a-start-200k-urandom": true, "08b-start-100k-single-write": true}

// replayer holds the state shared by the exchanges of one envd instance.
type replayer struct {
	t    *testing.T
	fake *e2bfake.Server
	sb   e2bfake.SandboxInfo
	http *http.Client

	mu   sync.Mutex
	pids map[string]string // recorded pid -> actual pid
}

// actual is what one replayed exchange produced.
type actual struct {
	status int
	header http.Header
	chunk  bool
	length int64
	body   []byte
	closed bool // body ended with an error (connection dropped)
}

func TestTranscriptReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("replay takes ~15 s")
	}
	dir := transcriptsDir(t)
	files, _ := filepath.Glob(filepath.Join(dir, "[0-9]*.json"))
	var all []*transcript
	byCase := map[string]*transcript{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := &transcript{}
		if err := json.Unmarshal(raw, tr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, tr)
		byCase[tr.Case] = tr
	}
	if len(all) == 0 {
		t.Fatal("no transcripts")
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Instance != all[j].Instance {
			return all[i].Instance < all[j].Instance
		}
		return all[i].Sequence < all[j].Sequence
	})
	fake := e2bfake.New(e2bfake.Options{})
	fake.Start()
	defer fake.Close()

	replayers := map[string]*replayer{}
	done := map[string]bool{}
	for _, tr := range all {
		if done[tr.Case] {
			continue
		}
		rp := replayers[tr.Instance]
		if rp == nil {
			sb, err := fake.CreateSandbox(e2bfake.SandboxOptions{Timeout: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			rp = &replayer{t: t, fake: fake, sb: sb, pids: map[string]string{},
				http: &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}}
			replayers[tr.Instance] = rp
		}
		if tr.Group == nil {
			done[tr.Case] = true
			t.Run(tr.Case, func(t *testing.T) {
				fake.ResetDeviations()
				got := rp.exchange(tr, nil, nil)
				rp.compare(t, tr, got)
				rp.checkDeviations(t, []string{tr.Case})
			})
			continue
		}
		var members []*transcript
		for _, m := range tr.Group.Members {
			mt := byCase[m]
			if mt == nil {
				t.Fatalf("group %s: missing member %s", tr.Group.Name, m)
			}
			members = append(members, mt)
			done[m] = true
		}
		t.Run(tr.Group.Name, func(t *testing.T) {
			fake.ResetDeviations()
			results := rp.group(t, tr, members)
			for i, m := range members {
				t.Run(m.Case, func(t *testing.T) { rp.compare(t, m, results[i]) })
			}
			rp.checkDeviations(t, tr.Group.Members)
		})
	}
}

func (rp *replayer) checkDeviations(t *testing.T, cases []string) {
	t.Helper()
	want := false
	for _, c := range cases {
		want = want || expectDeviation[c]
	}
	devs := rp.fake.Deviations()
	if want && len(devs) == 0 {
		t.Errorf("expected the fake to record a deviation for %v", cases)
	}
	if !want && len(devs) > 0 {
		t.Errorf("unexpected deviations: %q", devs)
	}
}

var pidField = regexp.MustCompile(`"pid":(\d+)`)

// request builds the HTTP request of a transcript, with recorded PIDs mapped
// to the fake's and the routing headers added.
func (rp *replayer) request(tr *transcript) *http.Request {
	body, _ := base64.StdEncoding.DecodeString(tr.Request.Body)
	sub := func(s string) string {
		return pidField.ReplaceAllStringFunc(s, func(m string) string {
			rec := pidField.FindStringSubmatch(m)[1]
			rp.mu.Lock()
			defer rp.mu.Unlock()
			if a, ok := rp.pids[rec]; ok {
				return `"pid":` + a
			}
			return m
		})
	}
	if tr.Request.Envelope != nil {
		body = envelope.Append(nil, 0, []byte(sub(tr.Request.Envelope.Payload)))
	} else if pidField.Match(body) {
		body = []byte(sub(string(body)))
	}
	req, err := http.NewRequest(tr.Request.Method, rp.fake.SandboxURL()+tr.Request.Path, bytes.NewReader(body))
	if err != nil {
		rp.t.Fatal(err)
	}
	for _, h := range tr.Request.Headers {
		switch http.CanonicalHeaderKey(h[0]) {
		case "Host", "Content-Length":
			continue
		}
		req.Header.Add(h[0], h[1])
	}
	if len(body) == 0 {
		req.Body, req.ContentLength = nil, 0
	}
	req.Header.Set("E2b-Sandbox-Id", rp.sb.ID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	return req
}

// exchange performs one exchange. onEvent is called for every event of the
// timeline vocabulary (headers, each envelope, complete); closeAfter > 0
// makes the client drop the connection after that many envelopes.
func (rp *replayer) exchange(tr *transcript, onEvent func(), closeAfter *int) actual {
	note := func() {
		if onEvent != nil {
			onEvent()
		}
	}
	resp, err := rp.http.Do(rp.request(tr))
	if err != nil {
		rp.t.Errorf("%s: %v", tr.Case, err)
		return actual{}
	}
	defer resp.Body.Close()
	note()
	got := actual{status: resp.StatusCode, header: resp.Header, length: resp.ContentLength,
		chunk: len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"}
	if tr.Decoded.Kind == "envelopes" && resp.Header.Get("Content-Type") == "application/connect+json" {
		n := 0
		var hdr [5]byte
		for {
			if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
				got.closed = !errors.Is(err, io.EOF)
				break
			}
			size := int(uint32(hdr[1])<<24 | uint32(hdr[2])<<16 | uint32(hdr[3])<<8 | uint32(hdr[4]))
			payload := make([]byte, size)
			if _, err := io.ReadFull(resp.Body, payload); err != nil {
				got.closed = true
				break
			}
			got.body = envelope.Append(got.body, hdr[0], payload)
			rp.learnPIDs(tr, len(envsOf(got.body))-1, hdr[0], payload)
			n++
			note()
			if closeAfter != nil && n == *closeAfter {
				resp.Body.Close()
				note() // "client closed the connection"
				break
			}
		}
	} else {
		got.body, err = io.ReadAll(resp.Body)
		got.closed = err != nil
	}
	note()
	return got
}

func envsOf(b []byte) []envelope.Envelope {
	envs, _ := envelope.ReadAll(b)
	return envs
}

// learnPIDs maps the recorded start pid to the actual one.
func (rp *replayer) learnPIDs(tr *transcript, idx int, flags byte, payload []byte) {
	rec := envsOf(mustB64(tr.Response.Body))
	if idx >= len(rec) {
		return
	}
	a, errA := (envelope.Envelope{Flags: flags, Payload: payload}).Gunzip()
	r, errR := rec[idx].Gunzip()
	if errA != nil || errR != nil {
		return
	}
	am, rm := pidField.FindSubmatch(a), pidField.FindSubmatch(r)
	if am != nil && rm != nil {
		rp.mu.Lock()
		rp.pids[string(rm[1])] = string(am[1])
		rp.mu.Unlock()
	}
}

func mustB64(s string) []byte {
	b, _ := base64.StdEncoding.DecodeString(s)
	return b
}

// group replays concurrent exchanges following the recorded timeline: a
// request is sent once every earlier timeline event of the other exchanges
// has happened, plus the recorded gap before it.
func (rp *replayer) group(t *testing.T, head *transcript, members []*transcript) []actual {
	tl := head.Group.Timeline
	idx := map[string]int{}
	for i, m := range members {
		idx[strings.SplitN(m.Case, "-", 2)[0]] = i
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	counts := make([]int, len(members))
	results := make([]actual, len(members))
	var wg sync.WaitGroup
	for i, ev := range tl {
		if ev.Event != "request sent" {
			continue
		}
		need := make([]int, len(members))
		for _, prev := range tl[:i] {
			if j, ok := idx[prev.Exchange]; ok && prev.Exchange != ev.Exchange && prev.Event != "request sent" {
				need[j]++
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		timer := time.AfterFunc(time.Until(deadline), func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		mu.Lock()
		for !satisfied(counts, need) && time.Now().Before(deadline) {
			cond.Wait()
		}
		ok := satisfied(counts, need)
		mu.Unlock()
		timer.Stop()
		if !ok {
			t.Errorf("%s: timed out waiting for the events before %s's request (have %v, need %v)", head.Group.Name, ev.Exchange, counts, need)
			break
		}
		if i > 0 {
			// Reproduce the recorded pause before this request.
			gap := time.Duration((ev.T - tl[i-1].T) * float64(time.Millisecond))
			<-time.After(gap)
		}
		j := idx[ev.Exchange]
		var closeAfter *int
		for _, e := range tl {
			if e.Exchange == ev.Exchange && e.Event == "client closed the connection" {
				n := len(envsOf(mustB64(members[j].Response.Body)))
				closeAfter = &n
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[j] = rp.exchange(members[j], func() {
				mu.Lock()
				counts[j]++
				cond.Broadcast()
				mu.Unlock()
			}, closeAfter)
		}()
	}
	wg.Wait()
	return results
}

func satisfied(have, need []int) bool {
	for i := range need {
		if have[i] < need[i] {
			return false
		}
	}
	return true
}

var (
	modTime  = regexp.MustCompile(`"modifiedTime":"[^"]*"`)
	dirSize  = regexp.MustCompile(`("type":"FILE_TYPE_DIRECTORY","path":"[^"]*","size":")\d+"`)
	ownerGrp = regexp.MustCompile(`"owner":"[^"]*","group":"[^"]*"`)
	pidMsg   = regexp.MustCompile(`pid (\d+)`)
)

// normalise maps what truly varies between runs to fixed values.
func (rp *replayer) normalise(b []byte) []byte {
	s := string(b)
	rp.mu.Lock()
	rev := map[string]string{}
	for r, a := range rp.pids {
		rev[a] = r
	}
	rp.mu.Unlock()
	s = pidField.ReplaceAllStringFunc(s, func(m string) string {
		if r, ok := rev[pidField.FindStringSubmatch(m)[1]]; ok {
			return `"pid":` + r
		}
		return m
	})
	s = pidMsg.ReplaceAllStringFunc(s, func(m string) string {
		if r, ok := rev[pidMsg.FindStringSubmatch(m)[1]]; ok {
			return "pid " + r
		}
		return m
	})
	s = modTime.ReplaceAllString(s, `"modifiedTime":"<time>"`)
	s = dirSize.ReplaceAllString(s, `${1}<dirsize>"`)
	if os.Geteuid() != 0 {
		s = ownerGrp.ReplaceAllString(s, `"owner":"<owner>","group":"<group>"`)
	}
	return []byte(s)
}

func gunzip(b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return b
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return b
	}
	return out
}

var skipHeaders = map[string]bool{"Date": true, "Content-Length": true, "Transfer-Encoding": true, "Last-Modified": true}

func (rp *replayer) compare(t *testing.T, tr *transcript, got actual) {
	t.Helper()
	rec := tr.Response
	if got.status != rec.Status {
		t.Fatalf("status = %d, want %d", got.status, rec.Status)
	}
	// Headers: exact values except Date/Last-Modified (must be present),
	// Content-Length (must match the actual body) and the framing.
	want := map[string][]string{}
	for _, h := range rec.Headers {
		k := http.CanonicalHeaderKey(h[0])
		if skipHeaders[k] {
			if (k == "Date" || k == "Last-Modified") && got.header.Get(k) == "" {
				t.Errorf("header %s missing", k)
			}
			continue
		}
		want[k] = append(want[k], h[1])
	}
	have := map[string][]string{}
	for k, vs := range got.header {
		if !skipHeaders[k] {
			have[k] = vs
		}
	}
	if fmt.Sprint(sortedHeaders(have)) != fmt.Sprint(sortedHeaders(want)) {
		t.Errorf("headers:\n got  %v\n want %v", sortedHeaders(have), sortedHeaders(want))
	}
	switch rec.Transfer {
	case "chunked":
		if !got.chunk {
			t.Errorf("framing: want chunked, got Content-Length %d", got.length)
		}
	case "content-length":
		if got.chunk || got.length != int64(len(got.body)) && !got.closed {
			t.Errorf("framing: want Content-Length = body length, got %d (chunked %v, body %d)", got.length, got.chunk, len(got.body))
		}
	}
	if rec.Closed != got.closed && tr.Case != "15a-start-then-client-disconnect" {
		t.Errorf("connection dropped = %v, want %v", got.closed, rec.Closed)
	}
	recBody := mustB64(rec.Body)
	if tr.Decoded.Kind == "envelopes" && strings.HasPrefix(got.header.Get("Content-Type"), "application/connect") {
		rp.compareEnvelopes(t, tr, recBody, got.body)
		return
	}
	if got.header.Get("Content-Encoding") == "gzip" {
		if !bytes.Equal(got.body, recBody) && !bytes.Equal(rp.normalise(gunzip(got.body)), rp.normalise(gunzip(recBody))) {
			t.Errorf("gzip body:\n got  %q\n want %q", gunzip(got.body), gunzip(recBody))
		}
		return
	}
	if g, w := rp.normalise(got.body), rp.normalise(recBody); !bytes.Equal(g, w) {
		t.Errorf("body:\n got  %q\n want %q", g, w)
	}
}

func sortedHeaders(h map[string][]string) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	sort.Strings(out)
	return out
}

// streamParts splits envelopes into the control messages (compared byte
// for byte after normalisation) and the concatenated output per stream.
type streamParts struct {
	control    []string // "flags payload"
	keepalives int
	out        map[string][]byte
	maxChunk   map[string]int
}

var dataRe = regexp.MustCompile(`^\{"event":\{"data":\{"(stdout|stderr|pty)":"([^"]*)"\}\}\}$`)

func (rp *replayer) split(t *testing.T, body []byte, root string) streamParts {
	envs, err := envelope.ReadAll(body)
	if err != nil {
		t.Errorf("envelopes: %v", err)
	}
	p := streamParts{out: map[string][]byte{}, maxChunk: map[string]int{}}
	for _, e := range envs {
		payload, err := e.Gunzip()
		if err != nil {
			t.Errorf("gunzip: %v", err)
		}
		flags := e.Flags &^ envelope.FlagCompressed
		if e.Compressed() {
			flags |= 0x10 // keep "was compressed" in the comparison
		}
		if m := dataRe.FindSubmatch(payload); m != nil && flags&^0x10 == 0 {
			dec, _ := base64.StdEncoding.DecodeString(string(m[2]))
			if root != "" {
				dec = bytes.ReplaceAll(dec, []byte(root), nil)
			}
			p.out[string(m[1])] = append(p.out[string(m[1])], dec...)
			p.maxChunk[string(m[1])] = max(p.maxChunk[string(m[1])], len(dec))
			continue
		}
		if string(payload) == `{"event":{"keepalive":{}}}` || string(payload) == `{"keepalive":{}}` {
			p.keepalives++
			continue
		}
		p.control = append(p.control, fmt.Sprintf("%#02x %s", flags, rp.normalise(payload)))
	}
	return p
}

func (rp *replayer) compareEnvelopes(t *testing.T, tr *transcript, rec, got []byte) {
	t.Helper()
	w := rp.split(t, rec, "")
	g := rp.split(t, got, rp.sb.Dir)
	if strings.Join(g.control, "\n") != strings.Join(w.control, "\n") {
		t.Errorf("control envelopes:\n got  %s\n want %s", strings.Join(g.control, "\n      "), strings.Join(w.control, "\n      "))
	}
	// Keepalives are timer-driven; the last one may race the process end.
	if d := g.keepalives - w.keepalives; d < -1 || d > 1 {
		t.Errorf("keepalives = %d, want %d (±1)", g.keepalives, w.keepalives)
	}
	for _, k := range []string{"stdout", "stderr", "pty"} {
		if randomOutput[tr.Case] {
			if len(g.out[k]) != len(w.out[k]) || g.maxChunk[k] > 32768 {
				t.Errorf("%s: %d bytes (max chunk %d), want %d (max chunk <= 32768)", k, len(g.out[k]), g.maxChunk[k], len(w.out[k]))
			}
			continue
		}
		if !bytes.Equal(g.out[k], w.out[k]) {
			t.Errorf("%s = %q, want %q", k, g.out[k], w.out[k])
		}
	}
}
