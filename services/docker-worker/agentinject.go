package dockerworker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// Injection by the archive API, for a daemon that cannot bind-mount the
// worker's files (DOCKER_HOST tcp:// or ssh://, or AgentCopy): the agent
// binary is copied into each container after it is created and before it
// starts. The copy goes to an anonymous volume at the agent's directory,
// because the daemon refuses to extract into a read-only root filesystem;
// the volume is removed with the container (RemoveVolumes). The binary is
// root-owned and 0555 in a root-owned 0755 directory, so the sandbox user
// cannot change it.

// How the agent reaches a container.
const (
	injectBind = "bind" // a read-only bind mount of the worker's binary
	injectCopy = "copy" // the archive API
)

// agentInjection is how mode injects the agent through the daemon at host
// ("" for the environment's DOCKER_HOST): "" for not at all.
func agentInjection(mode AgentMode, host string) string {
	switch {
	case mode == AgentOff:
		return ""
	case mode == AgentCopy || !localDaemon(host):
		return injectCopy
	}
	return injectBind
}

// maxAgentBinary bounds the binary held in memory for the copies.
const maxAgentBinary = 64 << 20

// loadAgentCopy reads the agent binary at p into the tar stream that each
// new container gets, after checking that the daemon runs the binary's
// architecture.
func (b *Backend) loadAgentCopy(ctx context.Context, p string) error {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := b.cli.Info(ictx)
	if err != nil {
		return fmt.Errorf("docker info: %w", err)
	}
	if arch := goArch(info.Architecture); arch != "" && arch != runtime.GOARCH {
		return fmt.Errorf("the daemon runs %s, the agent binary is %s", info.Architecture, runtime.GOARCH)
	}
	tb, err := agentArchive(p)
	if err != nil {
		return err
	}
	b.agentTar = tb
	return nil
}

// agentArchive is a tar of one file, sbx-agent, with the binary at p.
func agentArchive(p string) ([]byte, error) {
	bin, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	if len(bin) > maxAgentBinary {
		return nil, fmt.Errorf("agent binary %s: %d bytes, more than %d", p, len(bin), maxAgentBinary)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: path.Base(agentPath), Mode: 0o555, Size: int64(len(bin)), Typeflag: tar.TypeReg,
		Uid: 0, Gid: 0, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// agentCopyMount is the anonymous volume the agent is copied into.
func agentCopyMount() mount.Mount {
	return mount.Mount{Type: mount.TypeVolume, Target: path.Dir(agentPath),
		VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: map[string]string{LabelAgent: "1"}}}
}

// copyAgent puts the agent into a created container (before it starts).
func (b *Backend) copyAgent(ctx context.Context, containerID string) error {
	if err := b.cli.CopyToContainer(ctx, containerID, path.Dir(agentPath), bytes.NewReader(b.agentTar),
		container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("copy the agent into container %s: %w", containerID, err)
	}
	return nil
}

// goArch maps a daemon's architecture (uname -m) to GOARCH; "" if unknown.
func goArch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "armv7l", "armv6l", "arm":
		return "arm"
	case "i386", "i686", "386":
		return "386"
	case "ppc64le":
		return "ppc64le"
	case "s390x":
		return "s390x"
	case "riscv64":
		return "riscv64"
	}
	return ""
}
