package workertest

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// statefulContexts probes run_code with a context_id on backends that
// advertise stateful_code (Docker with its agent, E2B): state kept across
// runs, contexts apart, the last expression's value as the main text
// result, an exception as name/value/traceback. It needs a class whose image
// has Python (Options.CodeClass).
func (s *suite) statefulContexts(t *testing.T) {
	ctx := s.ctx(t)
	br, err := s.env.Client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	offered := false
	for _, b := range br.Backends {
		if len(b.Workers) > 0 && b.Capabilities.Has(events.CapStatefulCode) {
			offered = true
		}
	}
	if !offered {
		t.Skip("stateful_code is not advertised")
	}
	if s.opts.CodeClass == "" {
		t.Skip("no class with Python (Options.CodeClass)")
	}
	r, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS, Class: s.opts.CodeClass})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _, _ = s.env.Client.Kill(ctx, r.SandboxID) })
	run := func(cid, code string) *events.RunCodeReply {
		t.Helper()
		res, err := s.env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: r.SandboxID, Language: "python", Code: code, ContextID: cid})
		if err != nil {
			t.Fatalf("run_code %q in %s: %v", code, cid, err)
		}
		return res
	}
	run("ctx-a", "x = 21")
	res := run("ctx-a", "x * 2")
	var main *events.RichResult
	for i := range res.Results {
		if res.Results[i].IsMainResult {
			main = &res.Results[i]
		}
	}
	if main == nil || main.Text != "42" {
		t.Fatalf("x * 2 in the same context: %+v", res.Results)
	}
	if res := run("ctx-b", "x"); res.Error == nil || res.Error.Name != "NameError" {
		t.Fatalf("x in another context: %+v", res.Error)
	}
	if res := run("ctx-a", "1/0"); res.Error == nil || res.Error.Name != "ZeroDivisionError" || res.Error.Traceback == "" {
		t.Fatalf("1/0: %+v", res.Error)
	}
}
