package dockerworker

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/system"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// DiskQuota says how a sandbox's disk_mb is enforced.
type DiskQuota string

// The disk quota modes. DiskAuto picks DiskStorageOpt where the storage
// driver supports a per-container size (overlay2 on xfs mounted with pquota,
// probed at start) and DiskTmpfs elsewhere.
const (
	DiskAuto DiskQuota = "auto"
	// DiskStorageOpt: the writable layer, /work included, is limited by
	// the storage driver (--storage-opt size).
	DiskStorageOpt DiskQuota = "storage-opt"
	// DiskTmpfs: the root filesystem is read-only; /work is a tmpfs volume
	// of disk_mb with an inode limit, /tmp and the user's home are tmpfs
	// of TmpfsSizeMB. Kernel-enforced (ENOSPC), memory-backed: the files
	// count against the sandbox's memory limit, so disk_mb may not exceed
	// memory_mb.
	DiskTmpfs DiskQuota = "tmpfs"
	// DiskNone: no quota; disk_mb is refused with CapabilityNotSupported
	// and the lease does not advertise disk_quota.
	DiskNone DiskQuota = "none"
)

// inodesPerMB is how many inodes a quota volume gets per MiB (minimum
// minInodes): 38,749 empty files are 38,749 inodes whatever their size.
const (
	inodesPerMB = 64
	minInodes   = 4096
	tmpInodes   = 16384
)

func inodesFor(mb int) int { return max(minInodes, mb*inodesPerMB) }

// detectDiskQuota picks the mode for cfg.DiskQuota on this daemon.
func detectDiskQuota(ctx context.Context, cli dockerAPI, info system.Info, cfg Config, log *slog.Logger) (DiskQuota, error) {
	switch cfg.DiskQuota {
	case DiskNone, DiskTmpfs:
		return cfg.DiskQuota, nil
	case DiskStorageOpt:
		if err := probeStorageOpt(ctx, cli, cfg); err != nil {
			return "", fmt.Errorf("dockerworker: disk quota storage-opt: the %s storage driver refused a size: %w", info.Driver, err)
		}
		return DiskStorageOpt, nil
	case DiskAuto, "":
	default:
		return "", fmt.Errorf("dockerworker: disk quota %q: want auto, storage-opt, tmpfs or none", cfg.DiskQuota)
	}
	if info.Driver == "overlay2" && backingFS(info) == "xfs" {
		if err := probeStorageOpt(ctx, cli, cfg); err == nil {
			return DiskStorageOpt, nil
		} else {
			log.Info("storage driver has no per-container size (xfs without pquota?): /work and /tmp are size-limited tmpfs", slog.Any("err", err))
		}
	}
	return DiskTmpfs, nil
}

func backingFS(info system.Info) string {
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			return kv[1]
		}
	}
	return ""
}

// probeStorageOpt creates (never starts) a container with a size and
// removes it: the daemon refuses the create where the driver cannot.
func probeStorageOpt(ctx context.Context, cli dockerAPI, cfg Config) error {
	name := "sbx-probe-" + strings.ToLower(rand.Text())[:12]
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = cli.ContainerRemove(rctx, name, container.RemoveOptions{Force: true})
	}()
	_, err := cli.ContainerCreate(ctx, &container.Config{Image: cfg.DefaultImage, Cmd: []string{"true"},
		Labels: map[string]string{LabelWorker: cfg.WorkerID}, NetworkDisabled: true},
		&container.HostConfig{NetworkMode: "none", StorageOpt: map[string]string{"size": "64M"}}, nil, nil, name)
	return err
}

// checkDisk applies the disk mode to a resolved disk_mb.
func (b *Backend) checkDisk(r events.Resources, asked bool) error {
	switch b.disk {
	case DiskNone:
		if asked {
			return events.Errorf(events.CodeCapabilityNotSupp,
				"this docker worker cannot enforce disk_mb (disk quota mode none); leave resources.disk_mb unset").
				With("capability", string(events.CapDiskQuota))
		}
	case DiskTmpfs:
		if r.DiskMB > r.MemoryMB {
			return events.Errorf(events.CodeDiskQuotaTooLarge,
				"disk_mb %d exceeds memory_mb %d: on this host /work is memory-backed (tmpfs) and counts against the memory limit",
				r.DiskMB, r.MemoryMB).With("field", "resources.disk_mb").With("limit", r.MemoryMB)
		}
	}
	if m := b.cfg.MaxResources.DiskMB; m > 0 && r.DiskMB > m {
		return events.Errorf(events.CodeDiskQuotaTooLarge, "disk_mb %d exceeds this worker's maximum %d", r.DiskMB, m).
			With("field", "resources.disk_mb").With("limit", m)
	}
	return nil
}

// applyDisk puts the disk quota into a container's host config: the
// writable layer's size (storage-opt), or a read-only root (tmpfs, and any
// read-only root while a quota is enforced) whose writable places, /work,
// /tmp and the user's home, are tmpfs volumes with a size and an inode
// limit. Volumes rather than tmpfs mounts: the daemon mounts a volume on its
// side too, so the archive API, which files use, sees their files; they are
// anonymous, so they go with the container.
func (b *Backend) applyDisk(hc *container.HostConfig, sh shape, facts imageFacts) {
	uid, gid := b.userns.hostIDs(ownerOf(facts.user))
	hc.ShmSize = int64(b.cfg.TmpfsSizeMB) << 20
	diskMB := sh.resources.DiskMB
	if diskMB <= 0 {
		diskMB = b.cfg.Resources.DiskMB // never a size of 0: tmpfs reads it as no limit
	}
	switch b.disk {
	case DiskStorageOpt:
		hc.StorageOpt = map[string]string{"size": strconv.Itoa(diskMB) + "M"}
	case DiskTmpfs:
		hc.ReadonlyRootfs = true
	}
	if !hc.ReadonlyRootfs {
		return
	}
	if b.disk == DiskNone {
		// No quota: the work directory is an anonymous volume and /tmp a
		// tmpfs, as for any read-only root.
		hc.Tmpfs["/tmp"] = "rw,noexec,nosuid,nodev,mode=1777,size=" + strconv.Itoa(b.cfg.TmpfsSizeMB) + "m,nr_inodes=" + strconv.Itoa(tmpInodes)
		hc.Mounts = []mount.Mount{{Type: mount.TypeVolume, Target: facts.workDir}}
		return
	}
	hc.Mounts = []mount.Mount{b.tmpfsVolume(facts.workDir, diskMB, inodesFor(diskMB), "uid="+uid+",gid="+gid+",mode=0755")}
	if facts.workDir != "/tmp" {
		hc.Mounts = append(hc.Mounts, b.tmpfsVolume("/tmp", b.cfg.TmpfsSizeMB, tmpInodes, "mode=1777,noexec"))
	}
	if h := facts.home; path.IsAbs(h) && path.Clean(h) == h && h != "/" && h != "/tmp" && h != facts.workDir &&
		!under(facts.workDir, h) && !under(h, facts.workDir) && b.allowed(h, h) == nil && !under(h, stateDir) {
		hc.Mounts = append(hc.Mounts, b.tmpfsVolume(h, b.cfg.TmpfsSizeMB, tmpInodes, "uid="+uid+",gid="+gid+",mode=0700"))
	}
}

// tmpfsVolume is an anonymous local volume backed by a tmpfs of sizeMB
// and inodes, mounted nosuid,nodev at target.
func (b *Backend) tmpfsVolume(target string, sizeMB, inodes int, opts string) mount.Mount {
	return mount.Mount{Type: mount.TypeVolume, Target: target, VolumeOptions: &mount.VolumeOptions{
		Labels: map[string]string{LabelWorker: b.cfg.WorkerID},
		DriverConfig: &mount.Driver{Name: "local", Options: map[string]string{
			"type": "tmpfs", "device": "tmpfs",
			"o": fmt.Sprintf("size=%dm,nr_inodes=%d,nosuid,nodev,%s", sizeMB, inodes, opts),
		}},
	}}
}

// ownerOf is the uid and gid a quota volume belongs to: the sandbox user.
func ownerOf(user string) (string, string) {
	if user == "" {
		return "0", "0"
	}
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		g = u
	}
	if _, err := strconv.Atoi(u); err != nil {
		return "0", "0"
	}
	if _, err := strconv.Atoi(g); err != nil {
		g = u
	}
	return u, g
}
