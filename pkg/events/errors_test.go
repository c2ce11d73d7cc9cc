package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"testing"
)

var codeForm = regexp.MustCompile(`^SBX_E(1[0-7])[0-9][0-9]$`)

func TestCatalog(t *testing.T) {
	codes := map[Code]bool{}
	names := map[string]bool{}
	prev := 0
	for _, e := range Catalog {
		if !codeForm.MatchString(string(e.Code)) {
			t.Errorf("%s: not of the form SBX_E10xx..SBX_E17xx", e.Code)
		}
		if codes[e.Code] {
			t.Errorf("%s: code listed twice", e.Code)
		}
		codes[e.Code] = true
		if names[e.Name] {
			t.Errorf("%s: name %s used twice", e.Code, e.Name)
		}
		names[e.Name] = true
		if e.Code.Number() <= prev {
			t.Errorf("%s: catalog not in code order", e.Code)
		}
		prev = e.Code.Number()
		if e.Name == "" || e.Meaning == "" || e.Action == "" {
			t.Errorf("%s: name, meaning and action are all required: %+v", e.Code, e)
		}
		if CodeFromNumber(e.Code.Number()) != e.Code {
			t.Errorf("%s: CodeFromNumber(Number()) = %s", e.Code, CodeFromNumber(e.Code.Number()))
		}
		if got, ok := Lookup(e.Code); !ok || got != e {
			t.Errorf("%s: Lookup = %+v, %v", e.Code, got, ok)
		}
		// No name shadows a standard-library error name (DESIGN §5).
		switch e.Name {
		case "Canceled", "DeadlineExceeded", "EOF", "ErrClosed", "Timeout":
			t.Errorf("%s: name %s shadows a standard-library name", e.Code, e.Name)
		}
	}
	// The codes fixed by DESIGN §5.
	fixed := map[Code]string{
		CodeInvalidRequest: "InvalidRequest", CodeExecutionTimeout: "ExecutionTimeout",
		CodeCreateTimeout: "CreateTimeout", CodeSandboxGone: "SandboxGone",
		CodeCapabilityNotSupp: "CapabilityNotSupported",
	}
	for c, name := range fixed {
		if e, ok := Lookup(c); !ok || e.Name != name {
			t.Errorf("%s: want name %s, got %+v", c, name, e)
		}
	}
	if _, ok := Lookup("SBX_E9999"); ok {
		t.Error("Lookup of an undefined code succeeded")
	}
	if Code("SBX_Exyz").Number() != 0 || Code("").Number() != 0 {
		t.Error("Number of a malformed code is not 0")
	}
}

// sentinels maps every catalog code to its exported sentinel.
var sentinels = map[Code]*Error{
	CodeInvalidRequest: ErrInvalidRequest, CodeUnknownField: ErrUnknownField, CodeMissingField: ErrMissingField,
	CodeLifetimeRequired: ErrLifetimeRequired, CodeInvalidID: ErrInvalidID, CodePayloadTooLarge: ErrPayloadTooLarge,
	CodeInvalidValue: ErrInvalidValue, CodeUnknownOp: ErrUnknownOp, CodeUnknownClass: ErrUnknownClass,
	CodeUnknownBackend: ErrUnknownBackend, CodeNoWorker: ErrNoWorker, CodeIsolationUnavailable: ErrIsolationUnavailable,
	CodeCapabilityNotSupp: ErrCapabilityNotSupported, CodeInvalidDSN: ErrInvalidDSN, CodeSandboxNotFound: ErrSandboxNotFound,
	CodeSandboxExists: ErrSandboxExists, CodeCreateTimeout: ErrCreateTimeout, CodeSandboxGone: ErrSandboxGone,
	CodeCreateFailed: ErrCreateFailed, CodeIdempotencyConflict: ErrIdempotencyConflict, CodeProcessNotFound: ErrProcessNotFound,
	CodeExecutionTimeout: ErrExecutionTimeout, CodeExecFailed: ErrExecFailed, CodeOutputGap: ErrOutputGap,
	CodeProcessExited: ErrProcessExited, CodeUnauthorized: ErrUnauthorized, CodeForbidden: ErrForbidden,
	CodeQuotaExceeded: ErrQuotaExceeded, CodeRateLimited: ErrRateLimited, CodeAuditUnavailable: ErrAuditUnavailable,
	CodeAuditTampered: ErrAuditTampered, CodeBackendUnavailable: ErrBackendUnavailable, CodeWorkerTimeout: ErrWorkerTimeout,
	CodeBackendError: ErrBackendError, CodeOverloaded: ErrOverloaded, CodeImageNotFound: ErrImageNotFound,
	CodeInternal: ErrInternal,

	CodeEgressInvalidEntry: ErrEgressInvalidEntry, CodeEgressTooManyEntries: ErrEgressTooManyEntries,
	CodeEgressCIDRTooBroad: ErrEgressCIDRTooBroad, CodeEgressIPv6Unsupported: ErrEgressIPv6Unsupported,
	CodeEgressCIDRForbidden: ErrEgressCIDRForbidden, CodeEgressSetupFailed: ErrEgressSetupFailed,
	CodeEgressSubnetsExhausted: ErrEgressSubnetsExhausted,

	CodePortReserved: ErrPortReserved, CodePortNotExposed: ErrPortNotExposed,
	CodePortUnreachable: ErrPortUnreachable, CodeTooManyPorts: ErrTooManyPorts,
	CodePortLinkUnavailable: ErrPortLinkUnavailable,

	CodeWorkerLost: ErrWorkerLost, CodeCommandExpired: ErrCommandExpired,
	CodeStorageQuota: ErrStorageQuota, CodeCommandMismatch: ErrCommandMismatch,
	CodeWatchLimit: ErrWatchLimit,

	CodeSandboxPaused: ErrSandboxPaused, CodeSnapshotNotFound: ErrSnapshotNotFound,
	CodeSnapshotIncomplete: ErrSnapshotIncomplete, CodeSandboxBusy: ErrSandboxBusy,
	CodeSnapshotBytesQuota: ErrSnapshotBytesQuota, CodeSnapshotCountQuota: ErrSnapshotCountQuota,
}

func TestSentinels(t *testing.T) {
	if len(sentinels) != len(Catalog) {
		t.Errorf("%d sentinels for %d catalog entries", len(sentinels), len(Catalog))
	}
	for _, e := range Catalog {
		s := sentinels[e.Code]
		if s == nil {
			t.Errorf("%s has no sentinel", e.Code)
			continue
		}
		if s.Code != e.Code || s.Name != e.Name || s.Retryable != e.Retryable {
			t.Errorf("sentinel %+v does not match catalog %+v", s, e)
		}
	}
}

func TestErrorfIsAs(t *testing.T) {
	for _, entry := range Catalog {
		e := Errorf(entry.Code, "sandbox %s: %d", "abc", 7)
		if e.Code != entry.Code || e.Name != entry.Name || e.Retryable != entry.Retryable || e.Message != "sandbox abc: 7" {
			t.Errorf("Errorf(%s) = %+v", entry.Code, e)
		}
		if want := string(entry.Code) + " " + entry.Name + ": sandbox abc: 7"; e.Error() != want {
			t.Errorf("Error() = %q, want %q", e.Error(), want)
		}
		wrapped := fmt.Errorf("calling the router: %w", e)
		for code, s := range sentinels {
			if got := errors.Is(wrapped, s); got != (code == entry.Code) {
				t.Errorf("errors.Is(%s error, sentinel %s) = %v", entry.Code, code, got)
			}
		}
		isTimeout := entry.Code == CodeExecutionTimeout || entry.Code == CodeCreateTimeout
		if got := errors.Is(wrapped, ErrSandboxTimeout); got != isTimeout {
			t.Errorf("errors.Is(%s error, ErrSandboxTimeout) = %v, want %v", entry.Code, got, isTimeout)
		}
		var as *Error
		if !errors.As(wrapped, &as) || as != e {
			t.Errorf("errors.As(%s) = %v", entry.Code, as)
		}
	}
	// The family sentinel matches itself and neither timeout sentinel matches the family the other way.
	if !errors.Is(ErrSandboxTimeout, ErrSandboxTimeout) {
		t.Error("ErrSandboxTimeout is not itself")
	}
	if errors.Is(ErrSandboxTimeout, ErrExecutionTimeout) {
		t.Error("the family is not one of its members")
	}
	if errors.Is(Errorf(CodeExecutionTimeout, "x"), ErrCreateTimeout) {
		t.Error("ExecutionTimeout is CreateTimeout")
	}
	if errors.Is(errors.New("SBX_E1302 ExecutionTimeout"), ErrExecutionTimeout) {
		t.Error("a plain error with the same text matched: string matching")
	}
	// An unknown code becomes Internal rather than an error without a name.
	if e := Errorf("SBX_E9999", "x"); e.Code != CodeInternal {
		t.Errorf("Errorf with an undefined code = %+v", e)
	}
	if e := (&Error{Code: CodeSandboxGone, Name: "SandboxGone"}); e.Error() != "SBX_E1204 SandboxGone" {
		t.Errorf("Error() without message = %q", e.Error())
	}
}

func TestErrorWith(t *testing.T) {
	base := Errorf(CodeInvalidValue, "bad").With("field", "cmd")
	e := base.With("limit", 3)
	if base.Details["limit"] != nil {
		t.Error("With changed its receiver")
	}
	if e.Details["field"] != "cmd" || e.Details["limit"] != 3 {
		t.Errorf("With lost details: %v", e.Details)
	}
	if ErrInvalidValue.With("x", 1); ErrInvalidValue.Details != nil {
		t.Error("With changed a sentinel")
	}
}

func TestAsError(t *testing.T) {
	if AsError(nil) != nil {
		t.Error("AsError(nil) != nil")
	}
	e := Errorf(CodeSandboxGone, "gone")
	if AsError(fmt.Errorf("wrap: %w", e)) != e {
		t.Error("AsError did not unwrap an *Error")
	}
	if got := AsError(errors.New("boom")); got.Code != CodeInternal || got.Message != "boom" {
		t.Errorf("AsError(plain) = %+v", got)
	}
}

func TestEncodeDecodeError(t *testing.T) {
	tests := []*Error{
		Errorf(CodeExecutionTimeout, "process p1 ran past its timeout").With("sandbox_id", "s1"),
		Errorf(CodeInvalidRequest, ""),
		{Code: "SBX_E1999", Name: "FromTheFuture", Message: "a newer server's code", Retryable: true},
		Errorf(CodeCapabilityNotSupp, "x").With("missing", []any{"network_allowlist"}).With("n", 2.5),
	}
	for _, e := range tests {
		b := EncodeError(e)
		var raw map[string]map[string]any
		if err := json.Unmarshal(b, &raw); err != nil || raw["error"]["code"] != string(e.Code) {
			t.Errorf("EncodeError(%v) = %s: not {\"error\":{\"code\":...}}", e, b)
		}
		got := DecodeError(b)
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip: got %+v, want %+v", got, e)
		}
		if !errors.Is(got, e) {
			t.Errorf("decoded error is not its original: %v", got)
		}
	}
	// Details that JSON cannot hold are dropped, the error is kept.
	e := Errorf(CodeInternal, "x").With("bad", math.Inf(1))
	got := DecodeError(EncodeError(e))
	if got == nil || got.Code != CodeInternal || got.Details != nil {
		t.Errorf("unencodable details: %+v", got)
	}
	for _, body := range []string{``, `{}`, `null`, `{"error":null}`, `{"error":{}}`, `{"error":{"code":""}}`, `not json`, `{"ok":true}`, `[1]`} {
		if got := DecodeError([]byte(body)); got != nil {
			t.Errorf("DecodeError(%s) = %+v, want nil", body, got)
		}
	}
}

func FuzzDecodeError(f *testing.F) {
	f.Add([]byte(`{"error":{"code":"SBX_E1302","name":"ExecutionTimeout","message":"m","retryable":false,"details":{"a":1}}}`))
	f.Add([]byte(`{"error":{"code":"SBX_E1001"}}`))
	f.Add([]byte(`{"error":null}`))
	f.Add([]byte(`{"error":{"code":1}}`))
	f.Add([]byte(`{"error":{"code":"x","details":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		e := DecodeError(body)
		if e == nil {
			return
		}
		if e.Code == "" {
			t.Fatalf("DecodeError returned an error without a code: %+v", e)
		}
		_ = e.Error()
		_ = errors.Is(e, ErrSandboxTimeout)
		_ = e.Code.Number()
		// Whatever was decoded encodes and decodes to the same code and message.
		again := DecodeError(EncodeError(e))
		if again == nil || again.Code != e.Code || again.Message != e.Message || again.Name != e.Name || again.Retryable != e.Retryable {
			t.Fatalf("re-encode changed the error: %+v -> %+v", e, again)
		}
		if n := e.Code.Number(); n > 0 && codeForm.MatchString(string(e.Code)) && CodeFromNumber(n) != e.Code {
			t.Fatalf("code %s does not survive Number/CodeFromNumber: %s", e.Code, CodeFromNumber(n))
		}
	})
}
