package events

// The agent's codes (SBX_E1306–1319), added here rather than in the shared
// map literal so that merges stay additive.
func init() {
	sentinels[CodeAgentUnavailable] = ErrAgentUnavailable
	sentinels[CodeAgentProtocol] = ErrAgentProtocol
	sentinels[CodePathIsSymlink] = ErrPathIsSymlink
	sentinels[CodeContextCrashed] = ErrContextCrashed
	sentinels[CodePTYNotFound] = ErrPTYNotFound
	sentinels[CodeAgentInternal] = ErrAgentInternal
}
