package auditor

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// GenesisHash is the prev_hash of the first line.
var GenesisHash = strings.Repeat("0", 64)

// Entry is one line of the audit log.
type Entry struct {
	Seq       uint64          `json:"seq"`
	ID        string          `json:"id"` // the CloudEvent id: <op_id>-<phase>
	Type      string          `json:"type"`
	Source    string          `json:"source"`
	Time      time.Time       `json:"time"`
	Subject   string          `json:"subject"`
	StreamSeq uint64          `json:"stream_seq,omitempty"`
	Record    json.RawMessage `json:"record"`
	// Sig is the verdict on the record's signature (SigOK, SigMissing,
	// SigInvalid, SigUntrusted) and Signer the key it claimed; lines
	// written before records were signed have neither.
	Sig    string `json:"sig,omitempty"`
	Signer string `json:"signer,omitempty"`
	// Signature, SigBatch and NotAfter are the record's signature headers
	// as received (Sbx-Signature, Sbx-Signature-Batch, Sbx-Not-After), so
	// that Verify checks the signature again, offline, rather than trust
	// Sig. The signature covers the record's bytes as published: the
	// line's record byte for byte, or, when those bytes could not be
	// kept in the line as they were, Data (their base64).
	Signature string `json:"signature,omitempty"`
	SigBatch  string `json:"sig_batch,omitempty"`
	NotAfter  string `json:"not_after,omitempty"`
	Data      string `json:"data,omitempty"`
	PrevHash  string `json:"prev_hash"`
	Hash      string `json:"hash"`

	// canon is Record's canonical form when Record is not canonical
	// itself (kept as published); the chain hashes the canonical form.
	canon json.RawMessage
}

// canonical returns the canonical JSON of a JSON object with key "hash"
// removed: keys sorted, no whitespace, numbers as written.
func canonical(obj []byte) ([]byte, string, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, "", err
	}
	if m == nil {
		return nil, "", errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", errors.New("trailing data after the JSON object")
	}
	h, _ := m["hash"].(string)
	delete(m, "hash")
	b, err := json.Marshal(m)
	return b, h, err
}

// canonicalEntry is canonical(json.Marshal(e)) without the decode and
// re-encode of the whole line: e's fields in sorted key order, each string
// encoded by encoding/json, omitempty fields left out as json.Marshal
// does, and e.Record, which must be canonical already (canonicalValue),
// as is. TestCanonicalEntry holds it to canonical's output.
func canonicalEntry(e Entry) []byte { return appendCanonicalEntry(nil, e) }

// appendCanonicalEntry appends canonicalEntry(e) to b.
func appendCanonicalEntry(b []byte, e Entry) []byte {
	rec := e.Record
	if e.canon != nil {
		rec = e.canon
	}
	// The keys, punctuation, numbers and time take < 300 bytes.
	if need := 300 + len(rec) + len(e.ID) + len(e.PrevHash) + len(e.Sig) + len(e.Signer) + len(e.Source) +
		len(e.Subject) + len(e.Type) + len(e.Signature) + len(e.SigBatch) + len(e.NotAfter) + len(e.Data); cap(b)-len(b) < need {
		b = slices.Grow(b, need)
	}
	sep := byte('{')
	key := func(k string) {
		b = append(b, sep, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		sep = ','
	}
	str := func(k, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		key(k)
		b = appendJSONString(b, v)
	}
	num := func(k string, v uint64, omitEmpty bool) {
		if omitEmpty && v == 0 {
			return
		}
		key(k)
		b = strconv.AppendUint(b, v, 10)
	}
	t, _ := e.Time.MarshalJSON() // a time the log holds is always in range
	str("data", e.Data, true)
	str("id", e.ID, false)
	str("not_after", e.NotAfter, true)
	str("prev_hash", e.PrevHash, false)
	key("record")
	b = append(b, rec...)
	num("seq", e.Seq, false)
	str("sig", e.Sig, true)
	str("sig_batch", e.SigBatch, true)
	str("signature", e.Signature, true)
	str("signer", e.Signer, true)
	str("source", e.Source, false)
	num("stream_seq", e.StreamSeq, true)
	str("subject", e.Subject, false)
	key("time")
	b = append(b, t...)
	str("type", e.Type, false)
	return append(b, '}')
}

// appendJSONString appends s to b JSON-encoded as canonical's re-encoding
// does (encoding/json writes each byte of invalid UTF-8 as \ufffd, which
// decodes to U+FFFD and is then written as that character): a string of printable ASCII
// without a quote, a backslash, <, > or & as it is (encoding/json writes
// it so), any other through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return append(b, slowJSONString(s)...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func slowJSONString(s string) []byte {
	if !utf8.ValidString(s) {
		var sb strings.Builder
		for _, r := range s { // one U+FFFD per invalid byte, as encoding/json
			sb.WriteRune(r)
		}
		s = sb.String()
	}
	q, _ := json.Marshal(s) // a string always encodes
	return q
}

// chainHash is hex(SHA-256(prev || canon)).
func chainHash(prev string, canon []byte) string {
	sum := sha256.New()
	sum.Write([]byte(prev))
	sum.Write(canon)
	return hex.EncodeToString(sum.Sum(nil))
}

// DefaultIndexSize is how many of the most recent record ids a Log
// remembers by default.
//
// The index exists to skip records that come back: a record written and
// fsync'd whose ack was lost (the durable consumer redelivers it AckWait after
// delivery, and at most MaxAckPending records are unacknowledged at once), and
// a record re-published with a new Nats-Msg-Id after SBX_OPS's 2-minute
// duplicate window (bus.RecordDuplicates). Both come back soon after they were written, so the index
// keeps only the last DefaultIndexSize ids of the file rather than every id it
// ever held: 100000 ids is over three minutes of records at 500 records/s
// (several AckWait periods at the default 30s), in about 10 MB of memory. A record
// older than the window that comes back (only when the durable consumer is
// deleted and re-created over an existing file, replaying SBX_OPS) is written
// again, and Verify reports it as a duplicate: rotate the file first.
const DefaultIndexSize = 100000

// Log is an open audit log with its id index. It is not safe for concurrent
// use: the Service is its single writer.
type Log struct {
	path  string
	f     *os.File
	size  int64
	seq   uint64
	head  string
	index idIndex
	// buf and enc are appendCanonical's, kept from batch to batch (a
	// batch's lines are encoded into buf, written and fsync'd at once).
	buf   bytes.Buffer
	enc   *json.Encoder
	canon []byte // an entry's canonical form, hashed into the chain

	// key signs the checkpoints (seal.go) of the log logID, one at most
	// every lines after the last (at seq cpSeq) and one at Close.
	key   *recsign.Key
	logID string
	every uint64
	cpSeq uint64
	cp    Checkpoint
	// cpLine is the last checkpoint line written since the log was opened.
	cpLine Entry
	// trusted are the keys whose checkpoints OpenLog resumes from and
	// accepts (the log's key when it is persistent; nil: any checkpoint
	// whose signature verifies, and no resume). unsealedSince is when the
	// first line after the last checkpoint was written (zero: none).
	trusted       []string
	unsealedSince time.Time
	// verified is how many lines OpenLog checked: those after the last
	// checkpoint, or all of a log without one.
	verified int
}

// logOptions are what a Log is opened with.
type logOptions struct {
	indexSize int
	key       *recsign.Key // nil: a new key
	every     int          // 0: DefaultCheckpointEvery
	// newKey: key was made for this process, so no checkpoint already in
	// the log can be its (sealtimer.go, "Trusted checkpoints").
	newKey bool
}

// idIndex holds the last max record ids added, evicting the oldest in O(1),
// and whether the line holding each was signed by a trusted worker (sig
// ok): a signed record is written after an unsigned one of its id (a
// forgery published first), never the other way round.
type idIndex struct {
	max  int
	ids  map[string]bool
	fifo []string // ring of the ids in ids, oldest at next once full
	next int
}

func newIDIndex(max int) idIndex {
	return idIndex{max: max, ids: make(map[string]bool, min(max, 4096))}
}

func (x *idIndex) has(id string) bool { _, ok := x.ids[id]; return ok }

// skip reports whether a record of id with verdict ok adds nothing to
// the log: its id is there, signed, or it is not signed either.
func (x *idIndex) skip(id string, ok bool) bool {
	was, seen := x.ids[id]
	return seen && (was || !ok)
}

func (x *idIndex) add(id string, ok bool) {
	if x.has(id) {
		x.ids[id] = x.ids[id] || ok
		return
	}
	// A record's id is a substring of its message's whole header block
	// (nats.go decodes headers from one copy of it): kept as it is, each of
	// the index's ids would keep that block, a kilobyte with the signature
	// headers, alive (docs/benchmarks.md, "The fifth session").
	id = strings.Clone(id)
	if len(x.fifo) < x.max {
		x.fifo = append(x.fifo, id)
	} else {
		delete(x.ids, x.fifo[x.next])
		x.fifo[x.next] = id
		x.next = (x.next + 1) % x.max
	}
	x.ids[id] = ok
}

func (x *idIndex) len() int { return len(x.ids) }

// OpenLog opens (creating it if needed) the audit log at path, checks the
// chain after its last checkpoint (all of it when it has none), loads the
// index of its last DefaultIndexSize record ids and cuts off a torn last
// line. Its checkpoints are signed with a new key. A log whose chain is
// broken is not appended to: the error wraps events.ErrAuditTampered.
func OpenLog(path string) (*Log, error) { return openLogWith(path, logOptions{}) }

// openLog is OpenLog with an index of the last indexSize ids.
func openLog(path string, indexSize int) (*Log, error) {
	return openLogWith(path, logOptions{indexSize: indexSize})
}

func openLogWith(path string, o logOptions) (*Log, error) {
	if o.indexSize <= 0 {
		o.indexSize = DefaultIndexSize
	}
	if o.every <= 0 {
		o.every = DefaultCheckpointEvery
	}
	if o.key == nil {
		k, err := recsign.NewKey(nil)
		if err != nil {
			return nil, fmt.Errorf("auditor: checkpoint key: %w", err)
		}
		o.key, o.newKey = k, true
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("auditor: log dir: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("auditor: open log: %w", err)
	}
	l := &Log{path: path, f: f, head: GenesisHash, index: newIDIndex(o.indexSize), key: o.key, every: uint64(o.every),
		trusted: trustedKeys(o)}
	if err := l.load(o.indexSize); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// load checks the log from its last checkpoint on (resume.go), sets the
// Log's state from it and cuts off a torn last line.
func (l *Log) load(indexSize int) error {
	f := l.f
	r, err := findResume(f, indexSize, l.trusted)
	if err != nil {
		return fmt.Errorf("auditor: read log %s: %w", l.path, err)
	}
	for _, x := range r.ids {
		l.index.add(x.id, x.ok)
	}
	if _, err := f.Seek(r.state.offset, io.SeekStart); err != nil {
		return fmt.Errorf("auditor: seek log: %w", err)
	}
	rep, err := verify(f, r.state, verifyOpts{VerifyOptions: VerifyOptions{AllowOpenTail: true, AuditorKeys: l.trusted}, chainOnly: true},
		func(e *Entry) {
			if e.Type != TypeCheckpoint {
				l.index.add(e.ID, e.Sig == SigOK)
			}
		})
	if err != nil {
		return fmt.Errorf("auditor: read log %s: %w", l.path, err)
	}
	l.verified = rep.Verified
	if len(rep.Problems) > 0 {
		return fmt.Errorf("auditor: log %s: %w", l.path, rep.err())
	}
	if rep.TornTail {
		if err := f.Truncate(rep.GoodBytes); err != nil {
			return fmt.Errorf("auditor: cut torn last line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("auditor: sync log: %w", err)
		}
	}
	if _, err := f.Seek(rep.GoodBytes, io.SeekStart); err != nil {
		return fmt.Errorf("auditor: seek log: %w", err)
	}
	l.size, l.seq, l.head = rep.GoodBytes, rep.LastSeq, rep.HeadHash
	if l.head == "" {
		l.head = GenesisHash
	}
	l.logID = events.NewID()
	if cp := rep.LastCheckpoint; cp != nil {
		l.logID, l.cpSeq, l.cp = cp.Log, cp.Seq+1, *cp
	}
	return nil
}

// Verified is how many lines OpenLog checked: those after the log's last
// checkpoint, or every line of a log without one.
func (l *Log) Verified() int { return l.verified }

// LogID is the log's id, named by its checkpoints.
func (l *Log) LogID() string { return l.logID }

// Has reports whether a record id is among the last ids of the log that it
// remembers (DefaultIndexSize unless set by Config.IndexSize).
func (l *Log) Has(id string) bool { return l.index.has(id) }

// Len is the number of lines.
func (l *Log) Len() uint64 { return l.seq }

// Head is the hash of the last line (GenesisHash when empty).
func (l *Log) Head() string { return l.head }

// Append writes the entries whose id is not in the log's index (Seq,
// PrevHash and Hash are assigned here), then fsyncs. It returns the entries written.
// On error nothing is considered written and the file is cut back.
func (l *Log) Append(entries []Entry) ([]Entry, error) {
	canon := make([]Entry, len(entries))
	for i, e := range entries {
		if len(e.Record) == 0 {
			e.Record = json.RawMessage("null") // as json.Marshal writes a nil RawMessage
		}
		rec, err := canonicalValue(e.Record)
		if err != nil {
			return nil, fmt.Errorf("auditor: canonical entry %s: %w", e.ID, err)
		}
		if e.Data != "" {
			e.Record, e.canon = rec, nil
		} else {
			keepRecord(&e, e.Record, rec)
		}
		canon[i] = e
	}
	return l.appendCanonical(canon)
}

// appendCanonical is Append for entries whose Record is canonical already,
// or kept as published with its canonical form in canon (keepRecord: the
// Service's decodeRecord made it so). A checkpoint follows when every
// lines or more followed the last.
func (l *Log) appendCanonical(entries []Entry) ([]Entry, error) {
	written, err := l.write(entries)
	if len(written) > 0 && l.unsealedSince.IsZero() {
		l.unsealedSince = time.Now()
	}
	if err != nil || l.seq-l.cpSeq < l.every {
		return written, err
	}
	return written, l.Checkpoint()
}

// Checkpoint appends a checkpoint line signed by the log's key, vouching
// for the last line, unless the last line is one.
func (l *Log) Checkpoint() error {
	if l.seq == 0 || l.cpSeq == l.seq {
		return nil
	}
	e, err := newCheckpoint(l.key, l.logID, l.seq, l.head, time.Now())
	if err != nil {
		return err
	}
	e.canon, err = canonicalValue(e.Record)
	if err != nil {
		return err
	}
	cp := Checkpoint{Head: l.head, Log: l.logID, Seq: l.seq, V: FormatVersion}
	written, err := l.write([]Entry{e})
	if err != nil {
		return err
	}
	l.cp, l.cpLine, l.unsealedSince = cp, written[0], time.Time{}
	return nil
}

// lastCheckpointLine is the last checkpoint line this Log wrote (ok false
// when it wrote none since it was opened).
func (l *Log) lastCheckpointLine() (Entry, bool) { return l.cpLine, l.cpLine.ID != "" }

// LastCheckpoint is the log's last checkpoint (ok false before the first).
func (l *Log) LastCheckpoint() (Checkpoint, bool) {
	if l.cpSeq == 0 {
		return Checkpoint{}, false
	}
	return l.cp, true
}

// write appends entries (see appendCanonical) and fsyncs.
func (l *Log) write(entries []Entry) ([]Entry, error) {
	var (
		written []Entry
		seq     = l.seq
		head    = l.head
		seen    = make(map[string]bool, len(entries))
	)
	buf := &l.buf
	buf.Reset()
	if l.enc == nil {
		l.enc = json.NewEncoder(buf) // as json.Marshal, and a newline
	}
	defer func() {
		if buf.Cap() > maxKeptBuffer {
			*buf = bytes.Buffer{}
		}
		if cap(l.canon) > maxKeptBuffer {
			l.canon = nil
		}
	}()
	for _, e := range entries {
		ok := e.Sig == SigOK
		if was, dup := seen[e.ID]; l.index.skip(e.ID, ok) || (dup && (was || !ok)) {
			continue
		}
		seen[e.ID] = ok
		seq++
		e.Seq, e.PrevHash, e.Hash = seq, head, ""
		l.canon = appendCanonicalEntry(l.canon[:0], e)
		e.Hash = chainHash(head, l.canon)
		if line, ok := appendLine(buf.AvailableBuffer(), &e); ok {
			buf.Write(line)
		} else if err := l.enc.Encode(e); err != nil {
			return nil, fmt.Errorf("auditor: encode entry %s: %w", e.ID, err)
		}
		head = e.Hash
		written = append(written, e)
	}
	if len(written) == 0 {
		return nil, nil
	}
	if _, err := l.f.Write(buf.Bytes()); err != nil {
		_ = l.f.Truncate(l.size)
		_, _ = l.f.Seek(l.size, io.SeekStart)
		return nil, fmt.Errorf("auditor: write log: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		_ = l.f.Truncate(l.size)
		_, _ = l.f.Seek(l.size, io.SeekStart)
		return nil, fmt.Errorf("auditor: fsync log: %w", err)
	}
	l.size += int64(buf.Len())
	l.seq, l.head = seq, head
	for _, e := range written {
		if e.Type == TypeCheckpoint {
			l.cpSeq = e.Seq
			continue
		}
		l.index.add(e.ID, e.Sig == SigOK)
	}
	return written, nil
}

// maxKeptBuffer bounds the encoding buffer a Log keeps between batches.
const maxKeptBuffer = 1 << 20

// Close seals the log with a checkpoint and closes the file.
func (l *Log) Close() error {
	err := l.Checkpoint()
	return errors.Join(err, l.f.Close())
}

// ProblemKind classifies a broken line.
type ProblemKind string

// The kinds of problem Verify reports.
const (
	ProblemMalformed ProblemKind = "malformed" // not a JSON object of the expected shape
	ProblemChanged   ProblemKind = "changed"   // the line's content does not match its hash
	ProblemLink      ProblemKind = "link"      // prev_hash is not the previous line's hash: a line removed, inserted or moved
	ProblemSequence  ProblemKind = "sequence"  // seq is not the previous seq + 1
	ProblemDuplicate ProblemKind = "duplicate" // a record id appears a second time
	// ProblemSignature: a line says its record was signed by a trusted
	// worker, and the signature it keeps does not verify.
	ProblemSignature ProblemKind = "signature"
	// ProblemCheckpoint: a checkpoint line's signature does not verify, is
	// not by an auditor key, or it does not vouch for the line before it.
	ProblemCheckpoint ProblemKind = "checkpoint"
	// ProblemUnsealed: lines follow the last checkpoint (the log was cut
	// off, or is still being written: VerifyOptions.AllowOpenTail).
	ProblemUnsealed ProblemKind = "unsealed"
	// ProblemTruncated: the checkpoint VerifyOptions.Checkpoint names (the
	// latest the auditor published) is not in the file.
	ProblemTruncated ProblemKind = "truncated"
)

// VerifyOptions are what VerifyWith checks the file against.
type VerifyOptions struct {
	// TrustedSigners are the workers' (and the reaper's) public keys:
	// a record signed by another is reported untrusted. Empty: a record
	// whose signature verifies keeps the auditor's verdict.
	TrustedSigners []string
	// AuditorKeys are the auditor's public keys: a checkpoint signed by
	// another is a problem. Empty: any checkpoint whose signature
	// verifies (an attacker may sign their own: pin the keys).
	AuditorKeys []string
	// AllowOpenTail accepts lines after the last checkpoint (a log the
	// auditor is still writing). Otherwise they are a problem: a closed
	// log ends with a checkpoint.
	AllowOpenTail bool
	// Checkpoint, when set, is the latest checkpoint the auditor
	// published (KV sbx_audit): the file must hold it.
	Checkpoint *Checkpoint
}

// verifyOpts adds what OpenLog needs: chainOnly checks the chain and the
// checkpoints, not the records' signatures.
type verifyOpts struct {
	VerifyOptions
	chainOnly bool
}

// verifyState is where verify starts: after line `line` (seq prevSeq,
// hash prevHash) at byte offset.
type verifyState struct {
	prevHash string
	prevSeq  uint64
	line     int
	offset   int64
}

// Problem is one broken line.
type Problem struct {
	Line    int         `json:"line"` // 1-based line number in the file
	Seq     uint64      `json:"seq,omitempty"`
	Kind    ProblemKind `json:"kind"`
	Message string      `json:"message"`
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	Lines    int       `json:"lines"`
	LastSeq  uint64    `json:"last_seq"`
	HeadHash string    `json:"head_hash"` // the hash of the last good line: keep it to detect truncation later
	Problems []Problem `json:"problems,omitempty"`
	// TornTail is set when the last line is incomplete; the auditor cuts it
	// off at start (it was never acknowledged).
	TornTail  bool  `json:"torn_tail,omitempty"`
	GoodBytes int64 `json:"-"`
	// Signed counts the lines whose record was signed by a trusted worker
	// (sig "ok"). Unverified lists the others by line (the first
	// MaxUnverifiedListed of them; UnverifiedCount counts them all): forged,
	// altered, unsigned or signed by an unknown key. A line written before
	// records were signed reports SigUnsigned.
	Signed          int                `json:"signed"`
	UnverifiedCount int                `json:"unverified_count,omitempty"`
	Unverified      []SignatureProblem `json:"unverified,omitempty"`
	// Checkpoints counts the checkpoint lines, LastCheckpoint is the last
	// one and OpenTail the lines after it.
	Checkpoints    int         `json:"checkpoints"`
	LastCheckpoint *Checkpoint `json:"last_checkpoint,omitempty"`
	OpenTail       int         `json:"open_tail,omitempty"`
	// Records counts the record lines (Lines less the checkpoints, from
	// where the check began).
	Records int `json:"records"`
	// Verified is how many lines were read and checked.
	Verified int `json:"-"`
}

// MaxUnverifiedListed bounds VerifyReport.Unverified.
const MaxUnverifiedListed = 10000

// SignatureProblem is a line whose record is not known to come from a
// trusted worker.
type SignatureProblem struct {
	Line   int    `json:"line"`
	Seq    uint64 `json:"seq"`
	ID     string `json:"id"`
	Sig    string `json:"sig"`
	Signer string `json:"signer,omitempty"`
}

// RecordsOK reports whether every record was signed by a trusted worker.
func (r VerifyReport) RecordsOK() bool { return r.UnverifiedCount == 0 }

// OK reports whether the chain is intact (a torn tail alone is not tampering).
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

// FirstBadLine is the line of the first problem, 0 when none.
func (r VerifyReport) FirstBadLine() int {
	if len(r.Problems) == 0 {
		return 0
	}
	return r.Problems[0].Line
}

func (r VerifyReport) err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	p := r.Problems[0]
	return events.Errorf(events.CodeAuditTampered, "line %d: %s: %s (%d problems)", p.Line, p.Kind, p.Message, len(r.Problems)).
		With("line", p.Line).With("kind", string(p.Kind)).With("problems", len(r.Problems))
}

// Verify reads an audit log and checks every line: its hash, its link to the
// previous line, its sequence number and that no record id repeats. It
// reports each broken line by its line number. The error is nil when the
// chain is intact, an *events.Error with code SBX_E1502 (errors.Is
// events.ErrAuditTampered) naming the first broken line when it is not, or
// the read error. Truncation at the end cannot be seen from the file alone:
// compare LastSeq and HeadHash with a value recorded earlier.
//
// It also reports, in Unverified, every line whose record the auditor did
// not find signed by a trusted worker (RecordsOK is false then); that is
// not an error of the chain: see SignatureError.
func Verify(r io.Reader) (VerifyReport, error) {
	return VerifyWith(r, VerifyOptions{AllowOpenTail: true})
}

// VerifyWith is Verify with options: the keys of the workers and of the
// auditor, whether lines may follow the last checkpoint, and the latest
// checkpoint the auditor published. Every record's signature is checked
// again from the signature its line keeps (a line's "sig" is not taken on
// its word), every checkpoint's signature and what it vouches for.
func VerifyWith(r io.Reader, o VerifyOptions) (VerifyReport, error) {
	rep, err := verify(r, verifyState{prevHash: GenesisHash}, verifyOpts{VerifyOptions: o}, nil)
	if err != nil {
		return rep, fmt.Errorf("auditor: verify: %w", err)
	}
	return rep, rep.err()
}

// SignatureError is nil when every record of the report was signed by a
// trusted worker, and otherwise an *events.Error with code SBX_E1502 naming
// the first line that was not.
func (r VerifyReport) SignatureError() error {
	if r.UnverifiedCount == 0 {
		return nil
	}
	p := r.Unverified[0]
	return events.Errorf(events.CodeAuditTampered, "line %d: record %s: signature %s (%d records not signed by a trusted worker)",
		p.Line, p.ID, p.Sig, r.UnverifiedCount).With("line", p.Line).With("kind", "signature").With("records", r.UnverifiedCount)
}

func verify(r io.Reader, st verifyState, o verifyOpts, each func(*Entry)) (VerifyReport, error) {
	rep := VerifyReport{HeadHash: st.prevHash, LastSeq: st.prevSeq, Lines: st.line, GoodBytes: st.offset}
	br := bufio.NewReaderSize(r, 1<<20)
	var (
		prevHash = st.prevHash
		prevSeq  = st.prevSeq
		offset   = st.offset
		ids      = make(map[string]idLine)
		line     = st.line
		cpLine   = st.line // the line of the last checkpoint (or where verify began)
		logID    string
		busSeen  bool
	)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			line++
			if b[len(b)-1] != '\n' { // no newline: the last, torn line
				rep.TornTail = true
				break
			}
			offset += int64(len(b))
			rep.Lines = line
			rep.Verified++
			e, canon, h, perr := parseLine(b)
			if perr != nil {
				rep.Problems = append(rep.Problems, Problem{Line: line, Kind: ProblemMalformed, Message: perr.Error()})
				// Resynchronise on the line's own claims so that one bad line
				// is reported once.
				continue
			}
			if got := chainHash(e.PrevHash, canon); got != h {
				rep.Problems = append(rep.Problems, Problem{Line: line, Seq: e.Seq, Kind: ProblemChanged,
					Message: "content does not match its hash"})
			}
			if e.PrevHash != prevHash {
				rep.Problems = append(rep.Problems, Problem{Line: line, Seq: e.Seq, Kind: ProblemLink,
					Message: fmt.Sprintf("prev_hash does not match line %d's hash: a line was removed, inserted or moved here", line-1)})
			}
			if e.Seq != prevSeq+1 {
				rep.Problems = append(rep.Problems, Problem{Line: line, Seq: e.Seq, Kind: ProblemSequence,
					Message: fmt.Sprintf("seq %d follows seq %d", e.Seq, prevSeq)})
			}
			if e.Type == TypeCheckpoint {
				cp, cerr := checkCheckpoint(e, o.AuditorKeys)
				if cerr == nil && logID != "" && cp.Log != logID {
					cerr = fmt.Errorf("checkpoint of log %s in log %s", cp.Log, logID)
				}
				if cerr != nil {
					rep.Problems = append(rep.Problems, Problem{Line: line, Seq: e.Seq, Kind: ProblemCheckpoint, Message: cerr.Error()})
				} else {
					logID, cpLine = cp.Log, line
					rep.Checkpoints++
					rep.LastCheckpoint = &cp
					if bc := o.Checkpoint; bc != nil && *bc == cp {
						busSeen = true
					}
				}
			} else {
				rep.Records++
				ok := verifyRecordLine(&rep, o, line, e)
				if first, dup := ids[e.ID]; dup && (first.ok || !ok) {
					rep.Problems = append(rep.Problems, Problem{Line: line, Seq: e.Seq, Kind: ProblemDuplicate,
						Message: fmt.Sprintf("record %s is already on line %d", e.ID, first.line)})
				} else {
					// A signed record after an unsigned one of its id supersedes
					// it (a forgery published first); both lines stay.
					ids[e.ID] = idLine{line: line, ok: ok}
				}
			}
			prevHash, prevSeq = h, e.Seq
			if len(rep.Problems) == 0 {
				rep.GoodBytes, rep.LastSeq, rep.HeadHash = offset, e.Seq, h
				if each != nil {
					each(e)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return rep, err
		}
	}
	rep.OpenTail = rep.Lines - cpLine
	if rep.Checkpoints == 0 && st.line == 0 {
		rep.OpenTail = rep.Lines
	}
	if rep.OpenTail > 0 && !o.AllowOpenTail {
		rep.Problems = append(rep.Problems, Problem{Line: rep.Lines - rep.OpenTail + 1, Kind: ProblemUnsealed,
			Message: fmt.Sprintf("%d lines follow the last checkpoint: the log was cut off here or after, or is still being written", rep.OpenTail)})
	}
	if bc := o.Checkpoint; bc != nil && !busSeen {
		rep.Problems = append(rep.Problems, Problem{Line: rep.Lines, Kind: ProblemTruncated,
			Message: fmt.Sprintf("the published checkpoint of line %d (head %s) is not in the file: lines were cut off or changed", bc.Seq, bc.Head)})
	}
	return rep, nil
}

// verifyRecordLine judges a record line's signature again from what the
// line keeps, counts it signed or unverified in rep, and reports whether
// it is signed by a trusted worker.
func verifyRecordLine(rep *VerifyReport, o verifyOpts, line int, e *Entry) bool {
	sig := e.Sig
	if !o.chainOnly {
		sig = recordVerdict(rep, o, line, e)
	}
	if sig == SigOK {
		rep.Signed++
		return true
	}
	if sig == "" {
		sig = SigUnsigned
	}
	rep.UnverifiedCount++
	if len(rep.Unverified) < MaxUnverifiedListed {
		rep.Unverified = append(rep.Unverified, SignatureProblem{Line: line, Seq: e.Seq, ID: e.ID, Sig: sig, Signer: e.Signer})
	}
	return false
}

// recordVerdict is a record line's verdict from the signature it keeps: a
// line without one is unsigned whatever its "sig" says; one whose
// signature does not verify is invalid (a problem when the line says ok);
// a valid one is ok when its signer is trusted (o.TrustedSigners, or, with
// none given, the auditor's verdict in the line).
func recordVerdict(rep *VerifyReport, o verifyOpts, line int, e *Entry) string {
	signer, err := lineSignature(e)
	switch {
	case errors.Is(err, recsign.ErrUnsigned):
		if e.Sig == "" || e.Sig == SigOK {
			return SigUnsigned
		}
		return e.Sig
	case err != nil:
		if e.Sig == SigOK {
			rep.Problems = append(rep.Problems, Problem{Line: line, Seq: e.Seq, Kind: ProblemSignature,
				Message: fmt.Sprintf("the line says record %s was signed by a trusted worker; its signature does not verify", e.ID)})
		}
		return SigInvalid
	case len(o.TrustedSigners) > 0:
		if slices.Contains(o.TrustedSigners, signer) {
			return SigOK
		}
		return SigUntrusted
	}
	return e.Sig
}

// idLine is where verify saw a record id first, and whether signed.
type idLine struct {
	line int
	ok   bool
}

func parseLine(b []byte) (*Entry, []byte, string, error) {
	canon, h, err := canonical(b)
	if err != nil {
		return nil, nil, "", err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, nil, "", err
	}
	if e.ID == "" || h == "" || e.Seq == 0 {
		return nil, nil, "", errors.New("missing seq, id or hash")
	}
	return &e, canon, h, nil
}

// canonicalValue is the canonical JSON of any JSON value: fastCanonical's
// for valid JSON (the same bytes, TestCanonicalFastIsExact and
// FuzzCanonicalFast), else encoding/json's answer and error.
func canonicalValue(b []byte) ([]byte, error) {
	if json.Valid(b) {
		if out, ok := fastCanonical(b); ok {
			return out, nil
		}
	}
	return canonicalSlow(b)
}

// canonicalSlow is the canonical JSON of any JSON value by encoding/json:
// decoded (numbers as written) and encoded again, keys sorted.
func canonicalSlow(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return json.Marshal(v)
}
