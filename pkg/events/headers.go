package events

// NATS header names. Every name is lowercase where the peer may be another
// language's client, because nats.go header lookups are case-sensitive.
const (
	// HeaderMsgID is JetStream's de-duplication header; set to the CloudEvent id.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderServiceError and HeaderServiceErrorCode are the NATS micro error
	// headers (ADR-32): the code is the numeric part of the SBX code.
	HeaderServiceError     = "Nats-Service-Error"
	HeaderServiceErrorCode = "Nats-Service-Error-Code"

	// Output stream headers.
	HeaderSeq           = "Sbx-Seq"             // per-stream sequence of a chunk, from 1
	HeaderOffset        = "Sbx-Offset"          // bytes of the stream the process wrote up to the end of this chunk (those dropped past a limit counted): where a re-attach resumes
	HeaderExitCode      = "Sbx-Exit-Code"       // on the exit marker
	HeaderLastSeqStdout = "Sbx-Last-Seq-Stdout" // on the exit marker
	HeaderLastSeqStderr = "Sbx-Last-Seq-Stderr" // on the exit marker
	HeaderTruncated     = "Sbx-Truncated"       // on the exit marker: "stdout", "stderr" or "stdout,stderr"

	// HeaderCallerTimeout, on a client API request, is how long (decimal
	// milliseconds) the caller will wait for its answer. The router bounds
	// the command by it (less a margin) so that a worker that does not
	// answer in time is answered with a code the caller still receives
	// (SBX_E1602, or SBX_E1203 for a create, with details.caller_deadline).
	HeaderCallerTimeout = "Sbx-Caller-Timeout-Ms"

	// HeaderTraceparent and HeaderTracestate carry W3C trace context on every message.
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"

	// CloudEvents binary-mode attribute headers.
	HeaderCEID          = "ce-id"
	HeaderCEType        = "ce-type"
	HeaderCESource      = "ce-source"
	HeaderCESpecVersion = "ce-specversion"
	HeaderCETime        = "ce-time"
	HeaderCESubject     = "ce-subject"
	HeaderCEContentType = "ce-datacontenttype"
	// HeaderCEReplyTo is the CloudEvent extension "replyto": where a worker sends
	// the reply to a command.
	HeaderCEReplyTo = "ce-replyto"
)
