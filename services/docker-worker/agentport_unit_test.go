package dockerworker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// dialFailingAgent is an agent that names dials and answers each with
// a Result carrying perr.
func dialFailingAgent(t *testing.T, perr proto.Error) *agent.Client {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		br := bufio.NewReader(b)
		if proto.SkipToSync(br, 1<<20) != nil {
			return
		}
		fr := proto.NewReader(br)
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		h, _ := proto.DecodeHello(f.Payload)
		p, _ := json.Marshal(proto.Hello{Version: proto.Version, Nonce: h.Nonce, Features: []string{proto.FeatureDial}})
		if _, err := b.Write(proto.AppendFrame(nil, proto.Frame{Type: proto.THello, Payload: p})); err != nil {
			return
		}
		res, _ := json.Marshal(proto.Result{Error: &perr})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if f.Type == proto.TRequest {
				if _, err := b.Write(proto.AppendFrame(nil, proto.Frame{Type: proto.TResult, Stream: f.Stream, Payload: res})); err != nil {
					return
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, a, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close() })
	return c
}

// The agent's failures to connect are coded: refused and any other
// failure of the connect (a timeout on a full backlog, an unreachable
// address) PortUnreachable with the agent's reason, too many dials
// Overloaded.
func TestDialPortFailuresAreCoded(t *testing.T) {
	for _, tc := range []struct {
		name string
		perr proto.Error
		want error
		msg  string
	}{
		{"refused", proto.Error{Kind: proto.ErrRefused, Message: "port 8000: connection refused"}, events.ErrPortUnreachable, "port 8000"},
		{"connect timeout", proto.Error{Kind: proto.ErrIO, Message: "port 8000: dial tcp 127.0.0.1:8000: i/o timeout"}, events.ErrPortUnreachable, "i/o timeout"},
		{"unreachable", proto.Error{Kind: proto.ErrIO, Message: "port 8000: connect: no route to host"}, events.ErrPortUnreachable, "no route to host"},
		{"busy", proto.Error{Kind: proto.ErrBusy, Message: "2048 connections are carried already"}, events.ErrOverloaded, "2048"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &sandbox{id: "sb-1"}
			sb.agent = dialFailingAgent(t, tc.perr)
			b := &Backend{sandboxes: map[string]*sandbox{"sb-1": sb}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := b.DialPort(ctx, "sb-1", 8000)
			var e *events.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &e) || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("DialPort: %v, want %v saying %q", err, tc.want, tc.msg)
			}
		})
	}
}
