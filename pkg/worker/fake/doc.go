// Package fake is a deterministic, in-memory sandbox backend for tests,
// benchmarks and the protocol's examples. It isolates nothing (its tier is
// "unknown" unless configured) and runs no real processes: its "commands"
// are interpreted by the backend itself, and every call is recorded.
//
// Commands (argv[0] and its arguments):
//
//	echo ARG...           writes the arguments, space-joined, and "\n" to stdout
//	echo-stderr ARG...    the same to stderr
//	exit N                exits with code N
//	sleep MS              sleeps MS milliseconds (ends early when killed or timed out)
//	write N [CHUNK]       writes N bytes to stdout in writes of CHUNK bytes (default 64 KiB);
//	                      byte i is 'a'+(i%26), so readers can check order and loss
//	write-stderr N        the same to stderr
//	drip N [MS]           writes "drip i" lines, i = 1..N, MS milliseconds apart (default 100)
//	interleave N          writes N lines "out i" to stdout and "err i" to stderr, alternating
//	cat                   copies stdin to stdout until stdin ends
//	env NAME              writes the value of NAME (create env, secrets, exec env) and "\n"
//	env-sha256 NAME       writes the hex SHA-256 of that value and "\n" (proves a secret arrived without showing it)
//	pwd                   writes the working directory and "\n" ("/" when none)
//	binary                writes the bytes 0x00..0xff to stdout
//	oom                   ends as if killed by the OOM killer (exit 137, oom_killed)
//	anything else         fails to start with SBX_E1303 ExecFailed
//
// Create honours ClassSpec.Image: "fail-create" fails with CreateFailed,
// "missing-image" with ImageNotFound, "slow-create" waits for its context,
// "pull-progress" reports three progress messages as an image pull would.
// run_code echoes the code to stdout and returns it as a text result;
// the code "raise" returns an error result.
package fake
