package storage

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestFailedMark(t *testing.T) {
	root := t.TempDir()
	_, ok, err := FailedForGood(root, "r", "")
	must.NoError(t, err)
	must.False(t, ok)

	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	must.NoError(t, MarkFailed(root, "r", Failure{Reason: "failure budget exhausted", ExitCode: 5, Time: at}))
	f, ok, err := FailedForGood(root, "r", "")
	must.NoError(t, err)
	must.True(t, ok)
	must.Eq(t, Failure{Reason: "failure budget exhausted", ExitCode: 5, Time: at}, f)

	// The run's storage still opens, and the mark is no debris to clean.
	st, err := Open(root, "r", Policy{})
	must.NoError(t, err)
	must.NoError(t, st.Close())
	_, ok, _ = FailedForGood(root, "r", "")
	must.True(t, ok)

	must.NoError(t, ClearFailed(root, "r"))
	must.NoError(t, ClearFailed(root, "r")) // idempotent
	_, ok, err = FailedForGood(root, "r", "")
	must.NoError(t, err)
	must.False(t, ok)

	_, _, err = FailedForGood("gs://bucket", "r", "")
	must.ErrorIs(t, err, ErrUnsupportedScheme)
}

// A mark stamped with one attempt at a run stops that attempt only; one
// without an attempt (or read without one) stops every attempt.
func TestFailedMarkOfAnAttempt(t *testing.T) {
	a1, a2 := AttemptID([]byte("secret one")), AttemptID([]byte("secret two"))
	must.NotEq(t, a1, a2)
	must.Eq(t, a1, AttemptID([]byte("secret one")))
	must.Eq(t, "", AttemptID(nil))

	root := t.TempDir()
	must.NoError(t, MarkFailed(root, "r", Failure{Reason: "training function failed", Attempt: a1}))
	for attempt, want := range map[string]bool{a1: true, a2: false, "": true} {
		_, ok, err := FailedForGood(root, "r", attempt)
		must.NoError(t, err)
		must.Eq(t, want, ok, must.Sprintf("attempt %q", attempt))
	}
	must.NoError(t, MarkFailed(root, "r", Failure{Reason: "written before attempts were"}))
	_, ok, _ := FailedForGood(root, "r", a2)
	must.True(t, ok)
}

func TestRebase(t *testing.T) {
	for _, c := range []struct{ root, want string }{
		{"results", "/task/results"},
		{"./a/../results", "/task/results"},
		{"/shared/results", "/shared/results"},
		{"s3://bucket/x", "s3://bucket/x"},
		{"file:///shared/r", "file:///shared/r"},
		{"", ""},
	} {
		if got := Rebase(c.root, "/task"); got != c.want {
			t.Errorf("Rebase(%q) = %q, want %q", c.root, got, c.want)
		}
	}
}

// TestFailedMarkRefusesNonRegular: a FAILED.json that is a link to
// /dev/zero is refused, not read without end.
func TestFailedMarkRefusesNonRegular(t *testing.T) {
	root := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(root, "r"), 0o755))
	must.NoError(t, os.Symlink("/dev/zero", filepath.Join(root, "r", FailedFile)))
	_, _, err := FailedForGood(root, "r", "")
	must.ErrorIs(t, err, errNotRegular)
}

// The driver reads a task's mark as root at a path the job chose: with
// WithMarkOwner a mark counts only when the task's user owns it.
func TestFailedMarkOwner(t *testing.T) {
	root := t.TempDir()
	must.NoError(t, MarkFailed(root, "r", Failure{Reason: "training function failed", ExitCode: 3}))
	f, ok, err := FailedForGood(root, "r", "", WithMarkOwner(os.Getuid()))
	must.NoError(t, err)
	must.True(t, ok)
	must.EqOp(t, "training function failed", f.Reason)
	f, ok, err = FailedForGood(root, "r", "", WithMarkOwner(os.Getuid()+1))
	must.ErrorContains(t, err, "not the task user's")
	must.False(t, ok)
	must.EqOp(t, "", f.Reason, must.Sprint("nothing of another user's file is read"))
}

// FuzzDecodeFailure checks the decoder never panics and that what it
// accepts encodes and decodes to the same record.
func FuzzDecodeFailure(f *testing.F) {
	for _, fl := range []Failure{
		{Reason: "failure budget exhausted", ExitCode: 5, Time: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), Attempt: "0123456789abcdef"},
		{Reason: "user error: panic: x\n\tstack", ExitCode: 3},
	} {
		b, err := json.Marshal(fl)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"reason":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := DecodeFailure(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(fl)
		if err != nil {
			t.Fatalf("accepted record does not encode: %v", err)
		}
		again, err := DecodeFailure(b)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if again.Reason != fl.Reason || again.ExitCode != fl.ExitCode || again.Attempt != fl.Attempt || !again.Time.Equal(fl.Time) {
			t.Fatalf("round trip changed the record: %+v -> %+v", fl, again)
		}
		_ = fl.Concerns("x")
	})
}

// TestFailedLocation: the driver tells a person which mark to remove; on
// S3 it once said "s3:/bucket/..." (a URL joined as a file path).
func TestFailedLocation(t *testing.T) {
	cases := []struct{ root, want string }{
		{"/mnt/results", "/mnt/results/qs/FAILED.json"},
		{"results/", "results/qs/FAILED.json"},
		{"s3://bucket/runs", "s3://bucket/runs/qs/FAILED.json"},
		{"s3://bucket/runs/", "s3://bucket/runs/qs/FAILED.json"},
		{"s3://bucket", "s3://bucket/qs/FAILED.json"},
	}
	for _, tc := range cases {
		t.Run(tc.root, func(t *testing.T) {
			must.Eq(t, tc.want, FailedLocation(tc.root, "qs"))
		})
	}
}
