package router

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// The storage room of a files.read. A worker stores a file larger than
// events.MaxInlineFileBytes in sbx_files under the sandbox's prefix, which
// counts against the same quotas as files.put. The router sends the read
// as an events.FilesReadCommand whose storage_room is what is left of the
// sandbox's max_sandbox_storage_bytes and the tenant's max_storage_bytes,
// and counts that room as reserved until the worker answers: a read that
// would store more is refused by the worker with SBX_E1406 and stores
// nothing, and reads of one tenant running at once share its room rather
// than each being granted all of it. On the answer the router counts the
// objects the reply names (the files watch sees them too, by name, so
// nothing is counted twice) and releases the reservation.

// readGrant is a files.read's reserved storage room.
type readGrant struct {
	tenant, sandbox string
	room            int64
}

// grantRead reserves the storage room of a files.read of sb and returns
// the command to send (nil grant: no limit applies, send the request as
// it came). The caller waited for the files watch's initial load.
func (s *Service) grantRead(sb events.Sandbox, r *events.FilesReadRequest) (json.RawMessage, *readGrant, error) {
	if s.store == nil {
		return nil, nil, nil // a Service made without New (tests)
	}
	tenant := tenantOf(sb)
	lim, _ := s.limitsFor(tenant)
	room, quota, limited := s.store.grant(tenant, sb.SandboxID, lim)
	if !limited {
		return nil, nil, nil
	}
	data, err := json.Marshal(events.FilesReadCommand{FilesReadRequest: *r, StorageRoom: &room, StorageQuota: quota})
	if err != nil {
		s.store.release(tenant, sb.SandboxID, room)
		return nil, nil, err
	}
	return data, &readGrant{tenant: tenant, sandbox: sb.SandboxID, room: room}, nil
}

// grant reserves what is left of the sandbox's and the tenant's storage
// quotas, and says which quota leaves it; limited is false when neither
// is limited (nothing is reserved then).
func (u *storageUse) grant(tenant, sandbox string, lim events.TenantLimits) (room int64, quota string, limited bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	room = -1
	if lim.MaxSandboxStorageBytes >= 0 {
		room, quota = max(lim.MaxSandboxStorageBytes-u.sandbox[tenant+"/"+sandbox], 0), "max_sandbox_storage_bytes"
	}
	if lim.MaxStorageBytes >= 0 {
		if left := max(lim.MaxStorageBytes-u.tenant[tenant], 0); room < 0 || left < room {
			room, quota = left, "max_storage_bytes"
		}
	}
	if room < 0 {
		return 0, "", false
	}
	u.addLocked(tenant, sandbox, room)
	return room, quota, true
}

// settleRead counts the objects of a files.read's reply (msg nil: no
// reply) and releases its reservation.
func (s *Service) settleRead(g *readGrant, msg *nats.Msg) {
	if msg != nil && msg.Header.Get(events.HeaderServiceErrorCode) == "" {
		var reply events.FilesReadReply
		if json.Unmarshal(msg.Data, &reply) == nil && reply.Ref != nil && reply.Ref.Parts > 0 && reply.Ref.Parts <= maxReadParts {
			left, now := reply.Ref.Size, time.Now()
			for i := range reply.Ref.Parts {
				n := min(left, events.MaxInlineFileBytes)
				left -= n
				if tenant, sandbox, ok := objectOwner(reply.Ref.Name); ok && tenant == g.tenant && sandbox == g.sandbox {
					s.store.set(events.FilePartName(reply.Ref.Name, i), n, now)
				}
			}
		}
	}
	s.store.release(g.tenant, g.sandbox, g.room)
}

// maxReadParts bounds the parts of a files.read reply the router counts
// (the workers' bound: 8 GiB in parts of MaxInlineFileBytes).
const maxReadParts = 16384

// afterFilesLoaded runs then once the files watch has delivered the
// bucket's current objects (off the caller's goroutine, bounded by
// filesLoadWait), or answers to with the retryable refusal.
func (s *Service) afterFilesLoaded(to, sandboxID string, then func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(filesLoadWait + time.Second)
		defer cancel()
		if e := s.awaitFilesLoaded(ctx); e != nil {
			s.publishReply(to, nil, e.With("sandbox_id", sandboxID))
			return
		}
		then()
	}()
}
