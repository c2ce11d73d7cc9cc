// Package fakejail runs a test fake's processes inside a directory that
// stands for a sandbox's "/": a private mount namespace in which the host's
// system directories (/usr, /bin, /lib*, /etc) are bound read-only and
// /dev/{null,zero,random,urandom} and /proc are mounted, then a chroot into
// the directory (util-linux unshare), optionally as another user (setpriv).
// Processes and a fake's file API then see the same files at the same
// paths. Mounts vanish with the namespace: nothing is left on the host.
//
// Detect reports what the host allows: Chroot (root), UserNS (an
// unprivileged user namespace: no other user than root inside) or None (no
// namespaces: processes run on the host with their working directory mapped
// into the directory). MODALFAKE_JAIL forces a mode.
package fakejail
