package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Tenant shares of SBX_OUT (ADR 44). A tenant's share is its sbx_tenants
// record's max_output_bytes, else Config.MaxTenantOutputBytes, else
// events.DefaultTenantLimits; TenantOpen (an open deployment) has none.
// A worker whose budget is a part of the stream (OutputBudgetBytes below
// 7/8 of MaxBytes) grants each tenant the same part of its share, so that
// with the stream split between workers a tenant's output on all of them
// together stays within its share.

// tenantOutput is one tenant's part of the ledger.
type tenantOutput struct {
	used int64 // its live and departed sandboxes' output
	live int   // its live sandboxes
	// departed is the output, still in the stream, of its sandboxes that
	// left, oldest first (counted in used).
	departed []departedOutput
}

// tenant returns tenant's part of the ledger, made on first use; the
// caller holds l.mu.
func (l *outputLedger) tenant(tenant string) *tenantOutput {
	if l.tenants == nil {
		l.tenants = map[string]*tenantOutput{}
	}
	t := l.tenants[tenant]
	if t == nil {
		t = &tenantOutput{}
		l.tenants[tenant] = t
	}
	return t
}

// tenantLess stops counting n bytes of tenant's output, and forgets the
// tenant once it has nothing here; the caller holds l.mu.
func (l *outputLedger) tenantLess(tenant string, n int64) {
	t := l.tenants[tenant]
	if t == nil {
		return
	}
	t.used -= n
	if t.live <= 0 && len(t.departed) == 0 {
		delete(l.tenants, tenant)
	}
}

// popDeparted takes t's oldest departed output off the list (it stays
// counted until purged); nil when t has none. The caller holds l.mu.
func (l *outputLedger) popDeparted(t *tenantOutput) *departedOutput {
	if t == nil || len(t.departed) == 0 {
		return nil
	}
	d := t.departed[0]
	t.departed[0] = departedOutput{}
	t.departed = t.departed[1:]
	l.departed--
	return &d
}

// victim is the tenant whose departed output goes when the budget needs
// room for asking's output: of the tenants with departed output, the one
// storing the most, and only one storing at least as much as asking (nil:
// any), so that a tenant never purges the output of one that stores less
// than itself. The caller holds l.mu.
func (l *outputLedger) victim(asking *tenantOutput) *tenantOutput {
	var v *tenantOutput
	for _, t := range l.tenants {
		if len(t.departed) == 0 || asking != nil && t.used < asking.used {
			continue
		}
		if v == nil || t.used > v.used {
			v = t
		}
	}
	return v
}

// tenantUsed is what tenant stores here, and whether it has departed
// output to purge.
func (l *outputLedger) tenantUsed(tenant string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenants[tenant]
	if t == nil {
		return 0, false
	}
	return t.used, len(t.departed) > 0
}

// tenantLimits holds the tenants' max_output_bytes from sbx_tenants.
type tenantLimits struct {
	mu     sync.RWMutex
	output map[string]int64 // tenant -> its record's max_output_bytes (0: unset)
}

func (tl *tenantLimits) set(tenant string, v int64, ok bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.output == nil {
		tl.output = map[string]int64{}
	}
	if !ok {
		delete(tl.output, tenant)
		return
	}
	tl.output[tenant] = v
}

func (tl *tenantLimits) get(tenant string) int64 {
	tl.mu.RLock()
	defer tl.mu.RUnlock()
	return tl.output[tenant]
}

// tenantShare is tenant's share of SBX_OUT on this worker; -1: none.
func (w *Worker) tenantShare(tenant string) int64 {
	if tenant == events.TenantOpen {
		return -1
	}
	share := w.tenants.get(tenant)
	if share == 0 {
		share = w.cfg.MaxTenantOutputBytes
	}
	if share == 0 {
		share = events.DefaultTenantLimits.MaxOutputBytes
	}
	if share < 0 {
		return -1
	}
	if b, full := w.out.budget, w.out.full; b > 0 && full > b {
		share = int64(float64(share) * float64(b) / float64(full))
	}
	return share
}

// tenantSpent reports whether tenant's exit markers took it past its
// share by markerSlack with no departed output of its own left to purge:
// a streamed exec would store nothing but one more marker.
func (w *Worker) tenantSpent(tenant string) bool {
	share := w.tenantShare(tenant)
	if share < 0 {
		return false
	}
	used, departed := w.out.tenantUsed(tenant)
	return used >= share+markerSlack && !departed
}

func (w *Worker) tenantShareExceeded(sb *sandbox) *events.Error {
	share := w.tenantShare(sb.tenantToken())
	used, _ := w.out.tenantUsed(sb.tenantToken())
	return events.Errorf(events.CodeOutputShareExceeded, "the tenant's sandboxes have written its share of the output stream (max_output_bytes: %d bytes on this worker); later output of sandbox %s was dropped",
		share, sb.id).
		With("quota", "max_output_bytes").With("limit", share).With("used", used)
}

// watchTenants keeps w.tenants equal to the max_output_bytes of the
// sbx_tenants records until ctx ends, watching again after a watch ends.
func (w *Worker) watchTenants(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.watchTenantsOnce(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("tenants watch ended; restarting", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // between two watches
		}
	}
}

func (w *Worker) watchTenantsOnce(ctx context.Context) error {
	kv, err := w.js.KeyValue(ctx, events.BucketTenants)
	if err != nil {
		return err
	}
	watch, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = watch.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-watch.Updates():
			if !ok {
				return errors.New("tenants watch closed")
			}
			if e == nil {
				continue // the current records are in
			}
			w.applyTenant(e)
		}
	}
}

func (w *Worker) applyTenant(e jetstream.KeyValueEntry) {
	var rec events.TenantRecord
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &rec) != nil {
		w.tenants.set(e.Key(), 0, false)
		return
	}
	w.tenants.set(e.Key(), rec.Limits.MaxOutputBytes, true)
}
