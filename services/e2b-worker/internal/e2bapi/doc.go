// Package e2bapi is a client for E2B's control-plane REST API (sandbox create,
// get, list, kill, timeout, connect and pause).
//
// Configuration follows the official SDKs: E2B_API_KEY, E2B_DOMAIN,
// E2B_API_URL and E2B_SANDBOX_URL, with the key sent as the X-API-Key header.
// Failures are *APIError values that match the sentinels ErrUnauthorized,
// ErrNotFound, ErrConflict, ErrBadRequest, ErrRateLimited and ErrUnavailable
// with errors.Is. 429 answers are retried with bounded exponential back-off
// that honours Retry-After. The API key is never logged.
package e2bapi
