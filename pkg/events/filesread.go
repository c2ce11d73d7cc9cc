package events

// FilesReadCommand is the data of io.sandboxio.v1.cmd.files.read: the
// client's request (its fields at the top level) and the room the router
// grants the read in sbx_files. A client cannot send storage_room: its
// files.read is decoded as a FilesReadRequest, which has no such field.
type FilesReadCommand struct {
	FilesReadRequest
	// StorageRoom is the most bytes the read may store in sbx_files: what
	// is left of the tenant's max_storage_bytes and of the sandbox's
	// max_sandbox_storage_bytes when the router sent it. A file larger
	// than that (and than MaxInlineFileBytes) is refused with
	// SBX_E1406 StorageQuotaExceeded and nothing of it is kept. Absent:
	// no bound but the worker's own.
	StorageRoom *int64 `json:"storage_room,omitempty"`
	// StorageQuota names the quota that leaves StorageRoom:
	// max_storage_bytes or max_sandbox_storage_bytes (the refusal's
	// details.quota).
	StorageQuota string `json:"storage_quota,omitempty"`
}

// Validate checks the request and the room.
func (r *FilesReadCommand) Validate() *Error {
	if e := r.FilesReadRequest.Validate(); e != nil {
		return e
	}
	if r.StorageRoom != nil && *r.StorageRoom < 0 {
		return invalid("storage_room", "%d is negative", *r.StorageRoom)
	}
	switch r.StorageQuota {
	case "", "max_storage_bytes", "max_sandbox_storage_bytes":
	default:
		return invalid("storage_quota", "%q is not a storage quota", r.StorageQuota)
	}
	return nil
}

// NewCommand returns a zero command of an op, ready for Decode: the data
// a worker receives, which is the op's request except where the router
// adds to it (files.read: FilesReadCommand).
func NewCommand(op string) (Request, bool) {
	if op == OpFilesRead {
		return &FilesReadCommand{}, true
	}
	return NewRequest(op)
}
