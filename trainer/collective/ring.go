package collective

// This file holds the pure schedule of the ring collectives: which part of
// the buffer each rank sends and receives at each step, and which messages
// must finish before another may start. It does no I/O; group.go drives
// sockets with it.

// span is the half-open element range [lo, hi) of a buffer.
type span struct{ lo, hi int }

func (s span) len() int { return s.hi - s.lo }

// segment returns part i when n elements are split into parts near-equal
// parts: the first n%parts parts hold one element more than the others.
// It works for any n >= 0, including n < parts (some parts are empty).
func segment(n, parts, i int) span {
	q, r := n/parts, n%parts
	lo := i*q + min(i, r)
	hi := lo + q
	if i < r {
		hi++
	}
	return span{lo, hi}
}

// sub returns part i of s split into parts near-equal parts.
func (s span) sub(parts, i int) span {
	p := segment(s.len(), parts, i)
	return span{s.lo + p.lo, s.lo + p.hi}
}

// mod returns a mod n in [0, n).
func mod(a, n int) int { return ((a % n) + n) % n }

// ringPlan is one rank's schedule for a ring all-reduce of n elements among
// size ranks: a reduce-scatter of size-1 steps, then an all-gather of size-1
// steps. Each step moves one of the size segments; each segment is cut into
// the same number of chunks, so a step is chunks messages. Messages are
// numbered k = step*chunks + chunk across both phases (steps 0..size-2 are
// the reduce-scatter, size-1..2size-3 the all-gather). Every rank sends
// message k to rank+1 and receives message k from rank-1, in order of k.
//
// Segment j is reduced along the ring in one fixed order, starting at rank j:
// ((x_j + x_{j+1}) + x_{j+2}) + ... ; rank j-1 completes it and the all-gather
// copies those bits to every rank, so all ranks end with identical bits.
type ringPlan struct {
	n, size, rank int
	chunks        int // chunks per segment (>= 1)
}

// newRingPlan makes the plan for rank of size over n elements, with chunks of
// at most chunkElems elements.
func newRingPlan(n, size, rank, chunkElems int) ringPlan {
	chunkElems = max(chunkElems, 1)
	maxSeg := (n + size - 1) / size
	chunks := max(1, (maxSeg+chunkElems-1)/chunkElems)
	return ringPlan{n: n, size: size, rank: rank, chunks: chunks}
}

// messages is how many messages the rank sends (and receives) in all.
func (p ringPlan) messages() int { return 2 * (p.size - 1) * p.chunks }

// reduceSteps is the number of reduce-scatter messages; messages before it
// are reduced into the buffer, the rest overwrite it.
func (p ringPlan) reduceMessages() int { return (p.size - 1) * p.chunks }

func (p ringPlan) stepChunk(k int) (step, chunk int) { return k / p.chunks, k % p.chunks }

// sendSeg is the segment the rank sends in message k.
func (p ringPlan) sendSeg(k int) int {
	step, _ := p.stepChunk(k)
	if step < p.size-1 {
		return mod(p.rank-step, p.size) // reduce-scatter: forward the partial sum
	}
	return mod(p.rank+1-(step-(p.size-1)), p.size) // all-gather: forward the final value
}

// recvSeg is the segment the rank receives in message k.
func (p ringPlan) recvSeg(k int) int {
	step, _ := p.stepChunk(k)
	if step < p.size-1 {
		return mod(p.rank-step-1, p.size)
	}
	return mod(p.rank-(step-(p.size-1)), p.size)
}

func (p ringPlan) chunkOf(seg, k int) span {
	_, c := p.stepChunk(k)
	return segment(p.n, p.size, seg).sub(p.chunks, c)
}

// send is the element range the rank sends in message k.
func (p ringPlan) send(k int) span { return p.chunkOf(p.sendSeg(k), k) }

// recv is the element range the rank receives in message k.
func (p ringPlan) recv(k int) span { return p.chunkOf(p.recvSeg(k), k) }

// reduces reports whether received message k is added into the buffer
// (reduce-scatter) rather than copied over it (all-gather).
func (p ringPlan) reduces(k int) bool { return k < p.reduceMessages() }

// completes reports whether receiving message k leaves its range fully
// reduced on this rank (the last reduce-scatter step): the place to apply
// a final scaling such as Mean's division, once, before the all-gather.
func (p ringPlan) completes(k int) bool {
	step, _ := p.stepChunk(k)
	return step == p.size-2
}

// sendAfterRecv is the received message that must be processed before
// message k may be sent (it produces the range k sends), or -1.
func (p ringPlan) sendAfterRecv(k int) int {
	if k < p.chunks {
		return -1
	}
	return k - p.chunks
}

// recvAfterSend is the sent message that must have left the buffer before
// message k may be received into it (k overwrites the range that message
// sent), or -1. Reduce-scatter messages arrive in scratch space, not the
// buffer, so they wait for nothing.
func (p ringPlan) recvAfterSend(k int) int {
	if p.reduces(k) {
		return -1
	}
	return k - p.reduceMessages()
}

// chainPlan is a rank's part in a pipelined broadcast of n bytes from root:
// the bytes travel root -> root+1 -> ... -> root-1 in chunks of at most
// chunkBytes, each rank forwarding chunk c as soon as it has it.
type chainPlan struct {
	n, chunks int
	recvs     bool // receives from rank-1 (every rank but root)
	sends     bool // sends to rank+1 (every rank but root-1)
}

func newChainPlan(n, size, rank, root, chunkBytes int) chainPlan {
	chunkBytes = max(chunkBytes, 1)
	d := mod(rank-root, size)
	return chainPlan{
		n:      n,
		chunks: max(1, (n+chunkBytes-1)/chunkBytes),
		recvs:  d != 0,
		sends:  d != size-1,
	}
}

// chunk is the byte range of chunk c.
func (p chainPlan) chunk(c int) span { return segment(p.n, p.chunks, c) }

// gatherSend is the block (rank index) a rank sends at step s of a ring
// all-gather among size ranks: its own at step 0, then the one it received
// at step s-1.
func gatherSend(rank, size, s int) int { return mod(rank-s, size) }

// gatherRecv is the block a rank receives at step s of a ring all-gather.
func gatherRecv(rank, size, s int) int { return mod(rank-s-1, size) }
