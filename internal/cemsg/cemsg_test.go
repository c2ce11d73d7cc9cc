package cemsg

import (
	"testing"
	"time"

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
