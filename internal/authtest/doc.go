// Package authtest runs a real nats-server (embedded, JetStream on, a
// random TCP port on 127.0.0.1) with exactly the account layout that
// internal/auth writes and `sandboxio auth init` deploys, with the tenants
// "tenant-a" and "tenant-b", for tests of the trust boundary:
//
//	env := authtest.Start(t)
//	router := env.Connect(t, env.Creds(auth.RoleRouter))
//	a := env.Connect(t, env.TenantCreds(authtest.TenantA))
//	// env.TenantAccount(authtest.TenantA) is what Nats-Request-Info says.
//
// tenant-a exists before the server starts (loaded from the resolver
// directory); tenant-b is added to the running server with auth.Push, so
// both ways a tenant reaches a server are exercised by every test. The
// streams and buckets exist (bus.Ensure with admin credentials) and both
// tenants' records (default limits) are in KV sbx_tenants when Start
// returns; Env.AddTenant adds a tenant with limits to the running server.
package authtest
