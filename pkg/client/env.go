package client

import "os"

// The environment variables that name the server and the credentials: the
// client reads them, and so do sandboxio's own commands and roles.
const (
	EnvURL      = "SBX_NATS_URL"
	EnvCreds    = "SBX_NATS_CREDS"
	EnvNKey     = "SBX_NATS_NKEY"
	EnvUser     = "SBX_NATS_USER"
	EnvPassword = "SBX_NATS_PASSWORD"
	EnvToken    = "SBX_NATS_TOKEN"
	EnvCA       = "SBX_NATS_CA"
	EnvCert     = "SBX_NATS_CERT"
	EnvKey      = "SBX_NATS_KEY"
)

// EnvSettings are the server and credentials the SBX_NATS_* variables
// name; an unset variable is empty. Files are named, not read.
type EnvSettings struct {
	URL      string // SBX_NATS_URL: one or more URLs, comma-separated
	Creds    string // SBX_NATS_CREDS: creds file (user JWT and seed)
	NKey     string // SBX_NATS_NKEY: nkey seed file
	User     string // SBX_NATS_USER
	Password string // SBX_NATS_PASSWORD
	Token    string // SBX_NATS_TOKEN
	CA       string // SBX_NATS_CA: CA certificate file (PEM)
	Cert     string // SBX_NATS_CERT: client certificate file (PEM)
	Key      string // SBX_NATS_KEY: client key file (PEM)
}

// SettingsFromEnv reads the SBX_NATS_* variables.
func SettingsFromEnv() EnvSettings {
	return EnvSettings{URL: os.Getenv(EnvURL), Creds: os.Getenv(EnvCreds), NKey: os.Getenv(EnvNKey),
		User: os.Getenv(EnvUser), Password: os.Getenv(EnvPassword), Token: os.Getenv(EnvToken),
		CA: os.Getenv(EnvCA), Cert: os.Getenv(EnvCert), Key: os.Getenv(EnvKey)}
}

// Options are the credential and TLS options the settings name, those
// Connect uses when it is given none.
func (s EnvSettings) Options() []Option {
	var opts []Option
	if s.Creds != "" {
		opts = append(opts, WithCreds(s.Creds))
	}
	if s.NKey != "" {
		opts = append(opts, WithNKey(s.NKey))
	}
	if s.User != "" {
		opts = append(opts, WithUserInfo(s.User, s.Password))
	}
	if s.Token != "" {
		opts = append(opts, WithToken(s.Token))
	}
	if s.CA != "" || s.Cert != "" || s.Key != "" {
		opts = append(opts, WithTLS(s.CA, s.Cert, s.Key))
	}
	return opts
}
