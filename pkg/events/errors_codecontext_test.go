package events

// The code-context codes (SBX_E1320–1324), added here rather than in the
// shared map literal so that merges stay additive.
func init() {
	sentinels[CodeContextNotFound] = ErrContextNotFound
}
