package dockerworker

import (
	"testing"

	"github.com/docker/docker/api/types/system"
)

func TestDetectUserNS(t *testing.T) {
	for _, tc := range []struct {
		name     string
		info     system.Info
		enabled  bool
		uid, gid int
		err      bool
	}{
		{"no remap", system.Info{SecurityOptions: []string{"name=seccomp,profile=default"}, DockerRootDir: "/var/lib/docker"}, false, 0, 0, false},
		{"remap", system.Info{SecurityOptions: []string{"name=seccomp,profile=default", "name=userns"}, DockerRootDir: "/var/lib/docker/100000.100000"}, true, 100000, 100000, false},
		{"remap, root dir unreadable", system.Info{SecurityOptions: []string{"name=userns"}, DockerRootDir: "/var/lib/docker"}, true, 0, 0, true},
	} {
		ns, err := detectUserNS(tc.info)
		if (err != nil) != tc.err || ns.enabled != tc.enabled || ns.uid != tc.uid || ns.gid != tc.gid {
			t.Errorf("%s: %+v, %v", tc.name, ns, err)
		}
	}
	ns := userNS{enabled: true, uid: 100000, gid: 200000}
	if u, g := ns.hostIDs("1000", "1000"); u != "101000" || g != "201000" {
		t.Errorf("hostIDs = %s:%s", u, g)
	}
	if u, g := (userNS{}).hostIDs("1000", "1000"); u != "1000" || g != "1000" {
		t.Errorf("hostIDs without remap = %s:%s", u, g)
	}
}
