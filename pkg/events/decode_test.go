package events

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	big := `{"timeout_s":60,"metadata":{"k":"` + strings.Repeat("x", MaxRequestBytes) + `"}}`
	tests := []struct {
		name  string
		body  string
		code  Code   // "" = success
		field string // details.field, when set
	}{
		{"empty body is the empty object", ``, "", ""},
		{"whitespace", " \n\t", "", ""},
		{"object", `{"timeout_s":60}`, "", ""},
		{"surrounding whitespace", "\n {\"timeout_s\":60} \n", "", ""},
		{"malformed", `{"timeout_s":`, CodeInvalidRequest, ""},
		{"malformed string", `{"class":"abc}`, CodeInvalidRequest, ""},
		{"not an object", `[1,2]`, CodeInvalidRequest, ""},
		{"null", `null`, CodeInvalidRequest, ""},
		{"string", `"create"`, CodeInvalidRequest, ""},
		{"trailing object", `{"timeout_s":60}{"timeout_s":60}`, CodeInvalidRequest, ""},
		{"trailing garbage", `{"timeout_s":60} x`, CodeInvalidRequest, ""},
		{"trailing comma", `{"timeout_s":60,}`, CodeInvalidRequest, ""},
		{"unknown field", `{"timeout_s":60,"timeout":60}`, CodeUnknownField, "timeout"},
		{"unknown nested field", `{"timeout_s":60,"network":{"egress":"deny","proxy":"x"}}`, CodeUnknownField, "proxy"},
		{"wrong type", `{"timeout_s":"60"}`, CodeInvalidValue, "timeout_s"},
		{"wrong nested type", `{"timeout_s":60,"resources":{"cpus":"two"}}`, CodeInvalidValue, "resources.cpus"},
		{"fraction for int", `{"timeout_s":1.5}`, CodeInvalidValue, "timeout_s"},
		{"overflow", `{"timeout_s":99999999999999999999}`, CodeInvalidValue, "timeout_s"},
		{"map of wrong type", `{"timeout_s":60,"env":{"A":1}}`, CodeInvalidValue, "env"},
		{"oversized", big, CodePayloadTooLarge, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r CreateRequest
			e := Decode([]byte(tt.body), &r)
			if tt.code == "" {
				if e != nil {
					t.Fatalf("Decode(%.60q) = %v", tt.body, e)
				}
				return
			}
			if e == nil || e.Code != tt.code {
				t.Fatalf("Decode(%.60q) = %v, want %s", tt.body, e, tt.code)
			}
			if tt.field != "" && e.Details["field"] != tt.field {
				t.Errorf("details.field = %v, want %q", e.Details["field"], tt.field)
			}
			if e.Name == "" || e.Message == "" {
				t.Errorf("error without name or message: %+v", e)
			}
		})
	}
}

func TestDecodeExactlyAtLimit(t *testing.T) {
	pad := MaxRequestBytes - len(`{"class":""}`)
	body := `{"class":"` + strings.Repeat("x", pad) + `"}`
	if len(body) != MaxRequestBytes {
		t.Fatalf("test body is %d bytes", len(body))
	}
	var r CreateRequest
	if e := Decode([]byte(body), &r); e != nil {
		t.Fatalf("a request of exactly MaxRequestBytes was refused: %v", e)
	}
	if e := Decode([]byte(body+" "), &r); e == nil || e.Code != CodePayloadTooLarge {
		t.Fatalf("one byte over the limit: %v", e)
	}
}

// validateCase decodes body into a fresh request of op and validates it.
func validateCase(op, body string) *Error {
	r, ok := NewRequest(op)
	if !ok {
		panic("no op " + op)
	}
	if e := Decode([]byte(body), r); e != nil {
		return e
	}
	return r.Validate()
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", MaxIDLength+1)
	manyMeta := map[string]string{}
	for i := 0; i <= MaxMetadataEntries; i++ {
		manyMeta[strings.Repeat("k", i+1)] = "v"
	}
	manyMetaJSON, _ := json.Marshal(manyMeta)
	hugeArg := strings.Repeat("x", MaxArgvBytes+1)

	tests := []struct {
		op, body string
		code     Code
		field    string
	}{
		// create
		{OpCreate, `{"timeout_s":60}`, "", ""},
		{OpCreate, `{"class":"fake","timeout_s":60,"require_isolation":"container","network":{"egress":"allow","allow":["pypi.org"]},"resources":{"cpus":1,"memory_mb":512},"env":{"A":"1"},"secrets":{"T":"s"},"metadata":{"team":"x"},"requires":["exec","stream"],"idempotency_key":"k","sandbox_id":"my-box"}`, "", ""},
		{OpCreate, `{}`, CodeLifetimeRequired, "timeout_s"},
		{OpCreate, `{"class":"fake"}`, CodeLifetimeRequired, "timeout_s"},
		{OpCreate, `{"timeout_s":0}`, CodeLifetimeRequired, "timeout_s"},
		{OpCreate, `{"timeout_s":-1}`, CodeInvalidValue, "timeout_s"},
		{OpCreate, `{"timeout_s":86401}`, CodeInvalidValue, "timeout_s"},
		{OpCreate, `{"timeout_s":60,"class":"a","dsn":"fake://"}`, CodeInvalidValue, "class"},
		{OpCreate, `{"timeout_s":60,"require_isolation":"vm"}`, CodeInvalidValue, "require_isolation"},
		{OpCreate, `{"timeout_s":60,"network":{"egress":"open"}}`, CodeInvalidValue, "network"},
		{OpCreate, `{"timeout_s":60,"network":{"allow":["pypi.org"]}}`, CodeInvalidValue, "network"},
		{OpCreate, `{"timeout_s":60,"resources":{"cpus":-1}}`, CodeInvalidValue, "resources"},
		{OpCreate, `{"timeout_s":60,"requires":["teleport"]}`, CodeInvalidValue, "requires"},
		{OpCreate, `{"timeout_s":60,"env":{"A=B":"1"}}`, CodeInvalidValue, "env"},
		{OpCreate, `{"timeout_s":60,"env":{"":"1"}}`, CodeInvalidValue, "env"},
		{OpCreate, `{"timeout_s":60,"secrets":{"A\u0000":"1"}}`, CodeInvalidValue, "secrets"},
		{OpCreate, `{"timeout_s":60,"metadata":` + string(manyMetaJSON) + `}`, CodePayloadTooLarge, "metadata"},
		{OpCreate, `{"timeout_s":60,"metadata":{"k":"` + strings.Repeat("v", MaxMetadataValueSize+1) + `"}}`, CodePayloadTooLarge, "metadata"},
		{OpCreate, `{"timeout_s":60,"idempotency_key":"` + strings.Repeat("k", 257) + `"}`, CodeInvalidValue, "idempotency_key"},
		{OpCreate, `{"timeout_s":60,"sandbox_id":"a.b"}`, CodeInvalidID, "sandbox_id"},
		{OpCreate, `{"timeout_s":60,"sandbox_id":"a*"}`, CodeInvalidID, "sandbox_id"},
		{OpCreate, `{"timeout_s":60,"sandbox_id":">"}`, CodeInvalidID, "sandbox_id"},
		{OpCreate, `{"timeout_s":60,"sandbox_id":"a b"}`, CodeInvalidID, "sandbox_id"},
		{OpCreate, `{"timeout_s":60,"sandbox_id":"Box"}`, CodeInvalidID, "sandbox_id"},
		{OpCreate, `{"timeout_s":60,"sandbox_id":"` + long + `"}`, CodeInvalidID, "sandbox_id"},
		// exec
		{OpExec, `{"sandbox_id":"s1","cmd":["echo","hi"]}`, "", ""},
		{OpExec, `{"sandbox_id":"s1","cmd":["cat"],"stdin":"AAEC","stdin_encoding":"base64","stream":true,"keep_stdin_open":true,"process_id":"p1","timeout_ms":1000}`, "", ""},
		{OpExec, `{"cmd":["echo"]}`, CodeMissingField, "sandbox_id"},
		{OpExec, `{"sandbox_id":"s1"}`, CodeMissingField, "cmd"},
		{OpExec, `{"sandbox_id":"s1","cmd":[]}`, CodeMissingField, "cmd"},
		{OpExec, `{"sandbox_id":"s1","cmd":[""]}`, CodeMissingField, "cmd"},
		{OpExec, `{"sandbox_id":"s.1","cmd":["echo"]}`, CodeInvalidID, "sandbox_id"},
		{OpExec, `{"sandbox_id":"s*","cmd":["echo"]}`, CodeInvalidID, "sandbox_id"},
		{OpExec, `{"sandbox_id":"s>","cmd":["echo"]}`, CodeInvalidID, "sandbox_id"},
		{OpExec, `{"sandbox_id":"s 1","cmd":["echo"]}`, CodeInvalidID, "sandbox_id"},
		{OpExec, `{"sandbox_id":"S1","cmd":["echo"]}`, CodeInvalidID, "sandbox_id"},
		{OpExec, `{"sandbox_id":"s1","process_id":"p.1","cmd":["echo"]}`, CodeInvalidID, "process_id"},
		{OpExec, `{"sandbox_id":"s1","cmd":["echo","a\u0000b"]}`, CodeInvalidValue, "cmd"},
		{OpExec, `{"sandbox_id":"s1","cmd":["echo","` + hugeArg + `"]}`, CodePayloadTooLarge, "cmd"},
		{OpExec, `{"sandbox_id":"s1","cmd":["echo"],"timeout_ms":-1}`, CodeInvalidValue, "timeout_ms"},
		{OpExec, `{"sandbox_id":"s1","cmd":["echo"],"output_limit":-1}`, CodeInvalidValue, "output_limit"},
		{OpExec, `{"sandbox_id":"s1","cmd":["cat"],"keep_stdin_open":true}`, CodeInvalidValue, "keep_stdin_open"},
		{OpExec, `{"sandbox_id":"s1","cmd":["cat"],"stdin":"!!","stdin_encoding":"base64"}`, CodeInvalidValue, "stdin"},
		{OpExec, `{"sandbox_id":"s1","cmd":["cat"],"stdin":"x","stdin_encoding":"hex"}`, CodeInvalidValue, "stdin"},
		{OpExec, `{"sandbox_id":"s1","cmd":"echo hi"}`, CodeInvalidValue, "cmd"},
		// run_code
		{OpRunCode, `{"sandbox_id":"s1","code":"print(1)","context_id":"c1"}`, "", ""},
		{OpRunCode, `{"sandbox_id":"s1"}`, CodeMissingField, "code"},
		{OpRunCode, `{"sandbox_id":"s1","code":"1","context_id":"c.1"}`, CodeInvalidID, "context_id"},
		{OpRunCode, `{"sandbox_id":"s1","code":"1","process_id":"p 1"}`, CodeInvalidID, "process_id"},
		{OpRunCode, `{"sandbox_id":"s1","code":"1","timeout_ms":-5}`, CodeInvalidValue, "timeout_ms"},
		{OpRunCode, `{"sandbox_id":"s1","code":"1","language":"` + strings.Repeat("p", 33) + `"}`, CodeInvalidValue, "language"},
		{OpRunCode, `{"sandbox_id":"s1","code":"1","language":"py\nthon"}`, CodeInvalidValue, "language"},
		{OpRunCode, `{"sandbox_id":"s1","code":"1","language":"c++"}`, "", ""},
		{OpCodeContext, `{"sandbox_id":"s1","context_id":"c1","action":"create","language":"` + strings.Repeat("p", 33) + `"}`, CodeInvalidValue, "language"},
		// files
		{OpFilesWrite, `{"sandbox_id":"s1","path":"/tmp/a","data":"aGk="}`, "", ""},
		{OpFilesWrite, `{"sandbox_id":"s1","data":"aGk="}`, CodeMissingField, "path"},
		{OpFilesWrite, `{"sandbox_id":"s1","path":"/a","data":"aGk=","ref":{"bucket":"b","name":"n","size":1}}`, CodeInvalidValue, "data"},
		{OpFilesWrite, `{"sandbox_id":"s1","path":"/a\u0000b"}`, CodeInvalidValue, "path"},
		{OpFilesRead, `{"sandbox_id":"s1","path":"/tmp/a"}`, "", ""},
		{OpFilesRead, `{"sandbox_id":"*","path":"/tmp/a"}`, CodeInvalidID, "sandbox_id"},
		{OpFilesRead, `{"sandbox_id":"s1","path":"` + strings.Repeat("p", 4097) + `"}`, CodeInvalidValue, "path"},
		{OpFilesList, `{"sandbox_id":"s1","path":"/"}`, "", ""},
		{OpFilesList, `{"sandbox_id":"s1"}`, CodeMissingField, "path"},
		// signal, stdin
		{OpSignal, `{"sandbox_id":"s1","process_id":"p1","signal":"TERM"}`, "", ""},
		{OpSignal, `{"sandbox_id":"s1","signal":"TERM"}`, CodeMissingField, "process_id"},
		{OpSignal, `{"sandbox_id":"s1","process_id":"p1","signal":"term"}`, CodeInvalidValue, "signal"},
		{OpSignal, `{"sandbox_id":"s1","process_id":"p1","signal":"SIGKILL"}`, CodeInvalidValue, "signal"},
		{OpSignal, `{"sandbox_id":"s1","process_id":">","signal":"KILL"}`, CodeInvalidID, "process_id"},
		{OpStdin, `{"sandbox_id":"s1","process_id":"p1","data":"hi\n","close":true}`, "", ""},
		{OpStdin, `{"sandbox_id":"s1","process_id":"p1","data":"%%","encoding":"base64"}`, CodeInvalidValue, "data"},
		{OpStdin, `{"sandbox_id":"s1"}`, CodeMissingField, "process_id"},
		// kill, get
		{OpKill, `{"sandbox_id":"s1"}`, "", ""},
		{OpKill, `{}`, CodeMissingField, "sandbox_id"},
		{OpKill, `{"sandbox_id":"s.>"}`, CodeInvalidID, "sandbox_id"},
		{OpKill, `{"sandbox_id":"s1","force":true}`, CodeUnknownField, "force"},
		{OpGet, `{"sandbox_id":"s1"}`, "", ""},
		{OpGet, `{"sandbox_id":""}`, CodeMissingField, "sandbox_id"},
		{OpGet, `{"sandbox_id":" s1"}`, CodeInvalidID, "sandbox_id"},
		// list
		{OpList, `{}`, "", ""},
		{OpList, `{"backend":"fake","state":"running","metadata":{"team":"x"},"owner":"o","limit":10}`, "", ""},
		{OpList, `{"backend":"fa.ke"}`, CodeInvalidID, "backend"},
		{OpList, `{"state":"dead"}`, CodeInvalidValue, "state"},
		{OpList, `{"limit":-1}`, CodeInvalidValue, "limit"},
		// set_timeout
		{OpSetTimeout, `{"sandbox_id":"s1","timeout_s":30}`, "", ""},
		{OpSetTimeout, `{"sandbox_id":"s1"}`, CodeLifetimeRequired, "timeout_s"},
		{OpSetTimeout, `{"sandbox_id":"s1","timeout_s":100000}`, CodeInvalidValue, "timeout_s"},
		{OpSetTimeout, `{"timeout_s":30}`, CodeMissingField, "sandbox_id"},
		// backends
		{OpBackends, `{}`, "", ""},
		{OpBackends, ``, "", ""},
		{OpBackends, `{"x":1}`, CodeUnknownField, "x"},
	}
	for _, tt := range tests {
		e := validateCase(tt.op, tt.body)
		name := tt.op + " " + tt.body
		if len(name) > 120 {
			name = name[:120] + "…"
		}
		if tt.code == "" {
			if e != nil {
				t.Errorf("%s: %v", name, e)
			}
			continue
		}
		if e == nil || e.Code != tt.code {
			t.Errorf("%s: got %v, want %s", name, e, tt.code)
			continue
		}
		if e.Details["field"] != tt.field {
			t.Errorf("%s: details.field = %v, want %q", name, e.Details["field"], tt.field)
		}
	}
}

func TestOps(t *testing.T) {
	seen := map[string]bool{}
	for _, op := range Ops {
		if seen[op] {
			t.Errorf("op %s listed twice", op)
		}
		seen[op] = true
		r, ok := NewRequest(op)
		if !ok || r == nil {
			t.Errorf("NewRequest(%s) = %v, %v", op, r, ok)
			continue
		}
		if got := APISubject(op); got != "sbx.api.v1."+op {
			t.Errorf("APISubject(%s) = %s", op, got)
		}
		if v := Verb(op); strings.Contains(v, ".") || !ValidID(v) {
			t.Errorf("Verb(%s) = %q is not one token", op, v)
		}
		_, targets := SandboxTarget(r)
		isSandboxOp := false
		for _, s := range SandboxOps {
			isSandboxOp = isSandboxOp || s == op
		}
		if targets != isSandboxOp {
			t.Errorf("%s: SandboxTarget ok = %v, but in SandboxOps = %v", op, targets, isSandboxOp)
		}
		if isSandboxOp {
			if got, ok := OpFromCommandType(CommandType(op)); !ok || got != op {
				t.Errorf("OpFromCommandType(CommandType(%s)) = %s, %v", op, got, ok)
			}
		}
	}
	if _, ok := NewRequest("nope"); ok {
		t.Error("NewRequest of an unknown op succeeded")
	}
	for _, typ := range []string{"", TypePrefix, TypePrefix + "cmd.", TypePrefix + "cmd.nope", TypeOpOpened, "io.other.v1.cmd.exec"} {
		if op, ok := OpFromCommandType(typ); ok {
			t.Errorf("OpFromCommandType(%q) = %s", typ, op)
		}
	}
	if op, ok := OpFromCommandType(TypeCmdCreate); !ok || op != OpCreate {
		t.Errorf("OpFromCommandType(create) = %s, %v", op, ok)
	}
}

// idFields lists the string fields of a request whose JSON name marks an id.
func idFields(r Request) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(r).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() == reflect.String && (strings.HasSuffix(name, "_id") || name == "backend") {
			out[name] = v.Field(i).String()
		}
	}
	return out
}

func FuzzDecodeRequest(f *testing.F) {
	seeds := []string{
		`{"timeout_s":60}`, `{}`, ``, `{"timeout_s":60,"sandbox_id":"a.b"}`,
		`{"sandbox_id":"s1","cmd":["echo","hi"],"stream":true,"process_id":"p1"}`,
		`{"sandbox_id":"s1","code":"print(1)","context_id":"c1"}`,
		`{"sandbox_id":"s1","path":"/a","data":"aGk="}`,
		`{"sandbox_id":"s1","process_id":"p1","signal":"KILL"}`,
		`{"sandbox_id":"s1","process_id":"p1","data":"AA==","encoding":"base64"}`,
		`{"backend":"fake","state":"running"}`, `{"sandbox_id":"s1","timeout_s":5}`,
		`{"sandbox_id":"s*"}`, `{"sandbox_id":"S 1"}`, `[`, `{"a":1}`, `null`, `{"timeout_s":"x"}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, opIndex uint8, body []byte) {
		op := Ops[int(opIndex)%len(Ops)]
		r, _ := NewRequest(op)
		if e := Decode(body, r); e != nil {
			if e.Code == "" || e.Code.Number() == 0 {
				t.Fatalf("Decode error without a code: %+v", e)
			}
			return
		}
		e := r.Validate()
		if e != nil {
			if e.Code == "" || e.Code.Number() == 0 {
				t.Fatalf("Validate error without a code: %+v", e)
			}
			return
		}
		for field, id := range idFields(r) {
			if id != "" && !ValidID(id) {
				t.Fatalf("%s validated with %s = %q, not a valid id", op, field, id)
			}
		}
		if id, ok := SandboxTarget(r); ok && !ValidID(id) {
			t.Fatalf("%s validated with target sandbox %q", op, id)
		}
		// A valid request re-encodes and decodes to a valid request.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%s: re-encode: %v", op, err)
		}
		r2, _ := NewRequest(op)
		if e := Decode(b, r2); e != nil {
			t.Fatalf("%s: re-encoded request %s does not decode: %v", op, b, e)
		}
		if e := r2.Validate(); e != nil {
			t.Fatalf("%s: re-encoded request %s does not validate: %v", op, b, e)
		}
	})
}
