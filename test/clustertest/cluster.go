package clustertest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/cutproxy"
	"github.com/sandboxio/sandboxio/internal/embednats"
)

// Cluster is a running in-process JetStream cluster.
type Cluster struct {
	t     testing.TB
	Nodes []*Node
	// links[i][j] carries the routes node i dials to node j.
	links [][]*cutproxy.Proxy
}

// Node is one member of a Cluster. Its config (name, store directory,
// client and cluster ports) is fixed, so Restart brings back the same node.
type Node struct {
	Config embednats.Config
	Server *embednats.Server // nil while stopped
}

// URL is the node's client URL.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Config.Port) }

// StartCluster starts size nodes named n1..nN in cluster "sbx" on loopback,
// with client and cluster ports allocated up front, and stops them at
// cleanup. Every route between two nodes runs through a link the cluster can
// cut (Crash). The nodes accept connections on return; JetStream needs a few
// more seconds to elect a meta leader (use bus.EnsureWithRetry).
func StartCluster(t testing.TB, size int) *Cluster {
	t.Helper()
	ports := freePorts(t, 2*size)
	c := &Cluster{t: t, links: make([][]*cutproxy.Proxy, size)}
	t.Cleanup(c.stopAll)
	for i := range size {
		c.links[i] = make([]*cutproxy.Proxy, size)
		for j := range size {
			if i == j {
				continue
			}
			k, err := cutproxy.New(fmt.Sprintf("127.0.0.1:%d", ports[size+j]))
			if err != nil {
				t.Fatal(err)
			}
			c.links[i][j] = k
		}
	}
	// Peers learn each other's address only from their own Routes: the
	// advertised cluster address refuses connections, so no implicit route
	// can bypass the links.
	dead := freePorts(t, 1)[0]
	dir := t.TempDir()
	for i := range size {
		var routes []string
		for j := range size {
			if i != j {
				routes = append(routes, "nats-route://"+c.links[i][j].Addr())
			}
		}
		name := fmt.Sprintf("n%d", i+1)
		c.Nodes = append(c.Nodes, &Node{Config: embednats.Config{
			ServerName:       name,
			StoreDir:         filepath.Join(dir, name),
			Host:             "127.0.0.1",
			Port:             ports[i],
			ClusterName:      "sbx",
			ClusterHost:      "127.0.0.1",
			ClusterPort:      ports[size+i],
			ClusterAdvertise: fmt.Sprintf("127.0.0.1:%d", dead),
			Routes:           routes,
		}})
	}
	// Start every node before waiting on any: each waits only for its own
	// listeners, and the routes connect as their peers come up.
	errs := make(chan error, size)
	for i := range c.Nodes {
		go func() { errs <- c.start(i) }()
	}
	for range c.Nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *Cluster) start(i int) error {
	s, err := embednats.Start(c.Nodes[i].Config)
	if err != nil {
		return fmt.Errorf("start %s: %w", c.Nodes[i].Config.ServerName, err)
	}
	c.Nodes[i].Server = s
	return nil
}

// URLs is every node's client URL, comma-separated (what --nats takes).
func (c *Cluster) URLs() string {
	var us []string
	for _, n := range c.Nodes {
		us = append(us, n.URL())
	}
	return strings.Join(us, ",")
}

// Index returns the index of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.Nodes {
		if n.Config.ServerName == name {
			return i
		}
	}
	return -1
}

// Stop shuts node i down cleanly (its Raft leaders step down first, as on
// SIGTERM) and waits for it.
func (c *Cluster) Stop(i int) {
	if s := c.Nodes[i].Server; s != nil {
		s.Stop()
		c.Nodes[i].Server = nil
	}
}

// Crash takes node i away as a crash or a network partition would: its
// routes are cut first, so its peers hear nothing more from it and must wait
// for Raft election timeouts; then it is shut down, which closes its clients'
// connections.
func (c *Cluster) Crash(i int) {
	c.setLinks(i, true)
	c.Stop(i)
}

// Restart starts node i again with the same name, store and ports.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if c.Nodes[i].Server != nil {
		c.t.Fatalf("node %s is running", c.Nodes[i].Config.ServerName)
	}
	c.setLinks(i, false)
	if err := c.start(i); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) setLinks(i int, cut bool) {
	for j := range c.Nodes {
		if i != j {
			c.links[i][j].SetCut(cut)
			c.links[j][i].SetCut(cut)
		}
	}
}

func (c *Cluster) stopAll() {
	for i := range c.Nodes {
		c.Stop(i)
	}
	for _, row := range c.links {
		for _, k := range row {
			if k != nil {
				k.Close()
			}
		}
	}
}

// freePorts returns n distinct free loopback ports (held open together so
// they differ, then released).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
