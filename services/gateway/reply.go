package gateway

import (
	"net/http"
	"strconv"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// The fixed answers. notFoundBody is the one body of every 404 (an
// unknown sandbox, one not running, a port it does not publish, a URL that
// names no sandbox), and unauthorizedBody of every 401, whatever the
// reason, so that neither tells anything about what is behind the URL.
var (
	notFoundBody = events.EncodeError(&events.Error{Code: events.CodePortNotExposed, Name: "PortNotExposed",
		Message: "no published port at this address"})
	unauthorizedBody = events.EncodeError(&events.Error{Code: events.CodeUnauthorized, Name: "Unauthorized",
		Message: "this port needs a valid token, link or cookie"})
	// linkOnPathBody answers a signed link on a path route, whatever the
	// port: links and cookies work with host routing only.
	linkOnPathBody = events.EncodeError(&events.Error{Code: events.CodeUnauthorized, Name: "Unauthorized",
		Message: "a signed link works with host routing only (<port>-<sandbox>.<domain>); on a path route send the token in the " +
			events.PortTokenHeader + " header"})
)

// writeBody answers status with a JSON body and the headers every
// gateway answer carries.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	_, _ = w.Write([]byte("\n"))
}

// writeError answers status with e's JSON body.
func writeError(w http.ResponseWriter, status int, e *events.Error) {
	writeBody(w, status, events.EncodeError(e))
}

func writeNotFound(w http.ResponseWriter) { writeBody(w, http.StatusNotFound, notFoundBody) }
func writeUnauthorized(w http.ResponseWriter) {
	writeBody(w, http.StatusUnauthorized, unauthorizedBody)
}

// pausedError is the 409 of a paused sandbox.
func pausedError() *events.Error {
	return events.Errorf(events.CodeSandboxPaused, "the sandbox is paused; resume it, then retry")
}
