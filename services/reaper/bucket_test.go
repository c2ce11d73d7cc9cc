package reaper

import (
	"context"
	"testing"
	"time"
)

// TestLeaderBucketKeptUnlessReplicasGiven (issue 9 item 12): a reaper
// without Replicas uses sbx_reaper as it finds it (a clustered bucket is
// not shrunk to one replica by the last reaper to start); one given
// Replicas makes the bucket match its configuration.
func TestLeaderBucketKeptUnlessReplicasGiven(t *testing.T) {
	e := startEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	operator := Config{LeaderTTL: 7 * time.Second}.LeaderBucketConfig()
	if _, err := e.js.CreateOrUpdateKeyValue(ctx, operator); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration {
		kv, err := e.js.KeyValue(ctx, LeaderBucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.TTL()
	}
	for _, tc := range []struct {
		name     string
		replicas int
		want     time.Duration
	}{
		{"no replicas given: the bucket is left as it is", 0, 7 * time.Second},
		{"replicas given: the bucket is updated", 1, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, stop := runReaper(t, e.nc, Config{LeaderTTL: 2 * time.Second, Replicas: tc.replicas})
			eventually(t, 10*time.Second, "active", svc.Active)
			stop()
			if got := ttl(); got != tc.want {
				t.Fatalf("sbx_reaper TTL = %s, want %s", got, tc.want)
			}
		})
	}
}
