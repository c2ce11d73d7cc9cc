package worker

import (
	"context"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// opRecord is one operation being recorded. Open publishes the opened
// record; close redacts and publishes the closed one.
type opRecord struct {
	w   *Worker
	rec events.OpRecord
	red redaction
	// summary is rec.Summary redacted, once for both phases (the summary
	// does not change after open; never written after it is set).
	summary map[string]string
}

// redaction is what a record must not reveal: the sandbox's secret values,
// or, when those are unknown (a sandbox re-adopted after a restart),
// everything that could hold one.
type redaction struct {
	secrets  []string
	withhold bool
}

const withheldMark = "[WITHHELD: the sandbox's secrets are unknown to this worker]"

// openOp starts the record of an operation. Under audit policy fail it
// returns SBX_E1501 when the opened record cannot be stored in time, and the
// caller must refuse the operation.
func (w *Worker) openOp(ctx context.Context, kind, opID, sandboxID, owner, traceparent string, red redaction, summary map[string]string) (*opRecord, *events.Error) {
	r := w.newOp(kind, opID, sandboxID, owner, traceparent, red, summary)
	if err := w.publishRecord(ctx, r.redacted(), events.EventOpened, true); err != nil {
		return r, err
	}
	return r, nil
}

// openOpAnyway starts the record of an operation that goes ahead whatever
// the audit policy (kills, reaps, refusals): under policy fail an opened
// record not stored in time is retried like a closed one, instead of being
// dropped while the operation it opens runs.
func (w *Worker) openOpAnyway(ctx context.Context, kind, opID, sandboxID, owner, traceparent string, red redaction, summary map[string]string) *opRecord {
	r := w.newOp(kind, opID, sandboxID, owner, traceparent, red, summary)
	_ = w.publishRecord(ctx, r.redacted(), events.EventOpened, false)
	return r
}

func (w *Worker) newOp(kind, opID, sandboxID, owner, traceparent string, red redaction, summary map[string]string) *opRecord {
	return &opRecord{w: w, red: red, rec: events.OpRecord{
		OpID: opID, Kind: kind, Phase: events.EventOpened, SandboxID: sandboxID, Backend: w.info.Name,
		Worker: w.cfg.WorkerID, Owner: owner, StartedAt: time.Now().UTC(), Traceparent: traceparent,
		Summary: summary,
	}}
}

// close ends the record with the outcome of err.
func (r *opRecord) close(err *events.Error) {
	if r == nil {
		return
	}
	now := time.Now().UTC()
	r.rec.Phase = events.EventClosed
	r.rec.EndedAt = &now
	r.rec.DurationMS = now.Sub(r.rec.StartedAt).Milliseconds()
	r.rec.Outcome = events.OutcomeOK
	if err != nil {
		r.rec.Outcome = events.OutcomeError
		r.rec.ErrorCode = err.Code
		r.rec.Error = err.Message
	}
	_ = r.w.publishRecord(detached(), r.redacted(), events.EventClosed, false)
}

// publishRecord stores one phase of a record. Under audit policy fail it
// waits for the ack; when none comes in time, a record whose operation may
// still be refused (refusable) is answered SBX_E1501, and any other is
// handed to the record queue and retried.
func (w *Worker) publishRecord(ctx context.Context, rec events.OpRecord, phase string, refusable bool) *events.Error {
	data, err := marshalRecord(&rec)
	if err != nil {
		return events.Errorf(events.CodeInternal, "encode record: %v", err)
	}
	typ := events.TypeOpOpened
	if phase == events.EventClosed {
		typ = events.TypeOpClosed
	}
	sandbox := rec.SandboxID
	if sandbox == "" {
		sandbox = "_"
	}
	id := rec.OpID + "-" + phase
	m, err := cemsg.Encode(events.OpsSubject(w.info.Name, sandbox, phase), cemsg.Envelope{
		ID: id, Type: typ, Source: w.source, Subject: rec.SandboxID,
		Traceparent: rec.Traceparent, Data: data,
	})
	if err != nil {
		return events.Errorf(events.CodeInternal, "encode record: %v", err)
	}
	// Signed after the message is complete: the auditor verifies the
	// subject, the ce-id and the data exactly as stored. A record nothing
	// waits for is signed with the others of its window (recordbatch.go).
	if w.cfg.AuditPolicy != AuditFail {
		w.batch.put(w, batchedRecord{m: m, name: recordName{opID: rec.OpID, kind: rec.Kind}})
		return nil
	}
	if err := w.keys.signRecord(m); err != nil {
		return events.Errorf(events.CodeInternal, "%v", err)
	}
	id = recsign.RecordMsgID(m) // a forgery published first under the ce-id does not drop it
	orig := copyMsg(m)
	ctx, cancel := context.WithTimeout(ctx, w.cfg.AuditTimeout)
	defer cancel()
	if _, err := w.js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
		if !refusable {
			// The operation happened or goes ahead: its record must still
			// be stored.
			w.log.Warn("operation record not stored in time, retrying", "op_id", rec.OpID, "kind", rec.Kind, slog.Any("err", err))
			w.unsettled.Add(1)
			w.storeRecord(orig, recordName{opID: rec.OpID, kind: rec.Kind})
			return nil
		}
		w.log.Error("operation record not stored under audit policy fail", "op_id", rec.OpID, "kind", rec.Kind, slog.Any("err", err))
		return events.Errorf(events.CodeAuditUnavailable, "the %s record could not be stored within %s", rec.Kind, w.cfg.AuditTimeout)
	}
	return nil
}

// Retrying records: each attempt waits recordAckWait for its ack; attempts
// stop after recordRetryFor, or once the worker is stopping or its
// connection is closed.
const (
	recordAckWait  = 5 * time.Second
	recordRetryFor = time.Minute
)

// recordName is what the log says of a record it could not store yet.
type recordName struct{ opID, kind string }

// storeRecord hands a record to the record queue (recordqueue.go), whose
// one goroutine publishes it and republishes it until the stream
// acknowledges it: an ack lost in a disconnection (nats.go fails every
// pending ack on reconnect) or a publish refused while the server restarts
// does not lose the record. The message id makes a repeat that was stored
// after all a no-op. Nothing here waits on the network. m is published as
// it is the first time and copied for the retries; nothing writes m after
// it is handed here.
func (w *Worker) storeRecord(m *nats.Msg, name recordName) {
	id := recsign.RecordMsgID(m) // signed by now: see RecordMsgID
	w.records.put(w, pendingRecord{orig: m, id: id, name: name})
}

// RecordsUnsettled is the number of operation records this worker has
// handed over for storing whose ack has not arrived yet and that are not
// counted lost: records in a batch window, in flight, or waiting for a
// retry. Zero means every record so far is stored or was given up on (and
// logged lost).
func (w *Worker) RecordsUnsettled() int64 { return w.unsettled.Load() }

func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

func copyMsg(m *nats.Msg) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	c.Data = m.Data
	return c
}

// redacted returns the record with every secret value, and anything that
// looks like a credential, replaced. Redaction happens here, once, for both
// phases, so nothing unredacted is ever published.
func (r *opRecord) redacted() events.OpRecord {
	out := r.rec
	if len(r.rec.Summary) > 0 && r.summary == nil {
		r.summary = make(map[string]string, len(r.rec.Summary))
		for k, v := range r.rec.Summary {
			if r.red.withhold && (k == "cmd" || k == "cwd") {
				v = withheldMark
			}
			r.summary[k] = Redact(v, r.red.secrets)
		}
	}
	if r.summary != nil {
		out.Summary = r.summary
	}
	out.Error = Redact(r.rec.Error, r.red.secrets)
	if r.red.withhold && out.Error != "" {
		out.Error = withheldMark
	}
	return out
}

const redactedMark = "[REDACTED]"

// credentialPatterns match values that look like credentials whatever their
// name: key=value pairs with a secret-sounding key, bearer tokens, and
// well-known token shapes.
var credentialPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credential|auth)[A-Za-z0-9_.-]*)(\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s&,;]+)`),
	regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`),
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\b(?:sk|pk|rk)[-_](?:live|test|proj)?[-_]?[A-Za-z0-9]{16,}\b`),
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}\b`),
	regexp.MustCompile(`\be2b_[0-9a-f]{20,}\b`),
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
}

// secretFlag is a command-line flag with a secret-sounding name followed by
// its value as the next argument ("--password hunter2", "--api-key k").
var secretFlag = regexp.MustCompile(`(?i)(\s-{1,2}[A-Za-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credential|auth)[A-Za-z0-9_.-]*)(\s+)([^\s-][^\s]*)`)

// Redact removes the given secret values and credential-looking substrings
// from s.
func Redact(s string, secrets []string) string {
	if s == "" {
		return s
	}
	if len(secrets) > 0 {
		// Longest first, so that a secret containing another is removed whole.
		sorted := append([]string(nil), secrets...)
		sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
		for _, v := range sorted {
			if len(v) >= 3 {
				s = strings.ReplaceAll(s, v, redactedMark)
			}
		}
	}
	if !mayHoldCredential(s) {
		return s // no pattern can match: spare the regular expressions
	}
	return redactPatterns(s)
}

// redactPatterns replaces what credentialPatterns and secretFlag match.
func redactPatterns(s string) string {
	// Token shapes first: the key=value pattern would otherwise take the
	// scheme of "Authorization: Bearer <token>" as the value and leave the
	// token itself.
	for _, re := range credentialPatterns[1:] {
		s = re.ReplaceAllString(s, redactedMark)
	}
	s = redactKeyValues(s)
	return secretFlag.ReplaceAllString(s, "${1}${2}"+redactedMark)
}

// redactKeyValues replaces the value of each key=value or key: value that
// credentialPatterns[0] matches, except a path's last component followed
// by a colon and an error's words ("exec /etc/passwd: permission denied",
// "open /work/token: no such file or directory"): that is a file named in
// an error. Anything else after such a path is redacted as a value
// ("vault read secret/api_key: sk_live_…").
func redactKeyValues(s string) string {
	re := credentialPatterns[0]
	ms := re.FindAllStringSubmatchIndex(s, -1)
	if ms == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		keyStart, sep, valStart, end := m[2], s[m[4]:m[5]], m[6], m[1]
		if keyStart > 0 && s[keyStart-1] == '/' && !strings.Contains(sep, "=") && isErrnoText(s[valStart:]) {
			continue
		}
		b.WriteString(s[last:valStart])
		b.WriteString(redactedMark)
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

// errnoTexts are the system's error words that follow a path in an error
// ("open /run/token: permission denied"), as Go's syscall package spells them.
var errnoTexts = []string{"permission denied", "no such file or directory", "is a directory", "not a directory",
	"exec format error", "operation not permitted", "read-only file system", "file exists",
	"too many levels of symbolic links", "text file busy", "file name too long", "no such device",
	"input/output error", "device or resource busy", "directory not empty", "invalid argument"}

// isErrnoText reports whether s starts with one of errnoTexts, in any case
// (tools print "Permission denied").
func isErrnoText(s string) bool {
	for _, t := range errnoTexts {
		if len(s) >= len(t) && strings.EqualFold(s[:len(t)], t) {
			return true
		}
	}
	return false
}

// credentialHints are substrings (lower case) of which every match of
// credentialPatterns and secretFlag holds one: the secret-sounding keys
// (password and passwd hold "pass"; the api, access and private keys
// "key"), the schemes, and the token shapes' prefixes with the separator
// that follows them ("sk-", "ghp_"). Bare two-letter prefixes ("sk", "gh")
// were in one in ten of the ids an operation record holds, and sent it
// through every regular expression: 6 % of dev's CPU under bench exec.
var credentialHints = []string{"pass", "secret", "token", "key", "credential", "auth",
	"bearer", "basic", "akia", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_",
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "e2b_", "-----begin"}

// mayHoldCredential reports whether a credential pattern could match s. A
// string with a byte outside ASCII always could: (?i) folds "ſ" to "s" and
// the Kelvin sign to "k", which lower-casing ASCII does not.
func mayHoldCredential(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return true
		}
	}
	lower := strings.ToLower(s)
	for _, h := range credentialHints {
		if strings.Contains(lower, h) {
			return true
		}
	}
	return false
}

// recorded runs f inside an operation record: opened before f (and f is
// not run when audit policy fail refuses), closed with f's outcome.
func (w *Worker) recorded(sb *sandbox, env cemsg.Envelope, kind string, summary map[string]string, f func(op *opRecord) (any, *events.Error)) (any, *events.Error) {
	op, aerr := w.openOp(detached(), kind, env.ID, sb.id, sb.record.Owner, env.Traceparent, sb.redaction(), summary)
	if aerr != nil {
		return nil, aerr
	}
	v, e := f(op)
	op.close(e)
	return v, e
}
