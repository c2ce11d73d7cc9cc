package fakejail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
)

// Mode is how processes are confined to a sandbox's directory.
type Mode string

const (
	// Chroot: a private mount namespace (as root) with the host's system
	// directories bound read-only, then chroot into the sandbox directory.
	Chroot Mode = "chroot"
	// UserNS: the same inside an unprivileged user namespace (only root
	// exists inside: Cred is ignored).
	UserNS Mode = "userns"
	// None: no namespaces available; processes run on the host with their
	// working directory mapped into the sandbox directory.
	None Mode = "none"
)

// EnvMode forces a mode ("chroot", "userns" or "none"), e.g. to test what a
// CI runner without namespaces sees.
const EnvMode = "MODALFAKE_JAIL"

// DefaultPath is the PATH of a jailed process unless the caller sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// systemDirs are bound read-only into every jail when they are directories
// on the host (symlinks such as /bin -> usr/bin are copied as symlinks).
var systemDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc"}

// devices are bound into the jail's /dev.
var devices = []string{"null", "zero", "random", "urandom", "tty"}

// script runs as root of a new mount namespace: it binds the system
// directories and devices into $1, mounts /proc, then chroots into $1,
// changes to $2 and execs the command, as uid:gid $4 when it is set (unshare
// -R/-w and setpriv: a missing command exits 127, as a shell reports it).
const script = `set -e
R=$1; W=$2; P=$3; U=$4; shift 4
for d in bin sbin lib lib32 lib64 libx32 usr etc; do
  if [ -d "/$d" ] && [ ! -L "/$d" ]; then
    mount --bind "/$d" "$R/$d"
    mount -o remount,bind,ro "$R/$d" 2>/dev/null || true
  fi
done
for f in null zero random urandom tty; do [ -e "/dev/$f" ] && mount --bind "/dev/$f" "$R/dev/$f"; done
if [ "$P" = fresh ]; then mount -t proc proc "$R/proc"; else mount --rbind /proc "$R/proc"; fi
if [ -n "$U" ]; then
  exec unshare -R "$R" -w "$W" -- setpriv --reuid "${U%:*}" --regid "${U#*:}" --clear-groups -- "$@"
fi
exec unshare -R "$R" -w "$W" -- "$@"
`

var (
	once sync.Once
	mode Mode
)

// Detect reports the mode this host allows (probed once), or the one
// MODALFAKE_JAIL forces.
func Detect() Mode {
	once.Do(func() {
		switch m := Mode(os.Getenv(EnvMode)); m {
		case Chroot, UserNS, None:
			mode = m
			return
		}
		mode = None
		if _, err := exec.LookPath("unshare"); err != nil {
			return
		}
		dir, err := os.MkdirTemp("", "fakejail-probe-")
		if err != nil {
			return
		}
		defer os.RemoveAll(dir)
		if err := PrepareRoot(dir); err != nil {
			return
		}
		for _, m := range []Mode{Chroot, UserNS} {
			cmd := Command(m, dir, "/", nil, []string{"true"})
			cmd.Env = []string{"PATH=" + DefaultPath}
			if cmd.Run() == nil {
				mode = m
				return
			}
		}
	})
	return mode
}

// PrepareRoot lays out a sandbox directory: mount points for the system
// directories and devices, and the usual empty directories plus extra.
func PrepareRoot(root string, extra ...string) error {
	for _, d := range append([]string{"dev", "proc", "tmp", "root", "home", "var/tmp"}, extra...) {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	_ = os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	_ = os.Chmod(filepath.Join(root, "var/tmp"), 0o1777)
	for _, d := range systemDirs {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil && !os.IsExist(err) {
				return err
			}
		case fi.IsDir():
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
	}
	for _, f := range devices {
		if _, err := os.Stat("/dev/" + f); err != nil {
			continue
		}
		fh, err := os.OpenFile(filepath.Join(root, "dev", f), os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		_ = fh.Close()
	}
	return nil
}

// Cred is the user a jailed process runs as (Chroot mode only).
type Cred struct{ UID, GID uint32 }

// Command builds the command that runs argv in root with working directory
// cwd (an absolute path inside the sandbox), as cred when it is set and the
// mode allows it. The caller sets Env, the stdio and SysProcAttr.
func Command(m Mode, root, cwd string, cred *Cred, argv []string) *exec.Cmd {
	u := ""
	if cred != nil && m == Chroot {
		u = strconv.FormatUint(uint64(cred.UID), 10) + ":" + strconv.FormatUint(uint64(cred.GID), 10)
	}
	switch m {
	case Chroot:
		return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "jail", root, cwd, "fresh", u}, argv...)...)
	case UserNS:
		return exec.Command("unshare", append([]string{"--user", "--map-root-user", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "jail", root, cwd, "bind", u}, argv...)...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(root, filepath.Clean("/"+cwd))
	return cmd
}

// HostView reports whether jailed processes see the host's paths (None)
// rather than the sandbox directory as "/".
func HostView(m Mode) bool { return m == None }
