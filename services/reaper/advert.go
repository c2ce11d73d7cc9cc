package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/recsign"
)

// advertTimeout bounds one advert write.
const advertTimeout = 5 * time.Second

// advertEvery is how often an advert is rewritten: well within the bucket's
// TTL (LeaderTTL), after which an advert no instance refreshes expires.
func (s *Service) advertEvery() time.Duration { return s.cfg.LeaderTTL / 3 }

// advertise writes this instance's signing-key advert into sbx_reaper
// (creating the bucket if no reaper has yet) unless it was written less
// than advertEvery ago; force writes it anyway.
func (s *Service) advertise(ctx context.Context, force bool) error {
	now := time.Now()
	if last := s.advertised.Load(); !force && last != 0 && now.Sub(time.Unix(0, last)) < s.advertEvery() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, advertTimeout)
	defer cancel()
	kv, err := s.advertBucket(ctx)
	if err != nil {
		return err
	}
	pub := s.key.Public()
	val, _ := json.Marshal(recsign.Advert{Instance: s.cfg.InstanceID, SigningKey: pub, At: now.UTC()})
	if _, err := kv.Put(ctx, recsign.SignerKey(pub), val); err != nil {
		s.advertKV.Store(nil) // the bucket may have been deleted: look it up again next time
		return fmt.Errorf("reaper: advertise signing key: %w", err)
	}
	s.advertised.Store(now.UnixNano())
	return nil
}

// advertBucket returns sbx_reaper, looked up once (and again after a failed
// write).
func (s *Service) advertBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if kv := s.advertKV.Load(); kv != nil {
		return *kv, nil
	}
	kv, err := s.js.KeyValue(ctx, LeaderBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// A one-off sweep before any reaper ran: create it as Run would.
		kv, err = s.js.CreateKeyValue(ctx, s.cfg.LeaderBucketConfig())
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = s.js.KeyValue(ctx, LeaderBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reaper: %s: %w", LeaderBucket, err)
	}
	s.advertKV.Store(&kv)
	return kv, nil
}

// keepAdvertised rewrites the advert every advertEvery until ctx ends.
func (s *Service) keepAdvertised(ctx context.Context) {
	t := time.NewTicker(s.advertEvery())
	defer t.Stop()
	for {
		if err := s.advertise(ctx, true); err != nil && ctx.Err() == nil {
			s.log.Debug("advertise signing key", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
