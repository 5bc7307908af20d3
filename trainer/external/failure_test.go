package external

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/collective"
)

// A command's own error fails the run with its last words; a command
// killed, or failing in a collective, is a lost worker to retry.
func TestCommandFailure(t *testing.T) {
	cases := []struct {
		name       string
		script     string
		reportLost bool
		lost       bool
		quotes     string
	}{
		{"python exception", `echo 'Traceback (most recent call last):' >&2; echo '  File "train.py", line 3' >&2; echo 'ValueError: lr must be positive' >&2; exit 1`,
			false, false, "ValueError: lr must be positive"},
		{"missing script", `echo "python3: can't open file '/x/train.py': [Errno 2] No such file or directory" >&2; exit 2`,
			false, false, "can't open file"},
		{"killed", `kill -9 $$`, false, true, "killed by SIGKILL"}, // not "killed by killed"
		{"gloo lost its peer", `echo 'RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:5000' >&2; exit 1`,
			false, true, "Connection closed by peer"},
		{"traceback through torch.distributed", `echo '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536, in all_reduce' >&2; echo 'RuntimeError: oops' >&2; exit 1`,
			false, true, "RuntimeError: oops"},
		{"exit 3 asks for a restart", `echo 'OSError: [Errno 5] Input/output error' >&2; exit 3`,
			false, true, "Input/output error"},
		{"a report failed as the gang broke", `echo 'nomad_train.NomadTrainError: report: peer lost' >&2; exit 1`,
			true, true, "NomadTrainError"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sink bytes.Buffer
			tail := newTailWriter(&sink, tailLines)
			cmd := exec.Command("sh", "-c", tc.script)
			cmd.Stderr = tail
			werr := cmd.Run()
			must.Error(t, werr)
			err := commandFailure([]string{"python3", "train.py"}, werr, tail.Tail(), tc.reportLost)
			must.ErrorIs(t, err, ErrCommandFailed)
			must.Eq(t, tc.lost, errors.Is(err, collective.ErrPeerLost))
			must.StrContains(t, err.Error(), tc.quotes)
			if !strings.HasPrefix(tc.quotes, "killed by") { // the wrapper's words, not the command's
				must.StrContains(t, sink.String(), strings.TrimSpace(tc.quotes)) // passed through
			}
		})
	}
}

// The tail keeps the last lines, including an unterminated one.
func TestTailWriter(t *testing.T) {
	var sink bytes.Buffer
	tw := newTailWriter(&sink, 2)
	for _, s := range []string{"one\ntw", "o\nthree\n", "four", "\n\n"} {
		_, err := tw.Write([]byte(s))
		must.NoError(t, err)
	}
	must.Eq(t, "    three\n    four", tw.Tail())
	must.Eq(t, "one\ntwo\nthree\nfour\n\n", sink.String())
}

// The command's stderr is outside input: whatever it writes passes through
// unchanged, and the tail stays bounded and made of what was written.
func FuzzTailWriter(f *testing.F) {
	f.Add([]byte("Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: x\n"), uint8(3))
	f.Add([]byte("no newline at all"), uint8(1))
	f.Add([]byte("\r\n\n\n  \n"), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, split uint8) {
		var sink bytes.Buffer
		tw := newTailWriter(&sink, tailLines)
		cut := min(int(split), len(b))
		for _, part := range [][]byte{b[:cut], b[cut:]} {
			if n, err := tw.Write(part); err != nil || n != len(part) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if !bytes.Equal(sink.Bytes(), b) {
			t.Fatal("output not passed through unchanged")
		}
		tail := tw.Tail()
		if tail == "" {
			return
		}
		lines := strings.Split(tail, "\n")
		if len(lines) > tailLines {
			t.Fatalf("%d lines in the tail", len(lines))
		}
		for _, l := range lines {
			if !strings.HasPrefix(l, "    ") || len(l) > 4+maxPartial {
				t.Fatalf("bad tail line %q", l)
			}
		}
	})
}
