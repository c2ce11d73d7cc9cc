package events

// The containment codes' sentinels (SBX_E1701–1719), kept apart so that
// each range's additions merge without touching the others'.
func init() {
	for c, s := range map[Code]*Error{
		CodeDiskQuotaTooLarge: ErrDiskQuotaTooLarge, CodeFileReadTooLarge: ErrFileReadTooLarge,
		CodeFileWriteTooLarge: ErrFileWriteTooLarge, CodeObjectQuotaExceeded: ErrObjectQuotaExceeded,
		CodeOutputLimitTooLarge: ErrOutputLimitTooLarge, CodeOutputShareExceeded: ErrOutputShareExceeded,
		CodeImageNotAllowed: ErrImageNotAllowed, CodeInvalidImageRef: ErrInvalidImageRef,
		CodeSandboxOOMKilled: ErrSandboxOOMKilled,
	} {
		sentinels[c] = s
	}
}
