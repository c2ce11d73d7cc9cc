// Package server is the in-sandbox side of sbx-agent: it serves the
// internal/agent/proto protocol on one byte stream (the container's attached
// stdio, or a unix socket), running processes and file operations with the
// rights of the user it runs as, the sandbox user.
//
// It is a child subreaper: processes an exec leaves behind are re-parented to
// it and reaped, and a cancelled exec's whole tree (its session, its process
// group and every process carrying its mark) is killed.
package server
