package auditor

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
)

// resume is where OpenLog starts checking a log: at its last checkpoint
// line signed by one of the trusted keys (whose chain link verify checks
// first), with the record ids of up to indexSize lines before it for the
// index, oldest first. A log without such a checkpoint is checked from its
// first line: a checkpoint anyone could have signed vouches for nothing.
type resume struct {
	state verifyState
	ids   []indexed
}

type indexed struct {
	id string
	ok bool
}

// resumeChunk is how much of the file findResume reads at a time, from
// the end backwards.
const resumeChunk = 1 << 20

// findResume reads the log backwards from its end to its last checkpoint
// line and on to indexSize record lines before it (or the start): open
// time depends on the lines since the last checkpoint and the index's
// size, not on the log's length.
func findResume(f *os.File, indexSize int, trusted []string) (resume, error) {
	fi, err := f.Stat()
	if err != nil {
		return resume{}, err
	}
	var (
		r     = resume{state: verifyState{prevHash: GenesisHash}}
		pos   = fi.Size()
		carry []byte // the start of a line whose beginning is not read yet
		found bool
		tail  = true // the bytes after the last newline: a torn line, skipped
		buf   = make([]byte, resumeChunk)
	)
	for pos > 0 && (!found || len(r.ids) < indexSize) {
		n := int64(min(resumeChunk, pos))
		pos -= n
		if _, err := f.ReadAt(buf[:n], pos); err != nil && err != io.EOF {
			return resume{}, err
		}
		chunk := append(append([]byte(nil), buf[:n]...), carry...)
		end := len(chunk)
		for end > 0 {
			i := bytes.LastIndexByte(chunk[:end-1], '\n')
			if i < 0 && pos > 0 {
				break // the line goes on in the previous chunk
			}
			lineStart := i + 1
			if tail {
				tail = false
				if chunk[end-1] != '\n' { // no newline at the end of the file
					end = lineStart
					if i < 0 {
						break
					}
					continue
				}
			}
			var h struct {
				Seq      uint64 `json:"seq"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Sig      string `json:"sig"`
				PrevHash string `json:"prev_hash"`
			}
			if json.Unmarshal(chunk[lineStart:end], &h) == nil && h.Seq > 0 {
				switch {
				case !found && h.Type == TypeCheckpoint && trustedCheckpoint(chunk[lineStart:end], trusted):
					found = true
					r.state = verifyState{prevHash: h.PrevHash, prevSeq: h.Seq - 1, line: int(h.Seq - 1), offset: pos + int64(lineStart)}
				case found && h.Type != TypeCheckpoint && len(r.ids) < indexSize:
					r.ids = append(r.ids, indexed{id: h.ID, ok: h.Sig == SigOK})
				}
			}
			end = lineStart
			if i < 0 || (found && len(r.ids) >= indexSize) {
				break
			}
		}
		carry = chunk[:end]
	}
	if !found {
		// No checkpoint: the whole log is checked, and indexed as it is.
		return resume{state: verifyState{prevHash: GenesisHash}}, nil
	}
	for i, j := 0, len(r.ids)-1; i < j; i, j = i+1, j-1 {
		r.ids[i], r.ids[j] = r.ids[j], r.ids[i]
	}
	return r, nil
}

// trustedCheckpoint reports whether line is a checkpoint signed by one of
// trusted (none: no checkpoint is trusted).
func trustedCheckpoint(line []byte, trusted []string) bool {
	if len(trusted) == 0 {
		return false
	}
	var e Entry
	if json.Unmarshal(line, &e) != nil {
		return false
	}
	_, err := checkCheckpoint(&e, trusted)
	return err == nil
}
