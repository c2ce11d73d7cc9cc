package client

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// The merge of live and replayed output, without a server: each case feeds
// messages from both paths in some order and checks what the reader gets.
func TestMergeLiveAndReplay(t *testing.T) {
	chunk := func(stream string, seq int) outputMsg {
		h := nats.Header{}
		h.Set(events.HeaderSeq, fmt.Sprint(seq))
		return outputMsg{subject: events.LiveSubject("T", "s", "p", stream), header: h, data: []byte(fmt.Sprintf("%s%d", stream[3:], seq))}
	}
	exit := func(lastOut, lastErr int) outputMsg {
		h := nats.Header{}
		h.Set(events.HeaderLastSeqStdout, fmt.Sprint(lastOut))
		h.Set(events.HeaderLastSeqStderr, fmt.Sprint(lastErr))
		return outputMsg{subject: events.OutputSubject("T", "s", "p", events.Exit), header: h, data: []byte(`{"exit_code":0}`)}
	}
	const end = "END" // the replay's end message
	type step struct {
		m   outputMsg
		ctl string
	}
	o := func(seq int) step { return step{m: chunk(events.Stdout, seq)} }
	e := func(seq int) step { return step{m: chunk(events.Stderr, seq)} }
	x := func(a, b int) step { return step{m: exit(a, b)} }
	replayEnd := step{ctl: end}
	reattached := step{ctl: "ATTACH"} // the reader's attach went out
	cases := []struct {
		name  string
		steps []step
		// want is what the reader sees, "out3" a chunk, "+2" a chunk
		// after a gap of 2, "exit" the marker; "…" nothing more yet.
		want string
	}{
		{"replay then live, overlapping", []step{o(1), o(2), o(2), replayEnd, o(3), x(3, 0)}, "out1 out2 out3 exit"},
		{"live ahead of the replay waits for it", []step{o(3), o(4), o(1), o(2), replayEnd, x(4, 0)}, "out1 out2 out3 out4 exit"},
		{"exit on live before the replay ends", []step{o(2), x(2, 1), e(1), o(1)}, "err1 out1 out2 exit"},
		{"exit waits for the replay's chunks", []step{x(1, 0)}, "…"},
		{"exit via replay", []step{o(1), e(1), x(1, 1), replayEnd}, "out1 err1 exit"},
		{"a gap the replay cannot fill is reported at its end", []step{o(1), o(4), replayEnd, x(4, 0)}, "out1 +2out4 exit"},
		{"held chunks before the exit are flushed", []step{o(2), o(3), replayEnd, x(3, 0)}, "+1out2 out3 exit"},
		{"a live gap asks for a replay that fills it", []step{replayEnd, o(1), o(3), reattached, o(2), replayEnd, x(3, 0)}, "out1 out2 out3 exit"},
		{"duplicates from both paths once", []step{o(1), e(1), o(1), e(1), o(2), replayEnd, o(2), x(2, 1)}, "out1 err1 out2 exit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &apiSource{replaying: true, want: map[string]uint64{events.Stdout: 1, events.Stderr: 1},
				held: map[string]map[uint64]outputMsg{}}
			next := map[string]uint64{events.Stdout: 1, events.Stderr: 1}
			var got []string
			drain := func() {
				for {
					m, ok := s.pop()
					if !ok {
						return
					}
					_, _, _, stream, _ := events.ParseOutputSubject(m.subject)
					if stream == events.Exit {
						got = append(got, "exit")
						continue
					}
					var seq uint64
					fmt.Sscan(m.header.Get(events.HeaderSeq), &seq)
					w := string(m.data)
					if seq > next[stream] {
						w = fmt.Sprintf("+%d%s", seq-next[stream], w)
					}
					next[stream] = seq + 1
					got = append(got, w)
				}
			}
			for _, st := range tc.steps {
				switch st.ctl {
				case end:
					s.replayEnded()
				case "ATTACH":
					if !s.needAttach {
						t.Fatal("no replay was asked for")
					}
					s.needAttach, s.replaying = false, true
				default:
					s.take(st.m)
				}
				drain()
			}
			if len(got) == 0 {
				got = []string{"…"}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("got %q, want %q", g, tc.want)
			}
		})
	}
}
