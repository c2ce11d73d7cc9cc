// Package egress enforces a Docker sandbox's network policy on the host.
//
// deny is no interface at all (network none; nothing here). allow and
// allowlist give the sandbox its own Docker bridge network, named and
// labelled by the worker, and rules in an nftables table the worker owns
// (inet sandboxio_<worker>): the sandbox reaches no host address, no bridge
// gateway service except its own resolver and proxy, no other sandbox and
// no private range, and no IPv6. allow forwards everything else; allowlist
// forwards only listed CIDRs, sends every other TCP connection to a proxy the
// worker runs for that sandbox (TLS SNI, HTTP Host, HTTP CONNECT), which
// dials only listed names after resolving them itself, and answers DNS only
// for listed names. Answers that point a name at a private, loopback or
// link-local address are refused unless a listed CIDR covers it.
//
// See docs/adr/0012-egress.md for the design.
package egress
