package storage

import (
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

	_, _, err = FailedForGood("s3://bucket", "r", "")
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
