// Package auth builds sandboxio's NATS account layout in JWT operator mode,
// with github.com/nats-io/jwt/v2 and github.com/nats-io/nkeys:
//
//   - operator "sandboxio", signing every account;
//   - system account SYS (user "sys", used to push account updates with
//     $SYS.REQ.CLAIMS.UPDATE);
//   - services account SVC (JetStream on) holding the users router, worker,
//     auditor, reaper and admin, each with its own publish permissions:
//     only the router publishes sbx.cmd.> (the reaper: kill commands only),
//     only workers publish sbx.out.>, sbx.progress.> and the router's reply
//     subjects _SBX.router.>, only workers (and the reaper's reap records)
//     publish sbx.ops.>, nobody but admin may delete, purge, update or
//     delete messages of the SBX_OPS stream through $JS.API, nobody but
//     admin may create, update or restore any stream or bucket (a stream's
//     RePublish would publish past its configurer's permissions: ADR 35;
//     `sandboxio bus init` sets the bus up as admin), and only the auditor
//     puts to KV sbx_audit (its checkpoints);
//   - one account per tenant (no JetStream) importing the client API
//     sbx.api.v1.> as a service (Share: the router learns the caller's user
//     too) and its own sbx.live.<ACC>.>, sbx.progress.<ACC>.> and
//     sbx.replay.<ACC>.> streams. SVC exports those with the account token
//     at position 3, so nats-server refuses any import whose third token is
//     not the importing account's public key. Tenant users may publish only
//     sbx.api.v1.> and _INBOX.>, and subscribe only to _INBOX.> and their
//     own live, progress and replay subjects.
//
// Init writes everything into a directory: seeds in files of mode 0600
// (never printed or logged), the operator and account JWTs, a resolver
// directory (resolver type full) and a nats-server configuration file that
// a stock nats-server (nats-server -c FILE -js) and the embedded server
// (internal/embednats, Config.ConfigFile) both load. AddTenant adds a
// tenant account and a user; Push sends an account JWT to a running server
// so that no restart is needed.
//
// The directory layout (see Layout):
//
//	operator.nk operator.jwt nats-server.conf
//	accounts/SYS.nk accounts/SYS.jwt accounts/SVC.nk accounts/SVC.jwt
//	accounts/tenants/<name>.nk  .jwt  .json (the events.TenantRecord)
//	resolver/<account public key>.jwt
//	creds/sys.creds router.creds worker.creds auditor.creds reaper.creds admin.creds
//	creds/tenants/<name>.creds
//	keys/seal.xk                 the backends' xkey seed (worker --seal-key)
//	keys/signing-<worker>.nk     one record-signing nkey seed per worker
//	keys/signing-reaper.nk       the reaper's record-signing nkey seed
//	keys/signers.txt             their public keys (auditor --trusted-signers)
//	keys/signing-router.nk       the router's command-signing nkey seed
//	keys/signing-auditor.nk      the auditor's checkpoint-signing nkey seed
//	keys/auditors.txt            its public key (audit verify --auditor-keys)
//	keys/commanders.txt          the router's and the reaper's public keys
//	                             (workers' --trusted-commanders)
package auth
