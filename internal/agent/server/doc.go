// Package server is the in-sandbox side of sbx-agent: it serves the
// internal/agent/proto protocol on one byte stream (the container's attached
// stdio, or a unix socket), running processes and file operations with the
// rights of the user it runs as, the sandbox user.
//
// It is a child subreaper (in a sandbox, PID 1 itself): processes an exec
// leaves behind are re-parented to it and reaped, and a cancelled exec's
// whole tree (its session, its process group and every process carrying its
// mark) is killed. No request ends it: a panic serving one is answered as an
// internal error and the server goes on (ADR 29).
package server
