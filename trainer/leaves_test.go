package trainer

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// After an agreed stop a member leaves when it was asked to stop itself
// (at the vote or since) or when every member was (the whole job is
// stopping); otherwise it stays for the next generation.
func TestLeavesAfterAgreedStop(t *testing.T) {
	cases := []struct {
		name       string
		leaving    []bool
		rank       int
		askedSince bool
		want       bool
	}{
		{"asked at the vote", []bool{false, true, false}, 1, false, true},
		{"not asked", []bool{false, true, false}, 0, false, false},
		{"not asked, last rank", []bool{false, true, false}, 2, false, false},
		{"everyone asked", []bool{true, true, true}, 0, false, true},
		{"asked after the vote", []bool{false, true, false}, 2, true, true},
		{"gang of one", []bool{true}, 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must.Eq(t, c.want, leaves(c.leaving, c.rank, c.askedSince))
		})
	}
}

func TestLeavingIDs(t *testing.T) {
	a := rendezvous.Assignment{Peers: []rendezvous.Member{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	must.Eq(t, []string{"a", "c"}, leavingIDs(a, []bool{true, false, true}))
	must.SliceEmpty(t, leavingIDs(a, nil))
}
