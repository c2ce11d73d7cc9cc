package worker

import "testing"

// TestRedactLeavesPathsAndErrorsAlone: a file name that sounds like a
// credential key (/etc/passwd, /work/token) followed by ": " and an error
// is a path in an error message, not a key and its value; a key=value in a
// path, and every key: value that is not a path's last component, is
// still redacted (issue 22, D.20).
func TestRedactLeavesPathsAndErrorsAlone(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"exec /etc/passwd: permission denied", "exec /etc/passwd: permission denied"},
		{"open /work/secret.txt: no such file or directory", "open /work/secret.txt: no such file or directory"},
		{`exec: "/run/token": permission denied`, `exec: "/run/token": permission denied`},
		{"db_passwd: x1", "db_passwd: [REDACTED]"},
		{"X-Api-Key: k123", "X-Api-Key: [REDACTED]"},
		{"cat /run/secrets/api_key=abc", "cat /run/secrets/api_key=[REDACTED]"},
		{"PASSWORD=hunter2 ./run", "PASSWORD=[REDACTED] ./run"},
		// A path is exempt only when the system's error words follow it.
		{"vault read secret/api_key: sk_live_abc", "vault read secret/api_key: [REDACTED]"},
		{"GET /v1/token: eyJhbGciOi", "GET /v1/token: [REDACTED]"},
		{"open /run/token: not a directory", "open /run/token: not a directory"},
		{"cat: /etc/passwd: Permission denied", "cat: /etc/passwd: Permission denied"},
	} {
		if got := Redact(tc.in, nil); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
