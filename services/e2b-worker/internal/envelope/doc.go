// Package envelope reads and writes Connect streaming envelopes: one flag
// byte, a 4-byte big-endian length and the payload. Flag bit 0x01 marks a
// compressed payload and 0x02 the end-of-stream message.
//
// connect-go does the framing for the envd client and the fake; this package
// exists for the places that see raw bytes: the fake's middleware answers
// (which envd writes outside Connect), fault injection and the transcript
// replay test.
package envelope
