package events

import "time"

func init() {
	at := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	exp := at.Add(7 * 24 * time.Hour)
	snap := SnapshotInfo{SnapshotID: "snap-01jf7k2m3n4p5q6r7s8t9v0w1x", Name: "prepared", SandboxID: "s1", Kind: SnapshotKindSnapshot,
		Backend: "docker", Image: "sandboxio/python:3.11", Bytes: 1 << 20, Files: 42,
		Digest: "SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=", Content: SnapshotContentFS, CreatedAt: at, ExpiresAt: &exp, DurationMS: 120}
	goldenSamples = append(goldenSamples, []struct {
		name string
		v    any
	}{
		{"create_request_fork", CreateRequest{TimeoutS: 600, FromSnapshot: "snap-01jf7k2m3n4p5q6r7s8t9v0w1x", OnDeadline: OnDeadlinePause, AutoResume: true}},
		{"pause_request", PauseRequest{SandboxID: "s1"}},
		{"pause_reply", PauseReply{SandboxID: "s1", State: StatePaused, SnapshotID: "snap-01jf7k2m3n4p5q6r7s8t9v0w1x", Bytes: 1 << 20,
			Content: SnapshotContentFS, ExpiresAt: &exp}},
		{"resume_request", ResumeRequest{SandboxID: "s1", TimeoutS: 600}},
		{"resume_reply", ResumeReply{SandboxID: "s1", Backend: "docker", Worker: "w1", State: StateRunning, Isolation: TierContainer,
			Capabilities: Capabilities{CapExec, CapPause, CapSnapshot}, Deadline: at.Add(10 * time.Minute),
			SnapshotID: "snap-01jf7k2m3n4p5q6r7s8t9v0w1x", Content: SnapshotContentFS}},
		{"snapshot_request", SnapshotRequest{SandboxID: "s1", Name: "prepared"}},
		{"snapshot_info", snap},
		{"snapshots_list_request", SnapshotsListRequest{SandboxID: "s1"}},
		{"snapshots_list_reply", SnapshotsListReply{Snapshots: []SnapshotInfo{snap}}},
		{"snapshots_delete_request", SnapshotsDeleteRequest{SnapshotID: "snap-01jf7k2m3n4p5q6r7s8t9v0w1x"}},
		{"snapshots_delete_reply", SnapshotsDeleteReply{SnapshotID: "snap-01jf7k2m3n4p5q6r7s8t9v0w1x", Deleted: true}},
	}...)
}
