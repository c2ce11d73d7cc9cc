package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestTenantCannotEvictAnother: tenant A, flooding SBX_OUT from several
// sandboxes at once and from one sandbox after another, stores no more
// than its tenant share (max_output_bytes) and is told so (SBX_E1706 with
// details.quota max_output_bytes), and tenant B's stored output — of a
// sandbox that ended before the floods and of one that lives through them —
// is all still in the stream. Before the tenant share, A's churn purged
// the oldest departed output, B's, to make room for its own.
func TestTenantCannotEvictAnother(t *testing.T) {
	const (
		streamBytes = 4 << 20
		tenantShare = 1 << 20
		victimBytes = 64 << 10
		floodBytes  = 768 << 10
		rounds      = 4
		perRound    = 2
	)
	env := sbxtest.Start(t, sbxtest.Options{Auth: true,
		Bus:    func(c *bus.Config) { c.OutputMaxBytes = streamBytes },
		Worker: func(c *worker.Config) { c.MaxTenantOutputBytes = tenantShare },
		Router: func(c *router.Config) { c.DefaultLimits.MaxOutputBytes = tenantShare }})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := env.Client, env.TenantClient(authtest.TenantB)

	// B: one sandbox that ends before the floods, one that lives on.
	var victims []string
	for i := range 2 {
		id := createIn(t, ctx, b)
		pid, got, _, err := streamIn(ctx, b, id, victimBytes)
		if err != nil || got != victimBytes {
			t.Fatalf("victim %d: %d bytes, %v", i, got, err)
		}
		victims = append(victims, events.OutputSubject(b.Tenant(), id, pid, events.Stdout))
		if i == 0 {
			if _, err := b.Kill(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A: rounds of several sandboxes flooding together, each killed after.
	published, coded := 0, 0
	for round := range rounds {
		ids := make([]string, perRound)
		for i := range ids {
			ids[i] = createIn(t, ctx, a)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				_, got, res, err := streamIn(ctx, a, id, floodBytes)
				if err == nil && res != nil && res.Err != nil {
					err = res.Err
				}
				mu.Lock()
				defer mu.Unlock()
				published += got
				var e *events.Error
				switch {
				case errors.As(err, &e) && e.Code == events.CodeOutputShareExceeded && e.Details["quota"] == "max_output_bytes":
					coded++
				case err != nil && !errors.Is(err, events.ErrOutputShareExceeded):
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			if _, err := a.Kill(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if published <= tenantShare {
		t.Fatalf("A published %d bytes, not more than its share: the test proves nothing", published)
	}
	stored := streamedBytes(t, ctx, js, "sbx.out."+a.Tenant()+".>")
	t.Logf("A published %d bytes, %d still stored (share %d); %d floods told max_output_bytes", published, stored, tenantShare, coded)
	if stored > tenantShare {
		t.Errorf("A stores %d bytes of output, more than its share %d", stored, tenantShare)
	}
	if coded == 0 {
		t.Errorf("no flood of A was answered SBX_E1706 with details.quota max_output_bytes")
	}
	// quota shows the limit and what the records counted (the killed
	// sandboxes' records keep their last usage until they go).
	sbxtest.Eventually(t, 20*time.Second, func() bool {
		q, err := a.Quota(ctx)
		return err == nil && q.Limits.MaxOutputBytes == tenantShare && q.Usage.OutputBytes >= tenantShare/2
	}, "quota never showed A's output")
	for _, subject := range victims {
		if kept := streamedBytes(t, ctx, js, subject); kept != victimBytes {
			t.Errorf("B's output on %s: %d of %d bytes left", subject, kept, victimBytes)
		}
	}
}

func createIn(t *testing.T, ctx context.Context, cl *client.Client) string {
	t.Helper()
	sb, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	return sb.SandboxID
}

// streamIn runs a streamed exec writing n bytes in sandbox id and counts
// what reaches the client.
func streamIn(ctx context.Context, cl *client.Client, id string, n int) (string, int, *events.ExecResult, error) {
	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"write", strconv.Itoa(n)}})
	if err != nil {
		return "", 0, nil, err
	}
	got := 0
	for c, err := range p.Chunks() {
		if err != nil {
			break
		}
		got += len(c.Data)
	}
	res, err := p.Wait()
	return p.ProcessID, got, res, err
}

// TestTenantRecordSetsOutputShare: a tenant's sbx_tenants record sets its
// share (max_output_bytes) in the workers, which watch the bucket: with
// 256 KiB in the record (the workers' default is 1 GiB), a 1 MiB flood is
// cut at it, with the tenant's code.
func TestTenantRecordSetsOutputShare(t *testing.T) {
	const share = 256 << 10
	env := sbxtest.Start(t, sbxtest.Options{Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env.Auth.AddTenant(t, "tenant-c", events.TenantLimits{MaxOutputBytes: share})
	c := env.TenantClient("tenant-c")
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last flood: %s", last)
		}
	}()
	sbxtest.Eventually(t, 30*time.Second, func() bool {
		id := createIn(t, ctx, c)
		defer func() { _, _ = c.Kill(ctx, id) }()
		_, got, res, err := streamIn(ctx, c, id, 1<<20)
		if err == nil && res != nil && res.Err != nil {
			err = res.Err
		}
		var e *events.Error
		last = fmt.Sprintf("%d bytes, %v", got, err)
		return got <= share && errors.As(err, &e) && e.Details["quota"] == "max_output_bytes"
	}, "the record's share never applied")
}
