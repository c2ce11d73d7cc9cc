package worker

import "context"

// detached is the root of the work the worker does for a command from the
// bus or on its own (a deadline's kill, a purge, an operation record):
// none of it has a caller's context, and the worker's stop does not cancel
// it. drain lets it finish within ShutdownGrace and then stops what still
// runs through its own cancel (stopInFlight). Every use is bounded: by a
// timeout given where it is made, or by what it is handed to (openOp
// bounds a record's store by the audit timeout).
var detached = context.Background
