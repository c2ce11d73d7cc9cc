// Package deadline is a net.Conn deadline as a channel: closed when the
// deadline passes, replaced when it is moved. The tunnel's connections and
// the agent's dialled connections both use it for SetReadDeadline and
// SetWriteDeadline.
package deadline
