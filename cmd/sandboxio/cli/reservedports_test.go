package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestDevWorkersKeepReservedPorts: dev's --reserved-ports reach its
// workers too: a reserved port that the registry lists as published (a
// write past the router) is still not dialled, while a published port is
// (the fake sandbox serves nothing: PortUnreachable). And a worker command
// refuses a --reserved-ports it cannot parse.
func TestDevWorkersKeepReservedPorts(t *testing.T) {
	dev := startDev(t, "--backends", "fake", "--reserved-ports", "2222", "--gateway", "127.0.0.1:0")
	dev.waitLive(t, "fake", "")
	id := created(t, dev.URL)
	defer cli(t, dev.URL, "kill", id)
	r := cli(t, dev.URL, "port", "expose", "--public", "--format", "{{.PathURL}}", id, "8000")
	pathURL := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasSuffix(pathURL, "/ports/8000/") {
		t.Fatalf("port expose: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(dev.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var sb events.Sandbox
	if err := json.Unmarshal(e.Value(), &sb); err != nil {
		t.Fatal(err)
	}
	sb.Ports = append(sb.Ports, events.PortExposure{Port: 2222, Access: events.PortPublic, ExposedAt: time.Now()})
	b, _ := json.Marshal(sb)
	if _, err := kv.Update(ctx, id, b, e.Revision()); err != nil {
		t.Fatal(err)
	}
	get := func(url string) string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// A 404 until the gateway's registry copy has the port.
			loading := resp.StatusCode == http.StatusNotFound || strings.Contains(string(body), "loading the sandbox registry")
			if !loading || time.Now().After(deadline) {
				return string(body)
			}
			time.Sleep(20 * time.Millisecond) // polling the gateway's registry watch, with a deadline
		}
	}
	if body := get(pathURL); !strings.Contains(body, string(events.CodePortUnreachable)) {
		t.Fatalf("the published port 8000: %s, want %s", body, events.CodePortUnreachable)
	}
	// The gateway's copy of the record (the one 8000 was just served by)
	// lists 2222 too: the worker refuses it (PortReserved, which the
	// gateway answers as the one 404) instead of dialling it (which
	// would be PortUnreachable: nothing listens there).
	resp, err := http.Get(strings.Replace(pathURL, "/ports/8000/", "/ports/2222/", 1))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), string(events.CodePortUnreachable)) {
		t.Fatalf("the reserved port 2222: %d %s, want the 404 of a port the worker does not serve", resp.StatusCode, body)
	}
	if r := cli(t, dev.URL, "fake-worker", "--reserved-ports", "ssh"); r.code != exitUsage {
		t.Errorf("fake-worker --reserved-ports ssh: %+v", r)
	}
}
