package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/client"
)

// serviceWait is how long a service role waits for a NATS server it
// cannot reach at start-up (compose and k8s may start it first); it tries
// once a second. Refused credentials fail at once.
const serviceWait = 24 * time.Hour

// connState holds the connections the CLI opened for client commands, so
// that they are closed when the command ends.
type connState struct {
	mu    sync.Mutex
	conns []*nats.Conn
}

func (s *connState) track(nc *nats.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
}

func (s *connState) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nc := range s.conns {
		nc.Close()
	}
	s.conns = nil
}

// natsOptions are the connection settings of this invocation: the global
// flags, then SBX_NATS_*, then the nats CLI context.
func (g *globals) natsOptions(name string) natsconn.Options {
	o := g.conn
	o.URL = g.natsURL
	o = o.Merge(natsconn.FromEnv())
	o.Name = name
	return o
}

// connect opens a client connection named name: one try, reconnecting
// once connected.
func (g *globals) connect(name string) (*nats.Conn, error) {
	o := g.natsOptions(name)
	o.Reconnect = true
	o.Logger = g.logger()
	return natsconn.Connect(context.Background(), o)
}

// connectService opens a service role's connection: it waits for a server
// it cannot reach (bounded by ctx) and reconnects for ever.
func (g *globals) connectService(ctx context.Context, name string) (*nats.Conn, error) {
	o := g.natsOptions(name)
	o.Reconnect = true
	o.Wait = serviceWait
	o.Logger = g.logger()
	g.logger().Debug("connecting", "url", o.URL, "credentials", o.Describe())
	return natsconn.Connect(ctx, o)
}

// newClient is a pkg/client client on a connection of this invocation,
// closed when the command ends.
func (g *globals) newClient() (*client.Client, error) {
	nc, err := g.connect("sandboxio-client")
	if err != nil {
		return nil, err
	}
	cl, err := client.New(nc, client.WithLogger(g.logger()))
	if err != nil {
		nc.Close()
		return nil, err
	}
	g.conns.track(nc)
	return cl, nil
}

// withService adapts a service role's command: connect as a service, run
// f, close.
func (g *globals) withService(name string, f func(cmd *cobra.Command, nc *nats.Conn, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		nc, err := g.connectService(cmd.Context(), name)
		if err != nil {
			return err
		}
		defer nc.Close()
		return f(cmd, nc, args)
	}
}

// workerKeys are a worker role's --seal-key and --signing-key.
type workerKeys struct{ sealFile, signingFile string }

func (k *workerKeys) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&k.sealFile, "seal-key", os.Getenv("SBX_SEAL_KEY_FILE"),
		"file with the backend's xkey seed (SX…) that opens sealed secrets; every worker of a backend shares it (env SBX_SEAL_KEY_FILE)")
	cmd.Flags().StringVar(&k.signingFile, "signing-key", os.Getenv("SBX_SIGNING_KEY_FILE"),
		"file with this worker's nkey seed (SU…) that signs its records (env SBX_SIGNING_KEY_FILE)")
}

// load reads the seeds; a file that holds no seed of the right kind is an
// error naming it.
func (k *workerKeys) load() (seal, signing []byte, err error) {
	if k.sealFile != "" {
		if seal, err = readSeedFile(k.sealFile, "--seal-key", nkeys.PrefixByteCurve); err != nil {
			return nil, nil, err
		}
	}
	if k.signingFile != "" {
		if signing, err = readSeedFile(k.signingFile, "--signing-key", nkeys.PrefixByteUser); err != nil {
			return nil, nil, err
		}
	}
	return seal, signing, nil
}

func readSeedFile(path, flag string, want nkeys.PrefixByte) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	seed := []byte(strings.TrimSpace(string(b)))
	pre, _, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%s %s: not an nkey seed: %w", flag, path, err)
	}
	if pre != want {
		return nil, fmt.Errorf("%s %s: a %s seed, want %s", flag, path, pre, want)
	}
	return seed, nil
}

// readSigners reads a --trusted-signers (or, with flag, another) file of
// public nkeys (U…), one a line; blank lines and lines starting with # are
// skipped.
func readSigners(path string, flag ...string) ([]string, error) {
	name := "--trusted-signers"
	if len(flag) > 0 {
		name = flag[0]
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !nkeys.IsValidPublicUserKey(line) {
			return nil, fmt.Errorf("%s %s:%d: not a public user nkey (U…)", name, path, n)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, path, err)
	}
	return out, nil
}
