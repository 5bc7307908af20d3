package rendezvous_test

import (
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

func m(id, node string, hint int) rendezvous.Member {
	return rendezvous.Member{ID: id, Node: node, Addr: id + ":1", RankHint: hint}
}

const none = rendezvous.NoRankHint

func ids(ms []rendezvous.Member) []string {
	out := make([]string, len(ms))
	for i, x := range ms {
		out[i] = x.ID
	}
	return out
}

func TestAssignRanks(t *testing.T) {
	cases := []struct {
		name    string
		members []rendezvous.Member
		want    []string // IDs in rank order
	}{
		{"no hints: by node then ID",
			[]rendezvous.Member{m("d", "n1", none), m("c", "n0", none), m("b", "n1", none), m("a", "n0", none)},
			[]string{"a", "c", "b", "d"}},
		{"all hints honoured",
			[]rendezvous.Member{m("a", "n0", 2), m("b", "n0", 0), m("c", "n0", 1)},
			[]string{"b", "c", "a"}},
		{"duplicate hint: smallest ID wins, loser fills",
			[]rendezvous.Member{m("z", "n0", 0), m("y", "n0", 0), m("x", "n0", none)},
			[]string{"y", "x", "z"}},
		{"out of range hints ignored",
			[]rendezvous.Member{m("a", "n0", 7), m("b", "n0", -5), m("c", "n0", 1)},
			[]string{"a", "c", "b"}},
		{"free ranks filled around hints",
			[]rendezvous.Member{m("a", "n0", none), m("b", "n0", 1), m("c", "n0", none), m("d", "n0", 3)},
			[]string{"a", "b", "c", "d"}},
		{"zero value hints: one gets 0",
			[]rendezvous.Member{{ID: "q"}, {ID: "p"}, {ID: "r"}},
			[]string{"p", "q", "r"}},
		{"single", []rendezvous.Member{m("solo", "", none)}, []string{"solo"}},
		{"empty", nil, []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := rendezvous.AssignRanks(tc.members)
			must.Eq(t, tc.want, ids(got))
		})
	}
}

// The result depends on the set of members, not on the order they joined.
func TestAssignRanksOrderIndependent(t *testing.T) {
	base := []rendezvous.Member{
		m("a", "n1", none), m("b", "n0", 3), m("c", "n2", 3), m("d", "n0", none),
		m("e", "n1", 0), m("f", "n2", 9), m("g", "n0", none),
	}
	want := ids(rendezvous.AssignRanks(base))
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		shuffled := append([]rendezvous.Member(nil), base...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		must.Eq(t, want, ids(rendezvous.AssignRanks(shuffled)))
	}
}

func TestNewAssignment(t *testing.T) {
	// Ranks 0..5 on nodes B, A, B, C, A, B: node ranks B=0, A=1, C=2.
	peers := []rendezvous.Member{
		m("r0", "B", none), m("r1", "A", none), m("r2", "B", none),
		m("r3", "C", none), m("r4", "A", none), m("r5", "B", none),
	}
	cases := []struct {
		id                                                      string
		rank, localRank, localWorld, nodeRank, worldSize, nodes int
	}{
		{"r0", 0, 0, 3, 0, 6, 3},
		{"r1", 1, 0, 2, 1, 6, 3},
		{"r2", 2, 1, 3, 0, 6, 3},
		{"r3", 3, 0, 1, 2, 6, 3},
		{"r4", 4, 1, 2, 1, 6, 3},
		{"r5", 5, 2, 3, 0, 6, 3},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			a, err := rendezvous.NewAssignment(7, peers, tc.id)
			must.NoError(t, err)
			must.Eq(t, rendezvous.Assignment{
				Generation: 7, Rank: tc.rank, WorldSize: tc.worldSize, LocalRank: tc.localRank,
				LocalWorldSize: tc.localWorld, NodeRank: tc.nodeRank, NumNodes: tc.nodes, Peers: peers,
			}, a)
		})
	}
	_, err := rendezvous.NewAssignment(7, peers, "stranger")
	must.Error(t, err)
}
