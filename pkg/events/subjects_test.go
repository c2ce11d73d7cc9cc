package events

import (
	"strings"
	"testing"
)

func TestSubjects(t *testing.T) {
	tests := []struct{ got, want string }{
		{APISubject(OpFilesWrite), "sbx.api.v1.files.write"},
		{CreateSubject("docker"), "sbx.cmd.docker.pool.create"},
		{PoolFilter("docker"), "sbx.cmd.docker.pool.>"},
		{NodeSubject("docker", "w1", Verb(OpFilesWrite)), "sbx.cmd.docker.node.w1.files_write"},
		{NodeFilter("docker", "w1"), "sbx.cmd.docker.node.w1.>"},
		{OpsSubject("docker", "s1", EventClosed), "sbx.ops.docker.s1.closed"},
		{OutputSubject("s1", "p1", Stdout), "sbx.out.s1.p1.stdout"},
		{OutputFilter("s1", "p1"), "sbx.out.s1.p1.>"},
		{LiveSubject("s1", "p1", Exit), "sbx.live.s1.p1.exit"},
		{WorkerKey("docker", "w1"), "docker.w1"},
		{CommandType(OpFilesWrite), TypeCmdFilesWrite},
		{CommandType(OpExec), TypeCmdExec},
		{PoolConsumer("docker"), "docker-pool"},
		{NodeConsumer("docker", "w1"), "docker-node-w1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
	ss := StreamSubjectsFor("s1", "p1")
	want := StreamSubjects{Stdout: "sbx.out.s1.p1.stdout", Stderr: "sbx.out.s1.p1.stderr", Exit: "sbx.out.s1.p1.exit",
		Filter: "sbx.out.s1.p1.>", Stream: StreamOutput, Live: "sbx.live.s1.p1.>"}
	if ss != want {
		t.Errorf("StreamSubjectsFor = %+v, want %+v", ss, want)
	}
	// The live copy is the output subject with its prefix replaced.
	if got := SubjectLivePrefix + strings.TrimPrefix(OutputSubject("s1", "p1", Stderr), SubjectOutPrefix); got != LiveSubject("s1", "p1", Stderr) {
		t.Errorf("live subject %s", got)
	}
}

func TestParseOutputSubject(t *testing.T) {
	tests := []struct {
		subject               string
		sandbox, proc, stream string
		ok                    bool
	}{
		{"sbx.out.s1.p1.stdout", "s1", "p1", "stdout", true},
		{"sbx.live.s1.p1.exit", "s1", "p1", "exit", true},
		{"sbx.out.s1.p1", "", "", "", false},
		{"sbx.out.s1.p1.stdout.x", "", "", "", false},
		{"sbx.ops.s1.p1.stdout", "", "", "", false},
		{"nats.out.s1.p1.stdout", "", "", "", false},
		{"", "", "", "", false},
	}
	for _, tt := range tests {
		s, p, st, ok := ParseOutputSubject(tt.subject)
		if s != tt.sandbox || p != tt.proc || st != tt.stream || ok != tt.ok {
			t.Errorf("ParseOutputSubject(%q) = %q %q %q %v", tt.subject, s, p, st, ok)
		}
	}
}

func FuzzParseOutputSubject(f *testing.F) {
	for _, s := range []string{"sbx.out.s1.p1.stdout", "sbx.live.s1.p1.exit", "sbx.out..", "sbx.out....", "sbx.out.a.b.c.d", "", ".", "sbx.out.*.>.stdout"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		sb, proc, stream, ok := ParseOutputSubject(subject)
		if !ok {
			if sb != "" || proc != "" || stream != "" {
				t.Fatalf("not ok but returned %q %q %q", sb, proc, stream)
			}
			return
		}
		for _, tok := range []string{sb, proc, stream} {
			if strings.Contains(tok, ".") {
				t.Fatalf("token %q of %q holds a dot", tok, subject)
			}
		}
		// The parts rebuild the subject, on either prefix.
		if OutputSubject(sb, proc, stream) != subject && LiveSubject(sb, proc, stream) != subject {
			t.Fatalf("%q parsed to %q %q %q, which does not rebuild it", subject, sb, proc, stream)
		}
		// Parsing what was built from valid ids gives the ids back.
		if ValidID(sb) && ValidID(proc) {
			s2, p2, st2, ok2 := ParseOutputSubject(OutputSubject(sb, proc, stream))
			if !ok2 || s2 != sb || p2 != proc || st2 != stream {
				t.Fatalf("round trip of %q failed", subject)
			}
		}
	})
}
