package natsconn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sandboxio/sandboxio/internal/natsconn"
)

// TestTLS: a server that verifies client certificates accepts --tlsca,
// --tlscert and --tlskey, and refuses a client without a certificate.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "sandboxio test CA", true)
	srvCert, srvKey := newCert(t, ca, caKey, "127.0.0.1", false)
	cliCert, cliKey := newCert(t, ca, caKey, "client", false)
	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	cliCertFile := writePEM(t, dir, "client.pem", "CERTIFICATE", cliCert.Raw)
	cliKeyFile := writePEM(t, dir, "client-key.pem", "EC PRIVATE KEY", must(x509.MarshalECPrivateKey(cliKey)))

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

	nc, err := natsconn.Connect(context.Background(), natsconn.Options{URL: url, CA: caFile, Cert: cliCertFile, Key: cliKeyFile})
	if err != nil {
		t.Fatalf("with CA and client certificate: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	start := time.Now()
	if _, err := natsconn.Connect(context.Background(), natsconn.Options{URL: url, CA: caFile, Wait: time.Minute}); !errors.Is(err, natsconn.ErrTLS) {
		t.Fatalf("without a client certificate: %v, want ErrTLS", err)
	} else if time.Since(start) > bound {
		t.Fatalf("refusal took %v", time.Since(start))
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	if _, err := natsconn.Connect(context.Background(), natsconn.Options{URL: url, CA: caFile, Cert: cliCertFile, Key: caFile}); !errors.Is(err, natsconn.ErrBadSettings) {
		t.Fatalf("a key that is not the certificate's: %v", err)
	}
	// A CA that did not sign the server's certificate.
	other, _ := newCert(t, nil, nil, "another CA", true)
	otherFile := writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	start = time.Now()
	if _, err := natsconn.Connect(context.Background(), natsconn.Options{URL: url, CA: otherFile, Cert: cliCertFile, Key: cliKeyFile, Wait: time.Minute}); !errors.Is(err, natsconn.ErrTLS) || time.Since(start) > bound {
		t.Fatalf("with a CA that does not verify the server: %v after %v", err, time.Since(start))
	} else {
		t.Logf("wrong CA: %v", err)
	}
}

func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
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

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
