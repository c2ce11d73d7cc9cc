package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestTLSFailureExitCodes: a TLS failure is not a usage error (it exited
// 2): a server that refuses the client's certificate refuses its
// credentials (77); a server the CA does not verify is no sandboxio this
// client can reach (69). Against a real nats-server that requires client
// certificates.
func TestTLSFailureExitCodes(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := testCert(t, nil, nil, "sandboxio test CA", true)
	srvCert, srvKey := testCert(t, ca, caKey, "127.0.0.1", false)
	cliCert, cliKey := testCert(t, ca, caKey, "client", false)
	other, _ := testCert(t, nil, nil, "another CA", true)
	caFile := testPEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	otherFile := testPEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	certFile := testPEM(t, dir, "client.pem", "CERTIFICATE", cliCert.Raw)
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := testPEM(t, dir, "client-key.pem", "EC PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSVerify: true, TLSTimeout: 2,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("TLS server not ready")
	}
	url := "tls://" + srv.Addr().String()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no client certificate", []string{"--tlsca", caFile}, exitNoPerm},
		{"a CA that does not verify the server", []string{"--tlsca", otherFile, "--tlscert", certFile, "--tlskey", keyFile}, exitUnreachable},
	} {
		r := cli(t, url, append(tc.args, "ls")...)
		if r.code != tc.want {
			t.Errorf("%s: exit %d, want %d: %s", tc.name, r.code, tc.want, r.stderr)
		}
	}
}

func testCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func testPEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
