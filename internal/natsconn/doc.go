// Package natsconn turns connection settings — a URL, credentials (a creds
// file, an nkey seed file, user and password, or a token), TLS (CA, client
// certificate and key) and optionally a nats CLI context — into a NATS
// connection, the same way for every sandboxio client and service role.
//
// Settings come from flags (Options.AddFlags), from the environment
// (FromEnv: SBX_NATS_URL, SBX_NATS_CREDS, SBX_NATS_NKEY, SBX_NATS_USER,
// SBX_NATS_PASSWORD, SBX_NATS_TOKEN, SBX_NATS_CA, SBX_NATS_CERT,
// SBX_NATS_KEY, SBX_NATS_CONTEXT) and from a nats CLI context file
// ($XDG_CONFIG_HOME/nats/context/<name>.json, default
// ~/.config/nats/context), read as JSON here rather than through
// github.com/nats-io/jsm.go (see docs/dependencies.md); a flag beats the
// environment, which beats the context.
//
// Bad input fails fast with an error naming what failed, never a hang or a
// retry storm: a missing, unreadable or malformed creds or key file is
// refused before any connection is tried, and a server that refuses the
// credentials (wrong, expired or revoked) yields ErrAuthorization naming
// the credentials; a failed TLS handshake (a CA that does not verify the
// server, a client certificate the server refuses) is ErrTLS. Connect
// retries only a server that cannot be reached (ErrUnreachable), once a
// second, when Options.Wait allows.
package natsconn
