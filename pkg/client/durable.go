package client

import (
	"context"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Pause snapshots a sandbox's files and removes its container; the same id
// resumes later (Resume). Running processes and memory are not kept.
// Pausing a paused sandbox returns its pause again (AlreadyPaused).
func (c *Client) Pause(ctx context.Context, sandboxID string) (*events.PauseReply, error) {
	var out events.PauseReply
	if err := c.call(ctx, events.OpPause, events.PauseRequest{SandboxID: sandboxID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Resume brings a paused sandbox back on any worker of its backend, with
// its files, env, secrets, network policy and metadata, and a new lifetime
// (0: the one it was created with).
func (c *Client) Resume(ctx context.Context, sandboxID string, lifetime time.Duration) (*events.ResumeReply, error) {
	var out events.ResumeReply
	secs := int((lifetime + time.Second - 1) / time.Second)
	if err := c.call(ctx, events.OpResume, events.ResumeRequest{SandboxID: sandboxID, TimeoutS: secs}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Snapshot stores a snapshot of a running sandbox's files, which keeps
// running; Create with FromSnapshot starts new sandboxes from it.
func (c *Client) Snapshot(ctx context.Context, sandboxID, name string) (*events.SnapshotInfo, error) {
	var out events.SnapshotInfo
	if err := c.call(ctx, events.OpSnapshot, events.SnapshotRequest{SandboxID: sandboxID, Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Snapshots lists the caller's complete snapshots, newest first.
func (c *Client) Snapshots(ctx context.Context, req events.SnapshotsListRequest) ([]events.SnapshotInfo, error) {
	var out events.SnapshotsListReply
	if err := c.call(ctx, events.OpSnapshotsList, req, &out); err != nil {
		return nil, err
	}
	return out.Snapshots, nil
}

// DeleteSnapshot deletes one of the caller's snapshots.
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) (*events.SnapshotsDeleteReply, error) {
	var out events.SnapshotsDeleteReply
	if err := c.call(ctx, events.OpSnapshotsDelete, events.SnapshotsDeleteRequest{SnapshotID: snapshotID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
