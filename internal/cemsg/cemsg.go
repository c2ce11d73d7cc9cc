package cemsg

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Envelope is one CloudEvent as sandboxio uses it.
type Envelope struct {
	ID      string
	Type    string
	Source  string
	Subject string // the sandbox id, when there is one
	Time    time.Time
	// ReplyTo is the "replyto" extension: where the receiver sends its answer.
	ReplyTo string
	// Traceparent and Tracestate are W3C trace context, carried in their own
	// headers on every message.
	Traceparent string
	Tracestate  string
	Data        []byte
}

// Encode builds the NATS message for e on subject, with Nats-Msg-Id = e.ID
// so that JetStream de-duplicates retries.
func Encode(subject string, e Envelope) (*nats.Msg, error) {
	id, typ, source, err := attributes(e.ID, e.Type, e.Source)
	if err != nil {
		return nil, fmt.Errorf("cemsg: invalid event: %w", err)
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	// One map sized for every header, the values from one array.
	h := make(nats.Header, 12)
	var v headerValues
	h[events.HeaderCEID] = v.one(id)
	h[events.HeaderCEType] = v.one(typ)
	h[events.HeaderCESource] = v.one(source)
	h[events.HeaderCESpecVersion] = specVersion
	h[events.HeaderCETime] = v.one(e.Time.Format(time.RFC3339Nano))
	h[events.HeaderCEContentType] = contentJSON
	if e.Subject != "" {
		h[events.HeaderCESubject] = v.one(e.Subject)
	}
	if e.ReplyTo != "" {
		h[events.HeaderCEReplyTo] = v.one(e.ReplyTo)
	}
	if e.Traceparent != "" {
		h[events.HeaderTraceparent] = v.one(e.Traceparent)
		if e.Tracestate != "" {
			h[events.HeaderTracestate] = v.one(e.Tracestate)
		}
	}
	h[events.HeaderMsgID] = v.one(e.ID)
	m := &nats.Msg{Subject: subject, Header: h}
	m.Data = e.Data
	return m, nil
}

// headerValues hands out one-value header slices from one array, each
// capacity-limited so that an append (nats.go's Header.Add) copies instead
// of writing into its neighbour.
type headerValues struct {
	arr []string
}

func (v *headerValues) one(s string) []string {
	if v.arr == nil {
		v.arr = make([]string, 0, 8)
	}
	v.arr = append(v.arr, s)
	n := len(v.arr)
	return v.arr[n-1 : n : n]
}

// Header values every message shares. nats.go only reads them; nothing in
// this module appends to a header value in place.
var (
	specVersion = []string{cloudevents.CloudEventsVersionV1}
	contentJSON = []string{"application/json"}
)

// attributes checks and normalises the required attributes exactly as
// sdk-go's Event setters and Validate do for a v1 event (id and type
// trimmed and non-empty; source a URI-reference, re-serialised, non-empty)
// without building an Event per message. TestAttributesMatchSDK and
// FuzzAttributes hold it to sdk-go.
func attributes(id, typ, source string) (string, string, string, error) {
	id, typ = strings.TrimSpace(id), strings.TrimSpace(typ)
	if c := lastSource.Load(); c != nil && c.in == source {
		// The source a service sends every message with, checked once.
		switch {
		case id == "":
			return "", "", "", errors.New("id: MUST be a non-empty string")
		case typ == "":
			return "", "", "", errors.New("type: MUST be a non-empty string")
		}
		return id, typ, c.out, nil
	}
	u, err := url.Parse(source)
	switch {
	case err != nil:
		return "", "", "", fmt.Errorf("source: %w", err)
	case id == "":
		return "", "", "", errors.New("id: MUST be a non-empty string")
	case typ == "":
		return "", "", "", errors.New("type: MUST be a non-empty string")
	}
	in := source
	if source = u.String(); strings.TrimSpace(source) == "" {
		return "", "", "", errors.New("source: REQUIRED")
	}
	lastSource.Store(&sourceCache{in: in, out: source})
	return id, typ, source, nil
}

// sourceCache is the last valid source attributes saw and its normal form
// (url.Parse and String are a pure function of the source; a process sends
// nearly every message with the same one, so the parse is done once).
type sourceCache struct{ in, out string }

var lastSource atomic.Pointer[sourceCache]

// Decode reads a binary-mode CloudEvent from header and body, validating the
// required attributes with sdk-go.
func Decode(h nats.Header, data []byte) (Envelope, error) {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	e := Envelope{
		ID: get(events.HeaderCEID), Type: get(events.HeaderCEType), Source: get(events.HeaderCESource),
		Subject: get(events.HeaderCESubject), ReplyTo: get(events.HeaderCEReplyTo),
		Traceparent: get(events.HeaderTraceparent), Tracestate: get(events.HeaderTracestate), Data: data,
	}
	if sv := get(events.HeaderCESpecVersion); sv != cloudevents.CloudEventsVersionV1 {
		return e, fmt.Errorf("cemsg: ce-specversion %q, want %q", sv, cloudevents.CloudEventsVersionV1)
	}
	if t := get(events.HeaderCETime); t != "" {
		tt, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return e, fmt.Errorf("cemsg: ce-time: %w", err)
		}
		e.Time = tt
	}
	if _, _, _, err := attributes(e.ID, e.Type, e.Source); err != nil {
		return e, fmt.Errorf("cemsg: invalid event: %w", err)
	}
	return e, nil
}
