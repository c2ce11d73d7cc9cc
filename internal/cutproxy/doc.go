// Package cutproxy is a TCP proxy that can be cut and restored: the tests'
// way of losing a node or a process's connection without killing it.
package cutproxy
