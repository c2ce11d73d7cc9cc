//go:build integration

package dockerworker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/services/docker-worker/internal/egress"
)

// needEgressHost skips unless the test can make network namespaces and
// nftables tables (root, ip, nft).
func needEgressHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("egress tests need root (network namespaces, nftables)")
	}
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("egress tests need %s: %v", bin, err)
		}
	}
}

func cmd(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// internet is a network namespace of the test's own that plays "the
// internet": one veth to the host, an HTTP server on :80 and a TLS server
// on :443 that answer with the name they were asked for.
type internet struct {
	ns      string
	hostIP  netip.Addr // the host's end
	ip      netip.Addr // the namespace's end: the servers' address
	hits    atomic.Int64
	udpHits atomic.Int64
}

func newInternet(t *testing.T) *internet {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	tag := fmt.Sprintf("%x", b)
	n := int(b[0]) % 63 // one /30 of 203.0.113.0/24 (TEST-NET-3)
	inet := &internet{ns: "sbxt-" + tag,
		hostIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(4*n + 1)}),
		ip:     netip.AddrFrom4([4]byte{203, 0, 113, byte(4*n + 2)})}
	hostIf, nsIf := "sbxth"+tag, "sbxtn"+tag
	cmd(t, "ip", "netns", "add", inet.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", inet.ns).Run() })
	cmd(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	cmd(t, "ip", "link", "set", nsIf, "netns", inet.ns)
	cmd(t, "ip", "addr", "add", inet.hostIP.String()+"/30", "dev", hostIf)
	cmd(t, "ip", "link", "set", hostIf, "up")
	cmd(t, "ip", "-n", inet.ns, "addr", "add", inet.ip.String()+"/30", "dev", nsIf)
	cmd(t, "ip", "-n", inet.ns, "link", "set", nsIf, "up")
	cmd(t, "ip", "-n", inet.ns, "link", "set", "lo", "up")

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inet.hits.Add(1)
		host := r.Host
		if r.TLS != nil {
			host = r.TLS.ServerName
		}
		fmt.Fprintf(w, "hello %s\n", host)
	})
	// A UDP echo on :53 plays a foreign resolver a sandbox might try.
	udp := listenPacketIn(t, inet.ns, "udp4", ":53")
	udpDone := make(chan struct{})
	go func() {
		defer close(udpDone)
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			inet.udpHits.Add(1)
			_, _ = udp.WriteTo(append([]byte("echo "), buf[:n]...), from)
		}
	}()
	t.Cleanup(func() { _ = udp.Close(); <-udpDone })
	ln80 := listenIn(t, inet.ns, "tcp4", ":80")
	ln443 := tls.NewListener(listenIn(t, inet.ns, "tcp4", ":443"), &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	for _, ln := range []net.Listener{ln80, ln443} {
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close(); <-done })
	}
	return inet
}

// inNetns runs f on a thread switched into the named network namespace.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	nsf, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsf.Close()
	if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		panic("cannot return to the host network namespace: " + err.Error())
	}
}

func listenPacketIn(t *testing.T, ns, network, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	var err error
	inNetns(t, ns, func() { pc, err = net.ListenPacket(network, addr) })
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// listenIn opens a listener inside the named network namespace; the socket
// stays there when the thread goes back.
func listenIn(t *testing.T, ns, network, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	ln, lerr := net.Listen(network, addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		panic("cannot return to the host network namespace: " + err.Error())
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	return ln
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		DNSNames: []string{"*.test", "*.wild.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fakeDNS is the upstream resolver the worker asks: a zone of the test's.
func fakeDNS(t *testing.T, zone map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
		ip, ok := zone[name]
		if !ok && strings.HasSuffix(name, ".wild.test") {
			ip, ok = zone["*.wild.test"]
		}
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Question[0].Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
				A: net.ParseIP(ip).To4()})
		}
		_ = w.WriteMsg(m)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return pc.LocalAddr().String()
}

// hostListener is a service of the host's on 0.0.0.0 that no sandbox may
// reach; it counts the connections it accepts.
type hostListener struct {
	port     int
	accepted atomic.Int64
}

func newHostListener(t *testing.T) *hostListener {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostListener{port: ln.Addr().(*net.TCPAddr).Port}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			_, _ = c.Write([]byte("host secret\n"))
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return h
}

// dropEgressTable removes the worker's nftables table when the test ends
// (after the backend's own cleanup, which kills the sandboxes).
func dropEgressTable(t *testing.T, workerID string) {
	t.Cleanup(func() {
		_ = exec.Command("nft", "delete", "table", "inet", egress.TableName(workerID)).Run()
	})
}

func networkByName(name string) network.ListOptions {
	return network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", "^"+name+"$"))}
}
