package cemsg

import (
	"fmt"
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
	ev := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ev.SetID(e.ID)
	ev.SetType(e.Type)
	ev.SetSource(e.Source)
	if e.Subject != "" {
		ev.SetSubject(e.Subject)
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	ev.SetTime(e.Time)
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("cemsg: invalid event: %w", err)
	}
	m := nats.NewMsg(subject)
	h := m.Header
	h[events.HeaderCEID] = []string{ev.ID()}
	h[events.HeaderCEType] = []string{ev.Type()}
	h[events.HeaderCESource] = []string{ev.Source()}
	h[events.HeaderCESpecVersion] = []string{ev.SpecVersion()}
	h[events.HeaderCETime] = []string{ev.Time().Format(time.RFC3339Nano)}
	h[events.HeaderCEContentType] = []string{"application/json"}
	if e.Subject != "" {
		h[events.HeaderCESubject] = []string{e.Subject}
	}
	if e.ReplyTo != "" {
		h[events.HeaderCEReplyTo] = []string{e.ReplyTo}
	}
	if e.Traceparent != "" {
		h[events.HeaderTraceparent] = []string{e.Traceparent}
		if e.Tracestate != "" {
			h[events.HeaderTracestate] = []string{e.Tracestate}
		}
	}
	h[events.HeaderMsgID] = []string{e.ID}
	m.Data = e.Data
	return m, nil
}

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
	ev := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ev.SetID(e.ID)
	ev.SetType(e.Type)
	ev.SetSource(e.Source)
	if err := ev.Validate(); err != nil {
		return e, fmt.Errorf("cemsg: invalid event: %w", err)
	}
	return e, nil
}
