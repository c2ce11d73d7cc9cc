// Package portauth makes and checks the credentials of a published port
// (events.PortExposure): its token, the signed links a browser opens once,
// and the cookie the gateway trades a link for.
//
// The registry keeps only Hash(token). Links and cookies are HMAC-SHA256
// keyed by that hash, over the sandbox, the port, what the credential is and
// its expiry, so that any router can mint them and any gateway can check
// them with nothing but the registry record, and rotating the token voids
// them all.
package portauth
