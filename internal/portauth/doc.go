// Package portauth makes and checks the credentials of a published port
// (events.PortExposure): its token, the signed links a browser opens once,
// and the cookie the gateway trades a link for.
//
// The registry keeps only Hash(token), which the gateway checks a token
// against. Links and cookies are HMAC-SHA256 keyed by the port link key, a
// secret only the routers and the gateways hold (LoadKey), over that hash,
// the sandbox, the port, what the credential is and its expiry: whoever
// reads the registry (every services role does) cannot make one, any router
// can mint them and any gateway check them, and rotating the token voids
// them all.
package portauth
