package cemsg

import (
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

func TestRoundTrip(t *testing.T) {
	in := Envelope{ID: "01abc", Type: "io.sandboxio.v1.cmd.exec", Source: "sandboxio/router/r1", Subject: "s1",
		Time: time.Date(2026, 11, 29, 12, 0, 0, 5, time.UTC), ReplyTo: "_INBOX.x.y", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		Data: []byte(`{"a":1}`)}
	m, err := Encode("sbx.cmd.fake.node.w.exec", in)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != in.ID {
		t.Fatalf("Nats-Msg-Id = %q", got)
	}
	out, err := Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Type != in.Type || out.Source != in.Source || out.Subject != in.Subject ||
		!out.Time.Equal(in.Time) || out.ReplyTo != in.ReplyTo || out.Traceparent != in.Traceparent || string(out.Data) != string(in.Data) {
		t.Fatalf("round trip: got %+v want %+v", out, in)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, h := range map[string]nats.Header{
		"no specversion": {"ce-id": {"1"}, "ce-type": {"t"}, "ce-source": {"s"}},
		"no id":          {"ce-specversion": {"1.0"}, "ce-type": {"t"}, "ce-source": {"s"}},
		"bad time":       {"ce-specversion": {"1.0"}, "ce-id": {"1"}, "ce-type": {"t"}, "ce-source": {"s"}, "ce-time": {"yesterday"}},
	} {
		if _, err := Decode(h, nil); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("1", "io.sandboxio.v1.cmd.exec", "src", "1.0", "2026-11-29T12:00:00Z", []byte("{}"))
	f.Fuzz(func(t *testing.T, id, typ, src, sv, tm string, data []byte) {
		h := nats.Header{"ce-id": {id}, "ce-type": {typ}, "ce-source": {src}, "ce-specversion": {sv}, "ce-time": {tm}}
		e, err := Decode(h, data)
		if err != nil {
			return
		}
		if e.ID != id || e.Type != typ {
			t.Fatalf("decoded %q/%q from %q/%q", e.ID, e.Type, id, typ)
		}
	})
}

// sdkAttributes is what sdk-go makes of the attributes: the values Encode
// wrote before attributes replaced it, or its error.
func sdkAttributes(id, typ, source string) (string, string, string, error) {
	ev := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ev.SetID(id)
	ev.SetType(typ)
	ev.SetSource(source)
	if err := ev.Validate(); err != nil {
		return "", "", "", err
	}
	return ev.ID(), ev.Type(), ev.Source(), nil
}

// TestAttributesMatchSDK: the hand-written checks accept, refuse and
// normalise exactly what sdk-go does.
func TestAttributesMatchSDK(t *testing.T) {
	for _, a := range [][3]string{
		{"01abc", "io.sandboxio.v1.cmd.exec", "sandboxio/router/r1"},
		{" 1 ", " t ", " s "}, {"", "t", "s"}, {" ", "t", "s"}, {"1", "", "s"}, {"1", "t", ""}, {"1", "t", " "},
		{"1", "t", "%zz"}, {"1", "t", "http://[::1"}, {"1", "t", "a b"}, {"1", "t", "https://x.example/a?b#c"},
		{"1", "t", "\x7f"}, {"1", "t", "//host"}, {"1", "t", "#"},
	} {
		checkAttributes(t, a[0], a[1], a[2])
	}
}

func FuzzAttributes(f *testing.F) {
	f.Add("01abc", "io.sandboxio.v1.cmd.exec", "sandboxio/router/r1")
	f.Add(" ", "\t", "%")
	f.Fuzz(checkAttributes)
}

func checkAttributes(t *testing.T, id, typ, source string) {
	gi, gt, gs, gerr := attributes(id, typ, source)
	wi, wt, ws, werr := sdkAttributes(id, typ, source)
	if (gerr == nil) != (werr == nil) || gi != wi || gt != wt || gs != ws {
		t.Fatalf("attributes(%q, %q, %q) = %q %q %q %v; sdk-go: %q %q %q %v", id, typ, source, gi, gt, gs, gerr, wi, wt, ws, werr)
	}
}

func BenchmarkEncodeDecode(b *testing.B) {
	in := Envelope{ID: "01abc", Type: "io.sandboxio.v1.cmd.exec", Source: "sandboxio/router/r1", Subject: "s1",
		ReplyTo: "_SBX.router.r.x", Data: []byte(`{"a":1}`)}
	for b.Loop() {
		m, err := Encode("sbx.cmd.fake.node.w.exec", in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeAllocations: an encode costs a handful of allocations, not one
// per header value and a URL parse per message (17 before, on the command
// the router sends for every exec).
func TestEncodeAllocations(t *testing.T) {
	in := Envelope{ID: "01abc", Type: "io.sandboxio.v1.cmd.exec", Source: "sandboxio/router/r1", Subject: "s1",
		ReplyTo: "_SBX.router.r.x", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Data: []byte(`{"a":1}`)}
	if _, err := Encode("sbx.cmd.fake.node.w.exec", in); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := Encode("sbx.cmd.fake.node.w.exec", in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 7 {
		t.Fatalf("%.0f allocations per Encode, want at most 7", allocs)
	}
}
