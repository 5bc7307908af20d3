package executor

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestResolveUser(t *testing.T) {
	users := map[string]*user.User{
		"alice": {Uid: "1234", Gid: "1235", Username: "alice", HomeDir: "/home/alice"},
		"me":    {Uid: "1000", Gid: "1000", Username: "me"},
		"weird": {Uid: "x", Gid: "1", Username: "weird"},
	}
	lookup := func(name string) (*user.User, error) {
		if u, ok := users[name]; ok {
			return u, nil
		}
		return nil, user.UnknownUserError(name)
	}
	failing := func(string) (*user.User, error) { return nil, errors.New("nss down") }
	cases := []struct {
		name    string
		user    string
		lookup  UserLookup
		uid     int
		want    *credential
		target  error
		anError bool
	}{
		{name: "empty is current", user: "", lookup: lookup, uid: 1000},
		{name: "same user as plugin", user: "me", lookup: lookup, uid: 1000},
		{name: "root switches", user: "alice", lookup: lookup, uid: 0,
			want: &credential{UID: 1234, GID: 1235, Home: "/home/alice", Name: "alice"}},
		{name: "non-root cannot switch", user: "alice", lookup: lookup, uid: 1000, target: ErrNotPermitted, anError: true},
		{name: "unknown", user: "bob", lookup: lookup, uid: 0, target: ErrUnknownUser, anError: true},
		{name: "lookup failure", user: "bob", lookup: failing, uid: 0, anError: true},
		{name: "non-numeric uid", user: "weird", lookup: lookup, uid: 0, anError: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveUser(tc.user, tc.lookup, tc.uid)
			if !tc.anError {
				must.NoError(t, err)
				if tc.want != nil && got != nil {
					got.Groups = nil // host-dependent
				}
				must.Eq(t, tc.want, got)
				return
			}
			must.Error(t, err)
			if tc.target != nil {
				must.ErrorIs(t, err, tc.target)
			}
		})
	}
}

// TestRunAsOtherUser runs the worker and an Exec as "nobody"; it needs root.
func TestRunAsOtherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	f := newFixture(t)
	// The worker chdirs to the task dir as nobody.
	must.NoError(t, os.Chmod(f.dir, 0o755))
	must.NoError(t, os.Chmod(filepath.Dir(f.dir), 0o755))
	cfg := f.config("unused")
	cfg.Command, cfg.Args = "sh", []string{"-c", "echo uid $(id -u); echo ready; exec sleep 60"}
	cfg.User = "nobody"
	task := startTask(t, cfg)
	must.Eq(t, "uid "+nobody.Uid, expectLine(t, f.outLines, "uid "))
	out, _, code, err := task.Exec(context.Background(), []string{"id", "-u"}, 10*time.Second)
	must.NoError(t, err)
	must.Eq(t, 0, code)
	must.Eq(t, nobody.Uid+"\n", string(out))
	// The plugin (root) still signals and stops it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must.NoError(t, task.Stop(ctx, syscall.SIGTERM, 5*time.Second))
	must.Eq(t, int(syscall.SIGTERM), waitTask(t, task).Signal)
}
