package executor

import (
	"errors"
	"os/user"
	"testing"

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
