package auditor

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// unmarshalRecord is json.Unmarshal(b, rec) for an operation record. The
// records workers write (the keys in lower case, each once; plain strings;
// integers) are decoded here without reflection, which also checks that b
// is valid JSON; anything else (an escape, a null, an unknown or repeated
// key, a number with a fraction, …) is left to encoding/json, from a zero
// record. json.Unmarshal of the records was 4.6 % of dev's CPU under bench
// exec. TestUnmarshalRecordIsJSONUnmarshal and FuzzUnmarshalRecord hold it
// to encoding/json.
func unmarshalRecord(b []byte, rec *events.OpRecord) error {
	d := recDecoder{in: b, s: string(b)}
	if d.record(rec) {
		return nil
	}
	*rec = events.OpRecord{}
	return json.Unmarshal(b, rec)
}

type recDecoder struct {
	in []byte
	// s is in as one string, of which every string decoded is a part: one
	// allocation for all of them.
	s string
	i int
}

func (d *recDecoder) space() {
	for d.i < len(d.in) {
		switch d.in[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *recDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.in) && d.in[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str reads a string without escapes, of valid UTF-8 and no control
// character (what encoding/json takes as it is).
func (d *recDecoder) str() (string, bool) {
	raw, ok := d.rawStr()
	if !ok {
		return "", false
	}
	end := d.i - 1 // the closing quote
	return d.s[end-len(raw) : end], true
}

func (d *recDecoder) rawStr() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	ascii := true
	for ; d.i < len(d.in); d.i++ {
		switch c := d.in[d.i]; {
		case c == '"':
			s := d.in[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// int reads an integer as encoding/json does into an int64 (or an int).
func (d *recDecoder) int() (int64, bool) {
	d.space()
	start := d.i
	if d.i < len(d.in) && d.in[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.in) && d.in[d.i] >= '0' && d.in[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.in[digits] == '0' && d.i > digits+1) {
		return 0, false // no digit, or a leading zero (not JSON)
	}
	if d.i < len(d.in) {
		switch d.in[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(d.in[start:d.i]), 10, 64)
	return n, err == nil
}

func (d *recDecoder) time() (time.Time, bool) {
	d.space()
	start := d.i
	if _, ok := d.rawStr(); !ok {
		return time.Time{}, false
	}
	var t time.Time
	if err := t.UnmarshalJSON(d.in[start:d.i]); err != nil {
		return time.Time{}, false
	}
	return t, true
}

func (d *recDecoder) strMap() (map[string]string, bool) {
	if !d.byte('{') {
		return nil, false
	}
	m := make(map[string]string)
	if d.byte('}') {
		return m, true
	}
	for {
		k, ok := d.str()
		if !ok || !d.byte(':') {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		v, ok := d.str()
		if !ok {
			return nil, false
		}
		m[k] = v
		if d.byte('}') {
			return m, true
		}
		if !d.byte(',') {
			return nil, false
		}
	}
}

// record decodes the whole input into rec; false: leave it to encoding/json.
func (d *recDecoder) record(rec *events.OpRecord) bool {
	if !d.byte('{') {
		return false
	}
	var seen uint32
	if !d.byte('}') {
		for {
			key, ok := d.rawStr()
			if !ok || !d.byte(':') {
				return false
			}
			f, ok := d.field(rec, string(key))
			if !ok || seen&f != 0 {
				return false
			}
			seen |= f
			if d.byte('}') {
				break
			}
			if !d.byte(',') {
				return false
			}
		}
	}
	d.space()
	return d.i == len(d.in)
}

// field decodes one member's value; its bit, or false.
func (d *recDecoder) field(rec *events.OpRecord, key string) (uint32, bool) {
	var ok bool
	switch key {
	case "op_id":
		rec.OpID, ok = d.str()
		return 1 << 0, ok
	case "kind":
		rec.Kind, ok = d.str()
		return 1 << 1, ok
	case "phase":
		rec.Phase, ok = d.str()
		return 1 << 2, ok
	case "sandbox_id":
		rec.SandboxID, ok = d.str()
		return 1 << 3, ok
	case "backend":
		rec.Backend, ok = d.str()
		return 1 << 4, ok
	case "worker":
		rec.Worker, ok = d.str()
		return 1 << 5, ok
	case "process_id":
		rec.ProcessID, ok = d.str()
		return 1 << 6, ok
	case "owner":
		rec.Owner, ok = d.str()
		return 1 << 7, ok
	case "started_at":
		rec.StartedAt, ok = d.time()
		return 1 << 8, ok
	case "ended_at":
		var t time.Time
		if t, ok = d.time(); ok {
			rec.EndedAt = &t
		}
		return 1 << 9, ok
	case "duration_ms":
		rec.DurationMS, ok = d.int()
		return 1 << 10, ok
	case "outcome":
		rec.Outcome, ok = d.str()
		return 1 << 11, ok
	case "error_code":
		var s string
		s, ok = d.str()
		rec.ErrorCode = events.Code(s)
		return 1 << 12, ok
	case "error":
		rec.Error, ok = d.str()
		return 1 << 13, ok
	case "exit_code":
		var n int64
		if n, ok = d.int(); ok && int64(int(n)) == n {
			x := int(n)
			rec.ExitCode = &x
		}
		return 1 << 14, ok
	case "bytes_in":
		rec.BytesIn, ok = d.int()
		return 1 << 15, ok
	case "bytes_out":
		rec.BytesOut, ok = d.int()
		return 1 << 16, ok
	case "summary":
		rec.Summary, ok = d.strMap()
		return 1 << 17, ok
	case "metadata":
		rec.Metadata, ok = d.strMap()
		return 1 << 18, ok
	case "traceparent":
		rec.Traceparent, ok = d.str()
		return 1 << 19, ok
	}
	return 0, false
}
