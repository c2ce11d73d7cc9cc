package auditor

import (
	"context"
	"time"
)

// Checkpoints on a timer. A checkpoint follows every CheckpointEvery lines
// and the close; lines after the last one can be cut from the file
// undetected (ADR 36). So that this window is bounded in time as well as
// in lines, the auditor also writes (and publishes) a checkpoint once the
// oldest line after the last one is CheckpointInterval old: a quiet log is
// sealed within about that time of its last line.
//
// Trusted checkpoints. OpenLog resumes from the last checkpoint signed by
// the log's own key, and only when that key is persistent (Config
// SigningSeed): every checkpoint after it must be signed by that key too,
// or the log is refused as tampered. A checkpoint signed by another key
// vouches for nothing, since whoever can write the file can sign one with
// a key of their own; with a key made for this process the whole log is
// checked at start, as a chain.

// DefaultCheckpointInterval is how old the oldest line after the last
// checkpoint may get before the next checkpoint.
const DefaultCheckpointInterval = 5 * time.Second

// trustedKeys are the keys whose checkpoints a log opened with o trusts.
func trustedKeys(o logOptions) []string {
	if o.newKey || o.key == nil {
		return nil
	}
	return []string{o.key.Public()}
}

// sealWait is how long until the lines after the last checkpoint are due
// for one (every while there are none).
func (l *Log) sealWait(now time.Time, every time.Duration) time.Duration {
	if l.unsealedSince.IsZero() {
		return every
	}
	return max(every-now.Sub(l.unsealedSince), 0)
}

// sealIfDue writes a checkpoint when the oldest line after the last one
// is every old; sealed says whether it did.
func (l *Log) sealIfDue(now time.Time, every time.Duration) (sealed bool, err error) {
	if l.unsealedSince.IsZero() || now.Sub(l.unsealedSince) < every {
		return false, nil
	}
	if err := l.Checkpoint(); err != nil {
		return false, err
	}
	l.unsealedSince = time.Time{} // also when the last line was a checkpoint already
	return true, nil
}

// seal writes and publishes the checkpoint that is due, if one is.
func (s *Service) seal(l *Log) error {
	sealed, err := l.sealIfDue(time.Now(), s.cfg.CheckpointInterval)
	if err != nil || !sealed {
		return err
	}
	// Also while draining, after Run's context ended: bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.publish(ctx, l)
	return nil
}
