package events

import "strings"

// Bounds of a client API request's headers. A request over them is refused
// at once (before anything is sent on the bus), not carried into commands
// whose headers the bus then refuses.
const (
	// MaxHeaderBytes bounds the headers of one API request: every name and
	// value, plus 4 bytes a line (": " and CRLF), as NATS sends them.
	MaxHeaderBytes = 8 << 10
	// TraceparentLength is the length of a W3C traceparent of version 00.
	TraceparentLength = 55
	// MaxTracestateBytes is W3C's bound of tracestate.
	MaxTracestateBytes = 512
)

// CheckHeaders checks a client API request's headers: their total size
// (SBX_E1006, field "headers"), the traceparent (one, in the W3C form
// version-traceid-parentid-flags, 55 bytes of lower-case hex: SBX_E1007
// naming "header.traceparent", or SBX_E1006 when longer) and the
// tracestate (at most 512 bytes). Names are matched case-insensitively.
func CheckHeaders(h map[string][]string) *Error {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if n > MaxHeaderBytes {
		return Errorf(CodePayloadTooLarge, "the request's headers are %d bytes; the limit is %d", n, MaxHeaderBytes).
			With("field", "headers").With("limit", MaxHeaderBytes)
	}
	for k, vs := range h {
		switch {
		case strings.EqualFold(k, HeaderTraceparent):
			if e := checkTraceparent(vs); e != nil {
				return e
			}
		case strings.EqualFold(k, HeaderTracestate):
			for _, v := range vs {
				if len(v) > MaxTracestateBytes {
					return Errorf(CodePayloadTooLarge, "tracestate is %d bytes; the limit is %d", len(v), MaxTracestateBytes).
						With("field", "header.tracestate").With("limit", MaxTracestateBytes)
				}
			}
		}
	}
	return nil
}

func checkTraceparent(vs []string) *Error {
	const field = "header.traceparent"
	if len(vs) != 1 {
		return Errorf(CodeInvalidValue, "the request carries %d traceparent headers", len(vs)).With("field", field)
	}
	if len(vs[0]) > TraceparentLength {
		return Errorf(CodePayloadTooLarge, "traceparent is %d bytes; a W3C traceparent is %d", len(vs[0]), TraceparentLength).
			With("field", field).With("limit", TraceparentLength)
	}
	if !ValidTraceparent(vs[0]) {
		return Errorf(CodeInvalidValue, "traceparent %q is not version-traceid-parentid-flags (W3C trace context)", vs[0]).With("field", field)
	}
	return nil
}

// ValidTraceparent reports whether s is a W3C traceparent of version 00:
// 2-32-16-2 lower-case hex digits joined by '-', trace and parent ids not
// all zero.
func ValidTraceparent(s string) bool {
	if len(s) != TraceparentLength || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version, trace, parent, flags := s[:2], s[3:35], s[36:52], s[53:]
	return version == "00" && lowerHex(trace) && lowerHex(parent) && lowerHex(flags) &&
		strings.Trim(trace, "0") != "" && strings.Trim(parent, "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
