package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TenantsBucketConfig is the KV bucket sbx_tenants exactly as
// pkg/bus makes it (one record per tenant, no history, no TTL), so
// that whoever creates it first, the services' Ensure finds it as it
// expects.
func TenantsBucketConfig(replicas int) jetstream.KeyValueConfig {
	for _, kc := range (bus.Config{Replicas: replicas}).KeyValueConfigs() {
		if kc.Bucket == events.BucketTenants {
			return kc
		}
	}
	panic("auth: pkg/bus has no " + events.BucketTenants + " bucket")
}

// StoreRecord puts a tenant's record (its quotas) into sbx_tenants with js
// (admin's: only admin may write the bucket), creating the bucket if it is
// missing.
func StoreRecord(ctx context.Context, js jetstream.JetStream, rec events.TenantRecord, replicas int) error {
	kv, err := js.KeyValue(ctx, events.BucketTenants)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, TenantsBucketConfig(replicas))
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, events.BucketTenants)
		}
	}
	if err != nil {
		return fmt.Errorf("auth: bucket %s: %w", events.BucketTenants, err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("auth: tenant record: %w", err)
	}
	if _, err := kv.Put(ctx, rec.ID, b); err != nil {
		return fmt.Errorf("auth: bucket %s: put %s: %w", events.BucketTenants, rec.ID, err)
	}
	return nil
}
