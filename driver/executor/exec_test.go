package executor

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestExec(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")

	cases := []struct {
		name     string
		argv     []string
		stdout   string
		stderr   string
		code     int
		timeout  time.Duration
		deadline bool
	}{
		{name: "env and dir of the task", argv: []string{"sh", "-c", "echo $FOO; pwd; echo oops >&2; exit 3"},
			stdout: "bar\n" + f.dir + "\n", stderr: "oops\n", code: 3},
		{name: "killed by signal", argv: []string{"sh", "-c", "kill -9 $$"}, code: 137},
		{name: "timeout kills", argv: []string{"sh", "-c", "sleep 30 & wait"}, timeout: 200 * time.Millisecond, code: -1, deadline: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			begin := time.Now()
			out, errb, code, err := task.Exec(context.Background(), tc.argv, timeout)
			if tc.deadline {
				must.ErrorIs(t, err, context.DeadlineExceeded)
				must.Less(t, 1500*time.Millisecond, time.Since(begin)) // the group died, not just sh
			} else {
				must.NoError(t, err)
			}
			must.Eq(t, tc.code, code)
			must.Eq(t, tc.stdout, string(out))
			must.Eq(t, tc.stderr, string(errb))
		})
	}

	_, _, _, err := task.Exec(context.Background(), []string{"no-such-command-xyz"}, time.Second)
	must.ErrorIs(t, err, ErrCommandNotFound)
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestExecStreaming(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	t.Run("pipes", func(t *testing.T) {
		var out, errb syncBuffer
		code, err := task.ExecStreaming(ctx, []string{"sh", "-c", "cat; echo e >&2; exit 4"}, false,
			strings.NewReader("from stdin\n"), &out, &errb, nil)
		must.NoError(t, err)
		must.Eq(t, 4, code)
		must.Eq(t, "from stdin\n", out.String())
		must.Eq(t, "e\n", errb.String())
	})

	t.Run("tty with resize", func(t *testing.T) {
		inR, inW := io.Pipe()
		defer inW.Close()
		resize := make(chan TermSize)
		var out syncBuffer
		done := make(chan struct{})
		var code int
		var err error
		go func() {
			defer close(done)
			code, err = task.ExecStreaming(ctx, []string{"sh", "-c", "test -t 0 && echo is-a-tty; read line; stty size; echo got:$line; exit 5"},
				true, inR, &out, nil, resize)
		}()
		// The second send returns only after the first size was applied.
		resize <- TermSize{Height: 40, Width: 100}
		resize <- TermSize{Height: 40, Width: 100}
		_, werr := inW.Write([]byte("hello\n"))
		must.NoError(t, werr)
		<-done
		must.NoError(t, err)
		must.Eq(t, 5, code)
		text := strings.ReplaceAll(out.String(), "\r", "")
		must.StrContains(t, text, "is-a-tty\n")
		must.StrContains(t, text, "40 100\n")
		must.StrContains(t, text, "got:hello\n")
	})

	t.Run("cancel kills", func(t *testing.T) {
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer ccancel()
		var out syncBuffer
		_, err := task.ExecStreaming(cctx, []string{"sleep", "30"}, true, nil, &out, nil, nil)
		must.ErrorIs(t, err, context.DeadlineExceeded)
	})
}
