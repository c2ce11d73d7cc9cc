// Command sbx-agent is the static helper the docker worker injects into every
// sandbox (CGO_ENABLED=0, no libc, no shell needed in the image). `serve`
// serves the worker's protocol on its stdin/stdout (the container's attach
// stream), or with --connect on a unix socket the worker listens on; the other commands are one-shot helpers the worker runs through a
// Docker exec, as the sandbox user or as root, where the image's own tools
// must not be trusted: a static binary ignores LD_PRELOAD and runs nothing
// through PATH.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/agent/server"
	"github.com/sandboxio/sandboxio/internal/timerslack"
)

// build is set with -ldflags "-X main.build=…".
var build = "dev"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "files":
		err = files(os.Args[2:])
	case "oom":
		var n int64
		var e *proto.Error
		if n, e = server.OOMKills(); e == nil {
			fmt.Println(n)
		} else {
			err = e
		}
	case "kill":
		if len(os.Args) != 3 || os.Args[2] == "" {
			usage()
		}
		fmt.Println(server.KillMarked(os.Args[2]))
	case "version":
		fmt.Printf("sbx-agent %s protocol %d\n", build, proto.Version)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbx-agent:", err)
		if pe, ok := err.(*proto.Error); ok {
			os.Exit(exitCodeOf(pe.Kind))
		}
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: sbx-agent serve [--connect SOCKET] [--procs N] [--crash-file FILE]
       sbx-agent files read|write|stat|list|mkdir|remove PATH [flags]
       sbx-agent oom | kill MARK | version`)
	os.Exit(2)
}

// stdioIn and stdioOut are the stdio channel's files, pollable copies of 0
// and 1 (socket.go). They stay reachable for as long as the agent lives: a
// collected File closes its descriptor.
var stdioIn, stdioOut *os.File

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	verbose := fs.Bool("v", false, "log to stderr")
	listen := fs.String("listen", "", "serve on this unix socket instead of stdin/stdout (one connection at a time)")
	connect := fs.String("connect", "", "connect to the worker's unix socket at this path instead of serving stdin/stdout, again whenever the connection ends")
	crashFile := fs.String("crash-file", "", "also write the report of a fatal crash (Go's panic text and goroutine stacks) to this file, for the worker to read after the agent died")
	procs := fs.Int("procs", 0, "run Go code on this many CPUs (GOMAXPROCS): the sandbox's CPU limit, rounded up; 0 for the runtime's default, which is at least 2")
	_ = fs.Parse(args)
	childSlack := timerslack.Relax() // may execute the agent again, from the start
	if err := protect(); err != nil {
		return err
	}
	if crashHook != nil {
		crashHook()
	}
	if *crashFile != "" {
		if err := crashOutput(*crashFile); err != nil {
			return err
		}
	}
	if *procs > 0 {
		// Fixed from here on: the runtime no longer follows the cgroup's
		// limit, which nothing changes in a running sandbox.
		runtime.GOMAXPROCS(min(*procs, runtime.NumCPU()))
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	dir, _ := os.Getwd()
	// Eight spare (the reaper keeps none in a blocking call: ADR 28).
	server.ReserveThreads(8)
	server.GrowPipe(os.Stdout)
	server.GrowPipe(os.Stdin)
	s, err := server.New(server.Config{Build: build, Env: os.Environ(), Dir: dir, Log: log, ChildTimerSlack: childSlack})
	if err != nil {
		return err
	}
	if *listen != "" {
		return serveSocket(s, *listen, log)
	}
	if *connect != "" {
		return serveConnect(s, *connect, log)
	}
	stdioIn, stdioOut = pollableCopy(0, "stdin"), pollableCopy(1, "stdout")
	err = s.Serve(context.Background(), stdioIn, stdioOut, true)
	log.Warn("connection ended", "err", err)
	// Stdin ended: keep the sandbox (and what runs in it) alive; the worker
	// falls back to Docker exec.
	select {}
}

// Exit codes of the one-shot files commands, by error kind, so that the
// worker can classify a failure without reading a message.
var kindCodes = map[string]int{
	proto.ErrNotFound: 10, proto.ErrExists: 11, proto.ErrPermission: 12, proto.ErrForbidden: 13,
	proto.ErrSymlink: 14, proto.ErrNotDir: 15, proto.ErrIsDir: 16, proto.ErrNotRegular: 17,
	proto.ErrTooLarge: 18, proto.ErrInvalid: 19, proto.ErrIO: 20,
}

func exitCodeOf(kind string) int {
	if c, ok := kindCodes[kind]; ok {
		return c
	}
	return 1
}

func files(args []string) error {
	if len(args) < 2 {
		usage()
	}
	op, p := args[0], args[1]
	fs := flag.NewFlagSet("files "+op, flag.ExitOnError)
	mode := fs.String("mode", "0", "file mode (octal)")
	parents := fs.Bool("parents", false, "make missing parent directories")
	max := fs.Int64("max", 0, "refuse files larger than this")
	size := fs.Int64("size", -1, "exact size of the content on stdin")
	_ = fs.Parse(args[2:])
	if err := proto.CheckPath(p); err != nil {
		return &proto.Error{Kind: proto.ErrInvalid, Message: err.Error()}
	}
	m, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil {
		return &proto.Error{Kind: proto.ErrInvalid, Message: "bad mode"}
	}
	f, err := server.NewFiles()
	if err != nil {
		return err
	}
	var e *proto.Error
	switch op {
	case "read":
		_, e = f.Read(p, *max, os.Stdout)
	case "write":
		_, e = f.Write(p, uint32(m), *parents, io.Reader(os.Stdin), *size)
	case "stat":
		var fi proto.FileInfo
		if fi, e = f.Stat(p); e == nil {
			return json.NewEncoder(os.Stdout).Encode(fi)
		}
	case "list":
		var r proto.Result
		if r.Files, r.Stat, _, e = f.List(p); e == nil {
			return json.NewEncoder(os.Stdout).Encode(r)
		}
	case "mkdir":
		e = f.Mkdir(p, uint32(m), *parents)
	case "remove":
		e = f.Remove(p)
	default:
		usage()
	}
	if e != nil {
		return e
	}
	return nil
}
