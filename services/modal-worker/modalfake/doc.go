// Package modalfake is a protocol-faithful fake of Modal for tests: the
// control plane (modal.client.ModalClient) and the worker-side
// TaskCommandRouter as in-process gRPC servers on 127.0.0.1, speaking the
// wire protocol of the subset in proto/modal_proto.
//
// Processes run for real, each inside the sandbox's own directory jail: a
// private mount namespace in which the host's /usr, /bin, /lib*, /etc are
// bound read-only, then chroot into the sandbox directory (util-linux
// unshare). The fs-tools exec (/__modal/.bin/modal-sandbox-fs-tools) works
// on the same directory, so files written through the API are the files the
// processes see. When namespaces are not available (an unprivileged CI
// runner without user namespaces) processes run on the host with their
// working directory mapped into the sandbox directory; JailMode tells which.
//
// As Modal ends a container, terminating a sandbox kills every process of
// it, setsid children included (members.go). Where the chroot jail runs
// (root), network_access is enforced too: a BLOCKED sandbox's execs run in
// a network namespace with only a loopback, an ALLOWLIST sandbox's in one
// joined to the host by a veth pair and filtered to its list (netns.go);
// NetworkEnforced tells whether this host allows it.
//
// Every request is validated against the reference: unknown fields,
// missing required fields, wrong id shapes and missing or wrong headers are
// recorded as deviations and fail the test (Options.TB). Faults can be
// injected: UNAVAILABLE in the middle of a stdio stream, UNAUTHENTICATED on
// the router (rotated JWTs), RESOURCE_EXHAUSTED with an RPCRetryPolicy,
// sandbox expiry while an exec runs, slow creates, rejected tokens. At
// cleanup the fake checks that no sandbox is left running and no process is
// left alive (its own leak check).
package modalfake
