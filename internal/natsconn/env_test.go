package natsconn_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/client"
)

// The commands and roles read the same SBX_NATS_* variables as the client,
// through its one reader, and the nats CLI context besides.
func TestFromEnvReadsTheClientsVariables(t *testing.T) {
	vars := map[string]string{
		client.EnvURL: "nats://a:1,nats://b:2", client.EnvCreds: "c.creds", client.EnvNKey: "n.nk",
		client.EnvUser: "u", client.EnvPassword: "p", client.EnvToken: "t",
		client.EnvCA: "ca.pem", client.EnvCert: "cert.pem", client.EnvKey: "key.pem", natsconn.EnvContext: "ctx1",
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	o, e := natsconn.FromEnv(), client.SettingsFromEnv()
	for _, tc := range []struct{ name, conn, cl, want string }{
		{"url", o.URL, e.URL, vars[client.EnvURL]},
		{"creds", o.Creds, e.Creds, vars[client.EnvCreds]},
		{"nkey", o.NKey, e.NKey, vars[client.EnvNKey]},
		{"user", o.User, e.User, vars[client.EnvUser]},
		{"password", o.Password, e.Password, vars[client.EnvPassword]},
		{"token", o.Token, e.Token, vars[client.EnvToken]},
		{"ca", o.CA, e.CA, vars[client.EnvCA]},
		{"cert", o.Cert, e.Cert, vars[client.EnvCert]},
		{"key", o.Key, e.Key, vars[client.EnvKey]},
	} {
		if tc.conn != tc.want || tc.cl != tc.want {
			t.Errorf("%s: natsconn %q, client %q, want %q", tc.name, tc.conn, tc.cl, tc.want)
		}
	}
	if o.Context != "ctx1" {
		t.Errorf("context %q, want ctx1", o.Context)
	}
	if natsconn.DefaultURL != client.DefaultURL {
		t.Errorf("default URL %q, client's %q", natsconn.DefaultURL, client.DefaultURL)
	}
}
