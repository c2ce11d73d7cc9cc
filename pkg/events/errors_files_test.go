package events

// The surface range (SBX_E1207–1209), in its own file so that the ranges
// of parallel work merge without touching one line.
func init() {
	sentinels[CodeFileNotFound] = ErrFileNotFound
}
