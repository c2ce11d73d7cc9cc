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
		{OutputSubject("T", "s1", "p1", Stdout), "sbx.out.T.s1.p1.stdout"},
		{OutputFilter("T", "s1", "p1"), "sbx.out.T.s1.p1.>"},
		{LiveSubject("T", "s1", "p1", Exit), "sbx.live.T.s1.p1.exit"},
		{LiveFilter("T", "s1", "p1"), "sbx.live.T.s1.p1.>"},
		{ProgressSubject("T", "s1"), "sbx.progress.T.s1"},
		{ReplaySubject("T", "n1"), "sbx.replay.T.n1"},
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
	ss := StreamSubjectsFor("T", "s1", "p1")
	want := StreamSubjects{Stdout: "sbx.out.T.s1.p1.stdout", Stderr: "sbx.out.T.s1.p1.stderr", Exit: "sbx.out.T.s1.p1.exit",
		Filter: "sbx.out.T.s1.p1.>", Stream: StreamOutput, Live: "sbx.live.T.s1.p1.>"}
	if ss != want {
		t.Errorf("StreamSubjectsFor = %+v, want %+v", ss, want)
	}
	// The live copy is the output subject with its prefix replaced.
	if got := SubjectLivePrefix + strings.TrimPrefix(OutputSubject("T", "s1", "p1", Stderr), SubjectOutPrefix); got != LiveSubject("T", "s1", "p1", Stderr) {
		t.Errorf("live subject %s", got)
	}
}

func TestParseOutputSubject(t *testing.T) {
	tests := []struct {
		subject                       string
		tenant, sandbox, proc, stream string
		ok                            bool
	}{
		{"sbx.out._.s1.p1.stdout", "_", "s1", "p1", "stdout", true},
		{"sbx.live.T.s1.p1.exit", "T", "s1", "p1", "exit", true},
		{"sbx.out.s1.p1.stdout", "", "", "", "", false},
		{"sbx.out.T.s1.p1.stdout.x", "", "", "", "", false},
		{"sbx.ops.T.s1.p1.stdout", "", "", "", "", false},
		{"nats.out.T.s1.p1.stdout", "", "", "", "", false},
		{"", "", "", "", "", false},
	}
	for _, tt := range tests {
		tn, s, p, st, ok := ParseOutputSubject(tt.subject)
		if tn != tt.tenant || s != tt.sandbox || p != tt.proc || st != tt.stream || ok != tt.ok {
			t.Errorf("ParseOutputSubject(%q) = %q %q %q %q %v", tt.subject, tn, s, p, st, ok)
		}
	}
}

func FuzzParseOutputSubject(f *testing.F) {
	for _, s := range []string{"sbx.out._.s1.p1.stdout", "sbx.live.T.s1.p1.exit", "sbx.out..", "sbx.out.....", "sbx.out.a.b.c.d.e", "", ".", "sbx.out.T.*.>.stdout"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		tn, sb, proc, stream, ok := ParseOutputSubject(subject)
		if !ok {
			if tn != "" || sb != "" || proc != "" || stream != "" {
				t.Fatalf("not ok but returned %q %q %q %q", tn, sb, proc, stream)
			}
			return
		}
		for _, tok := range []string{tn, sb, proc, stream} {
			if strings.Contains(tok, ".") {
				t.Fatalf("token %q of %q holds a dot", tok, subject)
			}
		}
		// The parts rebuild the subject, on either prefix.
		if OutputSubject(tn, sb, proc, stream) != subject && LiveSubject(tn, sb, proc, stream) != subject {
			t.Fatalf("%q parsed to %q %q %q %q, which does not rebuild it", subject, tn, sb, proc, stream)
		}
		// Parsing what was built from valid ids gives the ids back.
		if ValidTenant(tn) && ValidID(sb) && ValidID(proc) {
			t2, s2, p2, st2, ok2 := ParseOutputSubject(OutputSubject(tn, sb, proc, stream))
			if !ok2 || t2 != tn || s2 != sb || p2 != proc || st2 != stream {
				t.Fatalf("round trip of %q failed", subject)
			}
		}
	})
}
