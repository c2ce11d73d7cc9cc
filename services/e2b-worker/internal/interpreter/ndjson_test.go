package interpreter

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecoder(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		types []string
		err   error
	}{
		{name: "typical", in: `{"type":"stdout","text":"hi\n","timestamp":"2026-01-01T00:00:00Z"}` + "\n\n" + `{"type":"end_of_execution"}` + "\n", types: []string{"stdout", "end_of_execution"}},
		{name: "crlf and spaces", in: "  {\"type\": \"keepalive\"}\r\n", types: []string{"keepalive"}},
		{name: "truncated last line", in: `{"type":"stdout"}` + "\n" + `{"type":"end_of`, types: []string{"stdout"}, err: io.ErrUnexpectedEOF},
		{name: "empty", in: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(strings.NewReader(tc.in))
			var got []string
			var err error
			for {
				var m Message
				if m, err = d.Next(); err != nil {
					break
				}
				got = append(got, m.Type)
			}
			if tc.err == nil && !errors.Is(err, io.EOF) || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if strings.Join(got, ",") != strings.Join(tc.types, ",") {
				t.Fatalf("types = %v, want %v", got, tc.types)
			}
		})
	}
	if _, err := NewDecoder(strings.NewReader("{}\n")).Next(); err == nil {
		t.Error("a message without type must fail")
	}
	if _, err := NewDecoder(strings.NewReader("nope\n")).Next(); err == nil {
		t.Error("bad JSON must fail")
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte(`{"type":"result","text":"2","png":"iVBORw0KGgo=","is_main_result":true}` + "\n"))
	f.Add([]byte(`{"type":"error","name":"NameError","value":"x","traceback":"..."}` + "\n{\"type\":\"end_of_execution\"}\n"))
	f.Add([]byte("\n\n{\"type\":\"number_of_executions\",\"execution_count\":3}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(strings.NewReader(string(b)))
		for i := 0; i < len(b)+1; i++ {
			m, err := d.Next()
			if err != nil {
				return
			}
			if m.Type == "" {
				t.Fatal("decoded a message without type")
			}
		}
		t.Fatal("decoder did not terminate")
	})
}
