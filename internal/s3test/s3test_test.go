package s3test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"
)

func TestStartServesAndStops(t *testing.T) {
	var pid int
	t.Run("serve", func(t *testing.T) {
		srv := Start(t)
		pid = srv.PID
		ctx := context.Background()
		c := srv.Client(t)
		key := "a/b.txt"
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, Key: &key, Body: bytes.NewReader([]byte("hello"))})
		must.NoError(t, err)
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &srv.Bucket, Key: &key})
		must.NoError(t, err)
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		must.NoError(t, err)
		must.EqOp(t, "hello", string(got))
		must.NotEq(t, srv.Bucket, srv.NewBucket(t))
	})
	if pid == 0 {
		t.Skip("no server started")
	}
	// The subtest's cleanup has stopped the server: its PID is gone (the
	// wait in cleanup reaped it, so signal 0 finds no such process).
	err := syscall.Kill(pid, 0)
	must.ErrorIs(t, err, syscall.ESRCH)
}

func TestBinaryEnvNamesMissingFile(t *testing.T) {
	t.Setenv(EnvServer, filepath.Join(t.TempDir(), "no-such-server"))
	_, err := Binary()
	must.ErrorIs(t, err, os.ErrNotExist)
}

// TestServerKeepsConnections: one connection serves a run of requests, as
// on AWS S3, so that tests and benchmarks do not pay a TCP connect for
// each request.
func TestServerKeepsConnections(t *testing.T) {
	srv := Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	key := "k"
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, Key: &key, Body: bytes.NewReader([]byte("x"))})
	must.NoError(t, err)
	var reused []bool
	trace := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) },
	})
	for range 3 {
		_, err := c.HeadObject(trace, &s3.HeadObjectInput{Bucket: &srv.Bucket, Key: &key})
		must.NoError(t, err)
	}
	must.Eq(t, []bool{true, true, true}, reused)
}

// TestServerAtNiceness: with NOMAD_TRAIN_TEST_S3_NICE the server process
// (the PID the benchmarks read its CPU time from) runs at that niceness;
// a value out of range is refused.
func TestServerAtNiceness(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	t.Setenv(EnvNice, "7")
	srv := Start(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", srv.PID))
	must.NoError(t, err)
	// The fields after the command name (in parentheses): nice is the 19th
	// field of the line, the 17th after it.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	must.EqOp(t, "7", f[16])
	must.StrContains(t, string(b), "(versitygw)")

	for _, bad := range []string{"0", "20", "x"} {
		t.Setenv(EnvNice, bad)
		_, err := niceness()
		must.ErrorContains(t, err, EnvNice)
	}
}
