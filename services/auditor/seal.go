package auditor

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// FormatVersion is the audit log format this package writes: version 2
// keeps each record's signature headers in its line and seals the chain
// with checkpoints signed by the auditor (docs/operations.md, "Audit log
// format"). Version 1 lines (no signature fields, no checkpoints) still
// verify as a chain; their records are reported unsigned.
const FormatVersion = 2

// Checkpoint lines.
const (
	// TypeCheckpoint is the type of a checkpoint line.
	TypeCheckpoint = "io.sandboxio.v1.audit.checkpoint"
	// CheckpointSubject is the subject a checkpoint's signature covers
	// (with its id and its record, as a record's does).
	CheckpointSubject = "sbx.audit.checkpoint"
	// DefaultCheckpointEvery is how many lines at most follow a checkpoint
	// before the next one.
	DefaultCheckpointEvery = 1024
)

// Checkpoint is the record of a checkpoint line: the auditor vouches, with
// its signature over the line, that line Seq of log Log has hash Head.
// The checkpoint line itself has seq Seq+1 and prev_hash Head.
type Checkpoint struct {
	Head string `json:"head"`
	Log  string `json:"log"`
	Seq  uint64 `json:"seq"`
	V    int    `json:"v"`
}

// checkpointID is the record id of the checkpoint line at seq.
func checkpointID(seq uint64) string { return "checkpoint-" + strconv.FormatUint(seq, 10) }

// newCheckpoint builds the checkpoint line that follows line seq with hash
// head, signed by key.
func newCheckpoint(key *recsign.Key, logID string, seq uint64, head string, now time.Time) (Entry, error) {
	rec, err := json.Marshal(Checkpoint{Head: head, Log: logID, Seq: seq, V: FormatVersion})
	if err != nil {
		return Entry{}, err
	}
	e := Entry{ID: checkpointID(seq + 1), Type: TypeCheckpoint, Source: "sandboxio/auditor", Time: now.UTC(),
		Subject: CheckpointSubject, Record: rec}
	m := nats.NewMsg(e.Subject)
	m.Header.Set(events.HeaderCEID, e.ID)
	m.Data = rec
	if err := key.Sign(m); err != nil {
		return Entry{}, fmt.Errorf("auditor: sign checkpoint: %w", err)
	}
	e.Sig, e.Signer = SigOK, key.Public()
	e.Signature, e.SigBatch = m.Header.Get(events.HeaderSignature), m.Header.Get(events.HeaderSignatureBatch)
	return e, nil
}

// signedData is what a line's signature covers: Data decoded, or the
// line's record as it is in the line.
func signedData(e *Entry) ([]byte, error) {
	if e.Data == "" {
		return e.Record, nil
	}
	b, err := base64.StdEncoding.DecodeString(e.Data)
	if err != nil {
		return nil, errors.New("data is not base64")
	}
	canon, err := canonicalValue(b)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	rec, err := canonicalValue(e.Record)
	if err != nil || string(rec) != string(canon) {
		return nil, errors.New("record is not the signed data")
	}
	return b, nil
}

// lineSignature checks the signature a line keeps: the signer it verifies
// for, ErrUnsigned when the line keeps none, ErrInvalid when it does not
// verify.
func lineSignature(e *Entry) (string, error) {
	if e.Signature == "" && e.SigBatch == "" {
		return "", recsign.ErrUnsigned
	}
	data, err := signedData(e)
	if err != nil {
		return e.Signer, recsign.ErrInvalid
	}
	h := nats.Header{}
	h.Set(events.HeaderCEID, e.ID)
	h.Set(events.HeaderSigner, e.Signer)
	h.Set(events.HeaderSignature, e.Signature)
	if e.SigBatch != "" {
		h.Set(events.HeaderSignatureBatch, e.SigBatch)
	}
	if e.NotAfter != "" {
		h.Set(events.HeaderNotAfter, e.NotAfter)
	}
	return recsign.Verify(e.Subject, h, data)
}

// checkCheckpoint checks a checkpoint line: its signature, by one of keys
// when keys is not empty, and that it vouches for the line before it.
func checkCheckpoint(e *Entry, keys []string) (Checkpoint, error) {
	var cp Checkpoint
	if err := json.Unmarshal(e.Record, &cp); err != nil {
		return cp, fmt.Errorf("checkpoint record: %w", err)
	}
	signer, err := lineSignature(e)
	switch {
	case err != nil:
		return cp, errors.New("the checkpoint's signature does not verify")
	case len(keys) > 0 && !slices.Contains(keys, signer):
		return cp, fmt.Errorf("the checkpoint is signed by %s, not an auditor key", signer)
	case e.ID != checkpointID(e.Seq):
		return cp, fmt.Errorf("checkpoint id %s at seq %d", e.ID, e.Seq)
	case cp.Seq+1 != e.Seq || cp.Head != e.PrevHash:
		return cp, fmt.Errorf("the checkpoint vouches for seq %d, head %s, not the line before it", cp.Seq, cp.Head)
	case cp.V != FormatVersion:
		return cp, fmt.Errorf("checkpoint format version %d", cp.V)
	}
	return cp, nil
}

// keepRecord sets e's record from the bytes a worker published: kept as
// they are when a line can hold them byte for byte (so that the signature
// verifies over the line's own record), else canonical, with the bytes in
// Data. canon is raw's canonical form.
func keepRecord(e *Entry, raw, canon json.RawMessage) {
	switch {
	case e.Signature == "" && e.SigBatch == "":
		e.Record, e.canon = canon, nil
	case verbatimOK(raw):
		e.Record, e.canon = raw, canon
	default:
		e.Record, e.canon, e.Data = canon, nil, base64.StdEncoding.EncodeToString(raw)
	}
}

// verbatimOK reports whether valid JSON b is written into a line as it is,
// by appendLine and by encoding/json alike: compact (no whitespace outside
// strings) and without the bytes encoding/json escapes in a RawMessage
// (<, >, &, and U+2028/U+2029, whose first byte is 0xe2).
func verbatimOK(b []byte) bool {
	in, esc := false, false
	for _, c := range b {
		switch {
		case c == '<' || c == '>' || c == '&' || c == 0xe2:
			return false
		case in && esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return len(b) > 0
}
