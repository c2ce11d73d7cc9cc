package modalfake

import "github.com/sandboxio/sandboxio/internal/fakejail"

// JailMode is how the fake confines processes to a sandbox's directory
// (see internal/fakejail).
type JailMode = fakejail.Mode

// The jail modes.
const (
	JailChroot = fakejail.Chroot
	JailUserNS = fakejail.UserNS
	JailNone   = fakejail.None
)

// DetectJail reports the jail mode this host allows, or the one
// MODALFAKE_JAIL forces.
func DetectJail() JailMode { return fakejail.Detect() }
