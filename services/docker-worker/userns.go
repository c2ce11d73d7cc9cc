package dockerworker

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/system"
)

// userNS is the daemon's user-namespace remapping (dockerd --userns-remap),
// as docker info shows it. Docker remaps every container of the daemon into
// one subordinate range; it has no per-container ranges, so the backend
// uses none either: under remapping, the sandbox uid 1000 is host uid
// base+1000 in every sandbox of the host.
type userNS struct {
	enabled bool
	// uid and gid are the host ids of the containers' root, read from the
	// daemon's root directory (/var/lib/docker/UID.GID under remapping);
	// tmpfs volumes, mounted on the host side, are given base+uid.
	uid, gid int
}

func detectUserNS(info system.Info) (userNS, error) {
	var ns userNS
	for _, o := range info.SecurityOptions {
		if o == "name=userns" || strings.HasPrefix(o, "name=userns,") {
			ns.enabled = true
		}
	}
	if !ns.enabled {
		return ns, nil
	}
	u, g, ok := strings.Cut(filepath.Base(info.DockerRootDir), ".")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return ns, fmt.Errorf("dockerworker: the daemon remaps users but its root directory %q does not name the remapped root (UID.GID)", info.DockerRootDir)
	}
	ns.uid, ns.gid = uid, gid
	return ns, nil
}

// hostIDs turns a sandbox uid and gid into the host's, for options the
// daemon applies on the host side (tmpfs volumes' owner).
func (ns userNS) hostIDs(uid, gid string) (string, string) {
	if !ns.enabled {
		return uid, gid
	}
	u, _ := strconv.Atoi(uid)
	g, _ := strconv.Atoi(gid)
	return strconv.Itoa(ns.uid + u), strconv.Itoa(ns.gid + g)
}
