package e2bapi

import (
	"bytes"
	"testing"

	"github.com/sandboxio/sandboxio/internal/envdpb/connectjson"
	"github.com/sandboxio/sandboxio/internal/envdpb/process"
)

// TestFastJSONMatchesProtoJSON: the fast path writes exactly what the
// protojson codec writes, for every kind of message it may see.
func TestFastJSONMatchesProtoJSON(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, 'a', '"', '\\', '\n'}, 20000)
	data := func(o any) *process.ProcessEvent {
		d := &process.ProcessEvent_DataEvent{}
		switch x := o.(type) {
		case *process.ProcessEvent_DataEvent_Stdout:
			d.Output = x
		case *process.ProcessEvent_DataEvent_Stderr:
			d.Output = x
		case *process.ProcessEvent_DataEvent_Pty:
			d.Output = x
		}
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
	}
	status := "exit status 3"
	for name, m := range map[string]any{
		"stdout":       &process.StartResponse{Event: data(&process.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hi\n")})},
		"stderr big":   &process.StartResponse{Event: data(&process.ProcessEvent_DataEvent_Stderr{Stderr: big})},
		"pty":          &process.ConnectResponse{Event: data(&process.ProcessEvent_DataEvent_Pty{Pty: []byte("\x1b[0m")})},
		"empty stdout": &process.StartResponse{Event: data(&process.ProcessEvent_DataEvent_Stdout{Stdout: nil})},
		"start":        &process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 7}}}},
		"end":          &process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: status, Error: &status}}}},
		"list":         &process.ListResponse{},
	} {
		want, err := connectjson.NewCodec("json").Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fastJSON{connectjson.NewCodec("json")}.Marshal(m)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: fast %.120q, protojson %.120q (%v)", name, got, want, err)
		}
	}
}
