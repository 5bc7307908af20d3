package collective

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

func TestSegment(t *testing.T) {
	cases := []struct {
		n, parts int
		want     []span
	}{
		{0, 3, []span{{0, 0}, {0, 0}, {0, 0}}},
		{2, 3, []span{{0, 1}, {1, 2}, {2, 2}}},
		{7, 3, []span{{0, 3}, {3, 5}, {5, 7}}},
		{9, 3, []span{{0, 3}, {3, 6}, {6, 9}}},
		{5, 1, []span{{0, 5}}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.parts), func(t *testing.T) {
			var got []span
			for i := range tc.parts {
				got = append(got, segment(tc.n, tc.parts, i))
			}
			must.Eq(t, tc.want, got)
		})
	}
	// Any n and parts: contiguous cover of [0, n), sizes within one.
	for n := 0; n < 60; n++ {
		for parts := 1; parts <= 8; parts++ {
			lo, small, big := 0, n, 0
			for i := range parts {
				s := segment(n, parts, i)
				must.Eq(t, lo, s.lo)
				lo = s.hi
				small, big = min(small, s.len()), max(big, s.len())
			}
			must.Eq(t, n, lo)
			must.LessEq(t, 1, big-small)
		}
	}
}

// The segment each rank sends and receives at each step, for 3 ranks and
// one chunk per segment, written out by hand.
func TestRingPlanSegments(t *testing.T) {
	want := map[int]struct{ send, recv []int }{
		// reduce-scatter 2 steps, then all-gather 2 steps
		0: {[]int{0, 2, 1, 0}, []int{2, 1, 0, 2}},
		1: {[]int{1, 0, 2, 1}, []int{0, 2, 1, 0}},
		2: {[]int{2, 1, 0, 2}, []int{1, 0, 2, 1}},
	}
	for rank, w := range want {
		p := newRingPlan(9, 3, rank, 100)
		must.Eq(t, 4, p.messages())
		var send, recv []int
		for k := range p.messages() {
			send = append(send, p.sendSeg(k))
			recv = append(recv, p.recvSeg(k))
		}
		must.Eq(t, w.send, send, must.Sprintf("rank %d sends", rank))
		must.Eq(t, w.recv, recv, must.Sprintf("rank %d receives", rank))
	}
}

func TestRingPlanChunks(t *testing.T) {
	cases := []struct {
		n, size, chunkElems, chunks int
	}{
		{0, 4, 8, 1},
		{3, 4, 8, 1},
		{64, 2, 8, 4},
		{65, 2, 8, 5}, // segments of 33 and 32 elements
		{1 << 20, 4, 1 << 16, 4},
	}
	for _, tc := range cases {
		p := newRingPlan(tc.n, tc.size, 0, tc.chunkElems)
		must.Eq(t, tc.chunks, p.chunks, must.Sprintf("%+v", tc))
		for k := range p.messages() {
			must.LessEq(t, tc.chunkElems, p.send(k).len())
		}
	}
}

// planCases are the shapes the pure tests sweep.
func planCases(f func(n, size, chunkElems int)) {
	for size := 1; size <= 6; size++ {
		for _, n := range []int{0, 1, 2, size - 1, size, size + 1, 7, 13, 31, 64} {
			for _, ce := range []int{1, 2, 3, 5, 1000} {
				f(max(n, 0), size, ce)
			}
		}
	}
}

// Simulating the schedule without I/O: each element is a list of the ranks
// whose contributions it holds, in the order they were added. At the end
// every rank holds, for every element of segment j, the contributions
// j, j+1, ..., j-1: one fixed order, the same bits everywhere.
func TestRingPlanSimulated(t *testing.T) {
	planCases(func(n, size, ce int) {
		bufs := make([][][]int, size)
		plans := make([]ringPlan, size)
		for r := range size {
			plans[r] = newRingPlan(n, size, r, ce)
			bufs[r] = make([][]int, n)
			for i := range n {
				bufs[r][i] = []int{r}
			}
		}
		for k := range plans[0].messages() {
			// Every rank sends message k to rank+1 at once, then receives.
			msgs := make([][][]int, size)
			for r, p := range plans {
				s := p.send(k)
				msgs[mod(r+1, size)] = clone2(bufs[r][s.lo:s.hi])
			}
			for r, p := range plans {
				s := p.recv(k)
				if s.len() != len(msgs[r]) {
					t.Fatalf("n=%d size=%d k=%d: sent and received lengths differ", n, size, k)
				}
				for i, v := range msgs[r] {
					if p.reduces(k) {
						// The receiver adds its own value to the incoming partial sum.
						bufs[r][s.lo+i] = append(slices.Clone(v), bufs[r][s.lo+i]...)
					} else {
						bufs[r][s.lo+i] = v
					}
				}
			}
		}
		for r := range size {
			for j := range size {
				s := segment(n, size, j)
				want := make([]int, size)
				for i := range want {
					want[i] = mod(j+i, size)
				}
				for i := s.lo; i < s.hi; i++ {
					if !slices.Equal(want, bufs[r][i]) {
						t.Fatalf("n=%d size=%d ce=%d rank %d element %d: contributions %v, want %v", n, size, ce, r, i, bufs[r][i], want)
					}
				}
			}
		}
	})
}

func clone2(x [][]int) [][]int {
	out := make([][]int, len(x))
	for i := range x {
		out[i] = slices.Clone(x[i])
	}
	return out
}

// The dependencies the plan declares are enough: with sends and receives
// each in order, a receive that writes a range never races a send that
// reads it, and a send only reads a range once it holds its final value for
// that step.
func TestRingPlanHazards(t *testing.T) {
	planCases(func(n, size, ce int) {
		for rank := range size {
			p := newRingPlan(n, size, rank, ce)
			m := p.messages()
			for k := range m {
				// What send k reads was produced by the receive it waits for.
				if d := p.sendAfterRecv(k); d >= 0 && p.recv(d) != p.send(k) {
					t.Fatalf("n=%d size=%d rank %d: send %d reads %v, but receive %d produced %v", n, size, rank, k, p.send(k), d, p.recv(d))
				} else if d < 0 && p.sendSeg(k) != rank {
					t.Fatalf("n=%d size=%d rank %d: first send %d reads segment %d, not its own", n, size, rank, k, p.sendSeg(k))
				}
				for j := range m {
					if !overlap(p.recv(k), p.send(j)) {
						continue
					}
					// Receive k writes the range (all-gather) or adds into it
					// (reduce-scatter). Send j must be done before receive k
					// is posted, or wait for a receive at or after k.
					after := p.sendAfterRecv(j) >= k
					before := j <= p.recvAfterSend(k)
					if !before && !after {
						t.Fatalf("n=%d size=%d ce=%d rank %d: receive %d and send %d race", n, size, ce, rank, k, j)
					}
				}
			}
		}
	})
}

func overlap(a, b span) bool { return a.len() > 0 && b.len() > 0 && a.lo < b.hi && b.lo < a.hi }

func TestChainPlan(t *testing.T) {
	cases := []struct {
		n, size, rank, root, chunk int
		want                       chainPlan
	}{
		{10, 3, 0, 0, 4, chainPlan{n: 10, chunks: 3, recvs: false, sends: true}},
		{10, 3, 1, 0, 4, chainPlan{n: 10, chunks: 3, recvs: true, sends: true}},
		{10, 3, 2, 0, 4, chainPlan{n: 10, chunks: 3, recvs: true, sends: false}},
		{10, 3, 0, 1, 4, chainPlan{n: 10, chunks: 3, recvs: true, sends: false}},
		{0, 2, 1, 0, 4, chainPlan{n: 0, chunks: 1, recvs: true, sends: false}},
	}
	for _, tc := range cases {
		must.Eq(t, tc.want, newChainPlan(tc.n, tc.size, tc.rank, tc.root, tc.chunk), must.Sprintf("%+v", tc))
	}
}

// The all-gather schedule delivers every block to every rank.
func TestGatherSchedule(t *testing.T) {
	for size := 1; size <= 7; size++ {
		have := make([]map[int]bool, size)
		for r := range size {
			have[r] = map[int]bool{r: true}
		}
		for s := range size - 1 {
			for r := range size {
				sent := gatherSend(r, size, s)
				must.True(t, have[r][sent], must.Sprintf("size %d step %d: rank %d sends block %d it lacks", size, s, r, sent))
				must.Eq(t, sent, gatherRecv(mod(r+1, size), size, s))
			}
			for r := range size {
				have[r][gatherRecv(r, size, s)] = true
			}
		}
		for r := range size {
			must.MapLen(t, size, have[r])
		}
	}
}
