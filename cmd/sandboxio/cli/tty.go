package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// `run -t` and `exec -t`: the command runs on a pseudo-terminal in the
// sandbox, this terminal in raw mode is its keyboard, and its window size
// follows this one's (SIGWINCH → resize).

type ttyKey struct{}

// withTTY adds -t/--tty to cmd: when set, the command's context carries the
// request for a terminal, which streamExec honours.
func withTTY(cmd *cobra.Command) {
	var tty bool
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal, with this terminal's keyboard and size (implies -i)")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if tty {
			if !isTerminal(int(os.Stdin.Fd())) {
				return errors.New("-t needs a terminal on stdin")
			}
			c.SetContext(context.WithValue(c.Context(), ttyKey{}, true))
		}
		return run(c, args)
	}
}

func ttyRequested(ctx context.Context) bool { v, _ := ctx.Value(ttyKey{}).(bool); return v }

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// ttyExec streams a process on a terminal: raw mode here, stdin forwarded,
// window size kept in step; the terminal is restored on the way out.
func ttyExec(ctx context.Context, g *globals, cl *client.Client, req events.ExecRequest, announce string) error {
	fd := int(os.Stdin.Fd())
	req.TTY, req.KeepStdinOpen = true, true
	if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil {
		req.Rows, req.Cols = int(ws.Row), int(ws.Col)
	}
	restore, err := makeRaw(fd)
	if err != nil {
		return err
	}
	defer restore()
	p, err := cl.Stream(ctx, req)
	if err != nil {
		return err
	}
	if announce != "" {
		g.say("%s\r", announce) // the terminal is raw: \r returns the carriage
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with wctx
		for {
			select {
			case <-wctx.Done():
				return
			case <-winch:
				if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil {
					_ = cl.Resize(wctx, p.SandboxID, p.ProcessID, int(ws.Row), int(ws.Col))
				}
			}
		}
	}()
	go forwardStdin(wctx, g, cl, p) // a Read on the terminal cannot be interrupted; it ends with the process
	return copyOutput(g, p, true)
}

// makeRaw puts the terminal in raw mode (as cfmakeraw does) and returns the
// function that restores it.
func makeRaw(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
