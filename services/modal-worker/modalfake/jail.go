package modalfake

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// JailMode is how the fake confines processes to a sandbox's directory.
type JailMode string

const (
	// JailChroot: a private mount namespace (as root) with the host's system
	// directories bound read-only, then chroot into the sandbox directory.
	JailChroot JailMode = "chroot"
	// JailUserNS: the same inside an unprivileged user namespace.
	JailUserNS JailMode = "userns"
	// JailNone: no namespaces available; processes run on the host with
	// their working directory mapped into the sandbox directory.
	JailNone JailMode = "none"
)

// systemDirs are bound read-only into every jail when they are directories
// on the host (symlinks such as /bin -> usr/bin are copied as symlinks).
var systemDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc"}

// devices are bound into the jail's /dev.
var devices = []string{"null", "zero", "random", "urandom"}

// jailScript runs as root of a new mount namespace: it binds the system
// directories and devices into $1, mounts /proc, then chroots into $1,
// changes to $2 and execs the command (unshare -R/-w: a missing command
// exits 127, as a shell reports it).
const jailScript = `set -e
R=$1; W=$2; P=$3; shift 3
for d in ` + "bin sbin lib lib32 lib64 libx32 usr etc" + `; do
  if [ -d "/$d" ] && [ ! -L "/$d" ]; then
    mount --bind "/$d" "$R/$d"
    mount -o remount,bind,ro "$R/$d" 2>/dev/null || true
  fi
done
for f in null zero random urandom; do mount --bind "/dev/$f" "$R/dev/$f"; done
if [ "$P" = fresh ]; then mount -t proc proc "$R/proc"; else mount --rbind /proc "$R/proc"; fi
exec unshare -R "$R" -w "$W" -- "$@"
`

var (
	jailOnce sync.Once
	jailMode JailMode
)

// EnvJail forces a jail mode ("chroot", "userns" or "none"), e.g. to test
// what a CI runner without namespaces sees.
const EnvJail = "MODALFAKE_JAIL"

// DetectJail reports the jail mode this host allows (probed once), or the
// one MODALFAKE_JAIL forces.
func DetectJail() JailMode {
	jailOnce.Do(func() {
		switch m := JailMode(os.Getenv(EnvJail)); m {
		case JailChroot, JailUserNS, JailNone:
			jailMode = m
			return
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			jailMode = JailNone
			return
		}
		dir, err := os.MkdirTemp("", "modalfake-probe-")
		if err != nil {
			jailMode = JailNone
			return
		}
		defer os.RemoveAll(dir)
		if err := prepareRoot(dir); err != nil {
			jailMode = JailNone
			return
		}
		for _, m := range []JailMode{JailChroot, JailUserNS} {
			cmd := jailCommand(m, dir, "/", []string{"true"})
			cmd.Env = []string{"PATH=" + defaultPath}
			if cmd.Run() == nil {
				jailMode = m
				return
			}
		}
		jailMode = JailNone
	})
	return jailMode
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// prepareRoot lays out a sandbox directory: mount points for the system
// directories and devices, and the usual empty directories.
func prepareRoot(root string) error {
	for _, d := range []string{"dev", "proc", "tmp", "root", "home", "var/tmp", "work", "__modal/.bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	_ = os.Chmod(filepath.Join(root, "tmp"), 0o1777)
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
		p := filepath.Join(root, "dev", f)
		if fh, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666); err == nil {
			_ = fh.Close()
		} else {
			return err
		}
	}
	return nil
}

// jailCommand builds the command that runs argv in root with working
// directory cwd (an absolute path inside the sandbox).
func jailCommand(mode JailMode, root, cwd string, argv []string) *exec.Cmd {
	switch mode {
	case JailChroot:
		return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", jailScript, "jail", root, cwd, "fresh"}, argv...)...)
	case JailUserNS:
		return exec.Command("unshare", append([]string{"--user", "--map-root-user", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", jailScript, "jail", root, cwd, "bind"}, argv...)...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(root, filepath.Clean("/"+cwd))
	return cmd
}
