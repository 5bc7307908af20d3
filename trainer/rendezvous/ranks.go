package rendezvous

import (
	"fmt"
	"sort"
)

// NoRankHint is the RankHint of a member without a preferred rank.
const NoRankHint = -1

// Member is one worker of a gang as the others see it.
type Member struct {
	// ID is unique within a run (an allocation ID, "local-<index>").
	ID string `json:"id"`
	// Node names the machine; members sharing it get local ranks.
	Node string `json:"node"`
	// Addr is the host:port the worker's collectives listen on.
	Addr string `json:"addr"`
	// RankHint is the rank the member would like, or NoRankHint. Hints are
	// honoured when they are in range and not claimed by another member.
	RankHint int `json:"rank_hint"`
}

// Assignment is a member's place in a completed generation.
type Assignment struct {
	Generation     uint64
	Rank           int
	WorldSize      int
	LocalRank      int // rank among the members on the same node
	LocalWorldSize int // members on the same node
	NodeRank       int // nodes ordered by their smallest rank
	NumNodes       int
	Peers          []Member // index = rank
}

// AssignRanks orders members by rank: result[r] is the member of rank r.
// Distinct in-range hints are honoured; when several members hint the same
// rank, the smallest ID wins. The rest fill the free ranks in ascending
// order, sorted by (node, ID) so that members of one node sit together.
// The result depends only on the set of members, not on their order.
func AssignRanks(members []Member) []Member {
	n := len(members)
	sorted := append([]Member(nil), members...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	out := make([]Member, n)
	taken := make([]bool, n)
	var rest []Member
	for _, m := range sorted {
		if h := m.RankHint; h >= 0 && h < n && !taken[h] {
			out[h], taken[h] = m, true
			continue
		}
		rest = append(rest, m)
	}
	sort.SliceStable(rest, func(i, j int) bool {
		if rest[i].Node != rest[j].Node {
			return rest[i].Node < rest[j].Node
		}
		return rest[i].ID < rest[j].ID
	})
	r := 0
	for _, m := range rest {
		for taken[r] {
			r++
		}
		out[r], taken[r] = m, true
	}
	return out
}

// NewAssignment computes the Assignment of member id among peers, which are
// in rank order.
func NewAssignment(generation uint64, peers []Member, id string) (Assignment, error) {
	a := Assignment{Generation: generation, Rank: -1, WorldSize: len(peers), Peers: peers}
	nodeRank := make(map[string]int)
	for r, p := range peers {
		if _, ok := nodeRank[p.Node]; !ok {
			nodeRank[p.Node] = len(nodeRank)
		}
		if p.ID == id {
			a.Rank = r
		}
	}
	if a.Rank < 0 {
		return Assignment{}, fmt.Errorf("member %q is not among the peers of generation %d", id, generation)
	}
	node := peers[a.Rank].Node
	for r, p := range peers {
		if p.Node != node {
			continue
		}
		if r < a.Rank {
			a.LocalRank++
		}
		a.LocalWorldSize++
	}
	a.NodeRank = nodeRank[node]
	a.NumNodes = len(nodeRank)
	return a, nil
}
