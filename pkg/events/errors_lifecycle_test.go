package events

// The worker lifecycle codes' sentinels (SBX_E1620–1629), kept apart from the
// map in errors_test.go so that code ranges added at the same time merge.
func init() {
	sentinels[CodeWorkerShutdown] = ErrWorkerShutdown
	sentinels[CodeProcessLost] = ErrProcessLost
	sentinels[CodeCreateOrphaned] = ErrCreateOrphaned
	sentinels[CodeReplyLost] = ErrReplyLost
	sentinels[CodeKillDeferred] = ErrKillDeferred
}
