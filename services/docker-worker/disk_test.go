package dockerworker

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// probeAPI answers the storage-opt probe: a create with a size succeeds
// when sizeOK.
type probeAPI struct {
	dockerAPI
	sizeOK  bool
	probed  int
	removed int
}

func (p *probeAPI) ContainerCreate(_ context.Context, _ *container.Config, hc *container.HostConfig,
	_ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
	p.probed++
	if hc.StorageOpt["size"] == "" {
		return container.CreateResponse{}, errors.New("probe without a size")
	}
	if !p.sizeOK {
		return container.CreateResponse{}, errors.New("--storage-opt is supported only for overlay over xfs with 'pquota' mount option")
	}
	return container.CreateResponse{ID: "c1"}, nil
}

func (p *probeAPI) ContainerRemove(context.Context, string, container.RemoveOptions) error {
	p.removed++
	return nil
}

func TestDetectDiskQuota(t *testing.T) {
	xfs := system.Info{Driver: "overlay2", DriverStatus: [][2]string{{"Backing Filesystem", "xfs"}}}
	ext4 := system.Info{Driver: "overlay2", DriverStatus: [][2]string{{"Backing Filesystem", "extfs"}}}
	fuse := system.Info{Driver: "fuse-overlayfs"}
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name   string
		info   system.Info
		mode   DiskQuota
		sizeOK bool
		want   DiskQuota
		probed bool
		err    bool
	}{
		{"xfs with pquota", xfs, DiskAuto, true, DiskStorageOpt, true, false},
		{"xfs without pquota", xfs, DiskAuto, false, DiskTmpfs, true, false},
		{"ext4", ext4, DiskAuto, true, DiskTmpfs, false, false},
		{"fuse-overlayfs", fuse, DiskAuto, true, DiskTmpfs, false, false},
		{"storage-opt asked, refused", fuse, DiskStorageOpt, false, "", true, true},
		{"none asked", xfs, DiskNone, true, DiskNone, false, false},
		{"tmpfs asked", xfs, DiskTmpfs, true, DiskTmpfs, false, false},
		{"nonsense", xfs, "quota!", true, "", false, true},
	} {
		api := &probeAPI{sizeOK: tc.sizeOK}
		cfg := Config{WorkerID: "w1", DiskQuota: tc.mode}.withDefaults()
		cfg.DiskQuota = tc.mode
		got, err := detectDiskQuota(context.Background(), api, tc.info, cfg, log)
		if got != tc.want || (err != nil) != tc.err || (api.probed > 0) != tc.probed || api.removed != api.probed {
			t.Errorf("%s: %q, %v, probed %d, removed %d", tc.name, got, err, api.probed, api.removed)
		}
	}
}

func TestCheckDisk(t *testing.T) {
	for _, tc := range []struct {
		mode  DiskQuota
		max   int
		res   events.Resources
		asked bool
		want  error
	}{
		{DiskTmpfs, 0, events.Resources{MemoryMB: 512, DiskMB: 256}, true, nil},
		{DiskTmpfs, 0, events.Resources{MemoryMB: 512, DiskMB: 1024}, true, events.ErrDiskQuotaTooLarge},
		{DiskStorageOpt, 0, events.Resources{MemoryMB: 512, DiskMB: 1024}, true, nil},
		{DiskStorageOpt, 512, events.Resources{MemoryMB: 512, DiskMB: 1024}, true, events.ErrDiskQuotaTooLarge},
		{DiskNone, 0, events.Resources{MemoryMB: 512, DiskMB: 64}, true, events.ErrCapabilityNotSupported},
		{DiskNone, 0, events.Resources{MemoryMB: 512}, false, nil},
	} {
		b := &Backend{disk: tc.mode, cfg: Config{MaxResources: events.Resources{DiskMB: tc.max}}}
		if err := b.checkDisk(tc.res, tc.asked); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s max %d %+v: %v, want %v", tc.mode, tc.max, tc.res, err, tc.want)
		}
	}
}
