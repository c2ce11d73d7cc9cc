package dockerworker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Without the agent binary, writes and directory listings run as the
// sandbox user in a Docker exec of the image's /bin/sh (ADR 43): the kernel
// checks every open as that user, so a symlink the sandbox swaps in after
// the worker's checks reaches only what the sandbox user could reach
// itself, and a listing reads one directory level, never its subtree.

// writeScript makes the missing directories of $1 and replaces $1/$2 with
// stdin ($4 bytes) at mode $3: written to a new temporary file in the
// directory, then renamed over $2 (a rename never follows a symlink at $2).
const writeScript = `umask 022
mkdir -p -- "$1" || exit 10
cd -- "$1" || exit 10
t=$(mktemp ./.sbx-write.XXXXXX) || exit 11
trap 'rm -f -- "$t"' EXIT
cat > "$t" || exit 12
n=$(wc -c < "$t") || exit 12
if [ -z "$n" ] || [ $n -ne "$4" ]; then echo "content ended after $n of $4 bytes" >&2; exit 13; fi
chmod "$3" "$t" || exit 12
mv -f -T -- "$t" "$2" || exit 14
trap - EXIT
`

// listScript lists the directory $1 one level deep, at most $2 entries of
// each kind, as NUL-terminated records "MODE(hex) SIZE MTIME NAME" (lstat):
// names without a newline in batches through xargs, the rare ones with a
// newline one at a time.
const listScript = `cd -- "$1" || exit 10
nl='
'
n=0
for f in .* *; do
	case $f in .|..|*"$nl"*) continue ;; esac
	[ -e "$f" ] || [ -L "$f" ] || continue
	n=$((n+1)); [ "$n" -gt "$2" ] && break
	printf '%s\0' "$f"
done | xargs -0 -r stat -c '%f %s %Y %n' -- 2>/dev/null | tr '\n' '\0'
n=0
for f in .* *; do
	case $f in *"$nl"*) ;; *) continue ;; esac
	n=$((n+1)); [ "$n" -gt "$2" ] && break
	m=$(stat -c '%f %s %Y' -- "$f" 2>/dev/null) && printf '%s %s\0' "$m" "$f"
done
exit 0
`

// Bounds on what a listing may send back: every byte of it is the
// sandbox's.
const (
	maxListOutput = 4 << 20
	maxNameLen    = 1024
)

// shellWrite writes size bytes of r to dir/names..., making the missing
// directories, as the sandbox user.
func (b *Backend) shellWrite(ctx context.Context, sb *sandbox, dir string, names []string, mode uint32, r io.Reader, size int64) error {
	parent := path.Join(append([]string{dir}, names[:len(names)-1]...)...)
	return b.userShell(ctx, sb, writeScript, []string{parent, names[len(names)-1], strconv.FormatUint(uint64(mode), 8),
		strconv.FormatInt(size, 10)}, r, io.Discard)
}

// shellList lists the directory dir (shown as shown) one level deep, as the
// sandbox user.
func (b *Backend) shellList(ctx context.Context, sb *sandbox, dir, shown string) ([]events.FileInfo, error) {
	out := &cappedBuffer{max: maxListOutput}
	if err := b.userShell(ctx, sb, listScript, []string{dir, strconv.Itoa(proto.MaxEntries)}, nil, out); err != nil {
		return nil, err
	}
	if out.over {
		return nil, fmt.Errorf("dockerworker: list %s: the listing is over %d bytes", shown, maxListOutput)
	}
	return parseListing(out.b.Bytes(), shown)
}

// parseListing parses listScript's records, strictly: anything malformed
// fails the listing. At most proto.MaxEntries entries, sorted by name.
func parseListing(raw []byte, shown string) ([]events.FileInfo, error) {
	out := []events.FileInfo{}
	seen := map[string]bool{}
	for rec := range bytes.SplitSeq(raw, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		f := strings.SplitN(string(rec), " ", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("dockerworker: list %s: malformed entry", shown)
		}
		raw, err1 := strconv.ParseUint(f[0], 16, 32)
		size, err2 := strconv.ParseInt(f[1], 10, 64)
		mt, err3 := strconv.ParseInt(f[2], 10, 64)
		name := f[3]
		if err1 != nil || err2 != nil || err3 != nil || size < 0 || !validName(name) {
			return nil, fmt.Errorf("dockerworker: list %s: malformed entry", shown)
		}
		if seen[name] || len(out) == proto.MaxEntries {
			continue // renamed while listed, or over the bound
		}
		seen[name] = true
		out = append(out, fileInfo(name, path.Join(shown, name), size, modeOf(uint32(raw)), time.Unix(mt, 0)))
	}
	slices.SortFunc(out, func(a, b events.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func validName(n string) bool {
	return n != "" && n != "." && n != ".." && len(n) <= maxNameLen && !strings.ContainsAny(n, "/\x00")
}

// modeOf converts a raw st_mode.
func modeOf(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o010000:
		mode |= fs.ModeNamedPipe
	case 0o140000:
		mode |= fs.ModeSocket
	case 0o020000:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case 0o060000:
		mode |= fs.ModeDevice
	case 0o100000:
	default:
		mode |= fs.ModeIrregular
	}
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// userShell runs script with the image's /bin/sh as the sandbox user (a
// clean Docker exec: none of the sandbox's exec environment, the C locale
// for the tools' messages). A failure is a *proto.Error classified by the
// system error the tools printed, or CapabilityNotSupported for an image
// without a shell or a tool the script needs.
func (b *Backend) userShell(ctx context.Context, sb *sandbox, script string, args []string, stdin io.Reader, stdout io.Writer) error {
	_, user, err := b.containerFacts(ctx, sb)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	st, err := b.dockerExec(ctx, sb, true, worker.Process{Cmd: append([]string{"/bin/sh", "-c", script, "sh"}, args...),
		Env: map[string]string{"LC_ALL": "C"}, Stdin: stdin, Stdout: stdout, Stderr: &limitedBuffer{b: &stderr, max: 4096}}, user)
	if err != nil {
		return err
	}
	msg := strings.TrimSpace(stderr.String())
	switch {
	case st.Code == 126 || st.Code == 127 || strings.Contains(msg, ": not found"):
		return events.Errorf(events.CodeCapabilityNotSupp, "sandbox %s runs without the agent and its image lacks /bin/sh or a tool the files API needs there", sb.id).
			With("capability", string(events.CapFiles))
	case st.Code == 0:
		return nil
	case st.Code == 13:
		return &proto.Error{Kind: proto.ErrIO, Message: msg}
	}
	return &proto.Error{Kind: shellErrKind(msg), Message: msg}
}

// shellErrKind classifies a tool's message by the system error in it.
func shellErrKind(msg string) string {
	for _, k := range []struct{ text, kind string }{
		{"Permission denied", proto.ErrPermission}, {"Read-only file system", proto.ErrPermission},
		{"Operation not permitted", proto.ErrPermission}, {"Not a directory", proto.ErrNotDir},
		{"Is a directory", proto.ErrIsDir}, {"cannot overwrite directory", proto.ErrIsDir},
		{"No such file or directory", proto.ErrNotFound},
	} {
		if strings.Contains(msg, k.text) {
			return k.kind
		}
	}
	return proto.ErrIO
}

// cappedBuffer keeps at most max bytes and notes that more came.
type cappedBuffer struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - c.b.Len(); n > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.b.Write(p)
	return n, nil
}
