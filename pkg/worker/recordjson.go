package worker

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// marshalRecord is json.Marshal(rec), byte for byte, without reflection:
// the record's encoding was 3 % of dev's CPU under bench exec (two records
// an exec). TestMarshalRecordIsJSONMarshal and FuzzMarshalRecord hold it
// to encoding/json; a time encoding/json would refuse (a year outside
// 0–9999) goes through encoding/json, which reports the error. (A time is
// written by Time.AppendText, which is what Time.MarshalJSON quotes.)
func marshalRecord(rec *events.OpRecord) ([]byte, error) {
	n := 400 + len(rec.OpID) + len(rec.Kind) + len(rec.SandboxID) + len(rec.Backend) + len(rec.Worker) +
		len(rec.ProcessID) + len(rec.Owner) + len(rec.Outcome) + len(rec.ErrorCode) + len(rec.Error) + len(rec.Traceparent)
	for k, v := range rec.Summary {
		n += len(k) + len(v) + 6
	}
	for k, v := range rec.Metadata {
		n += len(k) + len(v) + 6
	}
	b := make([]byte, 0, n)
	b = append(b, `{"op_id":`...)
	b = appendJSONString(b, rec.OpID)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, rec.Kind)
	b = append(b, `,"phase":`...)
	b = appendJSONString(b, rec.Phase)
	b = append(b, `,"sandbox_id":`...)
	b = appendJSONString(b, rec.SandboxID)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, rec.Backend)
	b = append(b, `,"worker":`...)
	b = appendJSONString(b, rec.Worker)
	if rec.ProcessID != "" {
		b = append(b, `,"process_id":`...)
		b = appendJSONString(b, rec.ProcessID)
	}
	if rec.Owner != "" {
		b = append(b, `,"owner":`...)
		b = appendJSONString(b, rec.Owner)
	}
	var err error
	b = append(b, `,"started_at":"`...)
	if b, err = rec.StartedAt.AppendText(b); err != nil {
		return json.Marshal(rec) // encoding/json says why
	}
	b = append(b, '"')
	if rec.EndedAt != nil {
		b = append(b, `,"ended_at":"`...)
		if b, err = rec.EndedAt.AppendText(b); err != nil {
			return json.Marshal(rec)
		}
		b = append(b, '"')
	}
	if rec.DurationMS != 0 {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendInt(b, rec.DurationMS, 10)
	}
	if rec.Outcome != "" {
		b = append(b, `,"outcome":`...)
		b = appendJSONString(b, rec.Outcome)
	}
	if rec.ErrorCode != "" {
		b = append(b, `,"error_code":`...)
		b = appendJSONString(b, string(rec.ErrorCode))
	}
	if rec.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, rec.Error)
	}
	if rec.ExitCode != nil {
		b = append(b, `,"exit_code":`...)
		b = strconv.AppendInt(b, int64(*rec.ExitCode), 10)
	}
	if rec.BytesIn != 0 {
		b = append(b, `,"bytes_in":`...)
		b = strconv.AppendInt(b, rec.BytesIn, 10)
	}
	if rec.BytesOut != 0 {
		b = append(b, `,"bytes_out":`...)
		b = strconv.AppendInt(b, rec.BytesOut, 10)
	}
	if len(rec.Summary) > 0 {
		b = append(b, `,"summary":`...)
		b = appendStringMap(b, rec.Summary)
	}
	if len(rec.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		b = appendStringMap(b, rec.Metadata)
	}
	if rec.Traceparent != "" {
		b = append(b, `,"traceparent":`...)
		b = appendJSONString(b, rec.Traceparent)
	}
	return append(b, '}'), nil
}

// appendStringMap appends m as encoding/json does: keys sorted.
func appendStringMap(b []byte, m map[string]string) []byte {
	var arr [16]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes a string (HTML
// escaping on): <, > and & as \u003c, \u003e, \u0026; control characters
// as \b \f \n \r \t or \u00XX; every byte of invalid UTF-8 as \ufffd; U+2028
// and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
