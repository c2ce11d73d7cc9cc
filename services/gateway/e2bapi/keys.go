package e2bapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// BucketAPIKeys is the KV bucket of API keys: key SHA-256(api key) in hex,
// value a KeyRecord. `sandboxio bus init` declares it; only admin writes it
// (`sandboxio tenant key add|rm`).
const BucketAPIKeys = bus.BucketAPIKeys

// KeyPrefix starts every API key, as E2B's SDKs check (^e2b_[0-9a-f]+$).
const KeyPrefix = "e2b_"

// keyHexLen is the number of hex digits after KeyPrefix (160 random bits).
const keyHexLen = 40

// KeyRecord is what an API key maps to.
type KeyRecord struct {
	// Tenant is the tenant's account: the router serves the key's requests
	// as this tenant (events.ValidTenant, never events.TenantOpen).
	Tenant string `json:"tenant"`
	// Name is the tenant's human name, for listings.
	Name string `json:"name,omitempty"`
	// Hint is the key's first characters (e2b_ and 6 hex digits), so that a
	// listing can tell keys apart without holding them.
	Hint      string    `json:"hint"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrKeyNotFound is a key no record names.
var ErrKeyNotFound = errors.New("e2bapi: unknown API key")

// NewKey makes a random API key and its record's id (the hash under which
// it is stored). The key itself is shown once and never stored.
func NewKey() (key, id string, err error) {
	b := make([]byte, keyHexLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("e2bapi: random key: %w", err)
	}
	key = KeyPrefix + hex.EncodeToString(b)
	return key, KeyID(key), nil
}

// KeyID is the bucket key of an API key: the hex SHA-256 of the whole key.
func KeyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// WellFormedKey reports whether key has E2B's shape: e2b_ and lowercase
// hex digits, at most 128 characters.
func WellFormedKey(key string) bool {
	hexPart, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || hexPart == "" || len(key) > 128 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		c := hexPart[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Keys resolves API keys to records.
type Keys interface {
	// Lookup returns the record stored under id (KeyID of the key), or
	// ErrKeyNotFound.
	Lookup(ctx context.Context, id string) (KeyRecord, error)
}

// KVKeys reads API keys from the sbx_apikeys bucket.
type KVKeys struct{ kv jetstream.KeyValue }

var _ Keys = (*KVKeys)(nil)

// OpenKVKeys opens the bucket; it never creates it (`sandboxio bus init`
// does).
func OpenKVKeys(ctx context.Context, js jetstream.JetStream) (*KVKeys, error) {
	kv, err := js.KeyValue(ctx, BucketAPIKeys)
	if err != nil {
		return nil, fmt.Errorf("e2bapi: bucket %s: %w", BucketAPIKeys, err)
	}
	return &KVKeys{kv: kv}, nil
}

// Lookup implements Keys.
func (k *KVKeys) Lookup(ctx context.Context, id string) (KeyRecord, error) {
	e, err := k.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return KeyRecord{}, ErrKeyNotFound
	}
	if err != nil {
		return KeyRecord{}, fmt.Errorf("e2bapi: key lookup: %w", err)
	}
	return decodeRecord(e.Value())
}

func decodeRecord(b []byte) (KeyRecord, error) {
	var rec KeyRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return KeyRecord{}, fmt.Errorf("e2bapi: key record: %w", err)
	}
	if !events.ValidTenant(rec.Tenant) || rec.Tenant == events.TenantOpen {
		return KeyRecord{}, fmt.Errorf("e2bapi: key record names no tenant account")
	}
	return rec, nil
}

// AddKey stores a new key for tenant (its account) with kv (admin's) and
// returns the key, to be shown once.
func AddKey(ctx context.Context, kv jetstream.KeyValue, tenant, name string) (string, KeyRecord, error) {
	if !events.ValidTenant(tenant) || tenant == events.TenantOpen {
		return "", KeyRecord{}, fmt.Errorf("e2bapi: %q is not a tenant account", tenant)
	}
	key, id, err := NewKey()
	if err != nil {
		return "", KeyRecord{}, err
	}
	rec := KeyRecord{Tenant: tenant, Name: name, Hint: key[:len(KeyPrefix)+6], CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	if _, err := kv.Create(ctx, id, b); err != nil {
		return "", KeyRecord{}, fmt.Errorf("e2bapi: store key: %w", err)
	}
	return key, rec, nil
}

// StoredKey is a key's id and record, as listed.
type StoredKey struct {
	ID string `json:"id"`
	KeyRecord
}

// ListKeys returns every stored key's record (never the keys themselves).
func ListKeys(ctx context.Context, kv jetstream.KeyValue) ([]StoredKey, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("e2bapi: list keys: %w", err)
	}
	var out []StoredKey
	for id := range lister.Keys() {
		e, err := kv.Get(ctx, id)
		if err != nil {
			continue // removed meanwhile
		}
		rec, err := decodeRecord(e.Value())
		if err != nil {
			continue
		}
		out = append(out, StoredKey{ID: id, KeyRecord: rec})
	}
	return out, nil
}

// RemoveKey deletes the key whose id, or hint, or the key itself, is given.
// A hint must name exactly one key.
func RemoveKey(ctx context.Context, kv jetstream.KeyValue, which string) (StoredKey, error) {
	id := which
	if WellFormedKey(which) && len(which) == len(KeyPrefix)+keyHexLen {
		id = KeyID(which)
	} else if strings.HasPrefix(which, KeyPrefix) {
		all, err := ListKeys(ctx, kv)
		if err != nil {
			return StoredKey{}, err
		}
		var match []StoredKey
		for _, k := range all {
			if k.Hint == which {
				match = append(match, k)
			}
		}
		if len(match) != 1 {
			return StoredKey{}, fmt.Errorf("e2bapi: %d keys have the hint %s; give the id (sandboxio tenant key ls)", len(match), which)
		}
		id = match[0].ID
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return StoredKey{}, fmt.Errorf("e2bapi: key %s: %w", which, ErrKeyNotFound)
	}
	rec, _ := decodeRecord(e.Value())
	if err := kv.Purge(ctx, id); err != nil {
		return StoredKey{}, fmt.Errorf("e2bapi: remove key: %w", err)
	}
	return StoredKey{ID: id, KeyRecord: rec}, nil
}

// keyCache keeps looked-up records for a short time, bounded: a removed
// key stops working within keyCacheTTL.
type keyCache struct {
	mu sync.Mutex
	m  map[string]cachedKey
}

type cachedKey struct {
	rec KeyRecord
	at  time.Time
}

const (
	keyCacheTTL = 5 * time.Second
	keyCacheMax = 4096
)

func (c *keyCache) get(id string, now time.Time) (KeyRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || now.Sub(e.at) > keyCacheTTL {
		return KeyRecord{}, false
	}
	return e.rec, true
}

func (c *keyCache) put(id string, rec KeyRecord, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = map[string]cachedKey{}
	}
	c.m[id] = cachedKey{rec: rec, at: now}
}
