package worker

// watchDeaths registers the runtime's handler with a backend that reports
// sandboxes dying on their own; the returned func unregisters it.
func (w *Worker) watchDeaths() func() {
	dw, ok := w.backend.(DeathWatcher)
	if !ok {
		return func() {}
	}
	dw.OnSandboxDeath(w.sandboxDied)
	return func() { dw.OnSandboxDeath(nil) }
}

// sandboxDied handles a backend's report that a sandbox died outside Kill:
// its processes fail with SandboxGone at once (kill cancels them), what is
// left is removed and the registry says gone, with the reason.
func (w *Worker) sandboxDied(id, reason string) {
	if w.isStopping() {
		return // the successor's reconcile finds it
	}
	sb := w.lookup(id)
	if sb == nil {
		return
	}
	w.log.Warn("sandbox died outside a kill", "sandbox_id", id, "reason", reason)
	w.goTracked(func() {
		if _, e := w.kill(sb, "died: "+truncate(reason), "", ""); e != nil {
			w.log.Warn("remove a dead sandbox", "sandbox_id", id, "code", e.Code)
		}
	})
}
