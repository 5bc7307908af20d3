package collective

import (
	"context"
	"fmt"
	"net"
	"time"
)

// AllReduceFloat32 reduces buf across all ranks in place with op. Every rank
// ends with bit-identical contents. Every rank must pass the same length.
func (g *Group) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	return allReduce(ctx, g, buf, op)
}

// AllReduceFloat64 reduces buf across all ranks in place with op. Every rank
// ends with bit-identical contents. Every rank must pass the same length.
func (g *Group) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	return allReduce(ctx, g, buf, op)
}

// allReduce runs the ring schedule of ringPlan: sends and receives stream
// in chunks, at most window in flight each way, while this goroutine adds
// each received chunk into buf (the writer sends chunk i+1 and the reader
// receives chunk i+2 meanwhile). On little-endian hosts payloads go out of
// and come into buf's own memory; reduce-scatter chunks land in reused
// scratch space first.
func allReduce[T float](ctx context.Context, g *Group, buf []T, op Op) error {
	if op != Sum && op != Mean {
		return fmt.Errorf("collective: unknown op %d", op)
	}
	seq, err := g.begin(ctx)
	if err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	defer g.opMu.Unlock()
	if g.size == 1 {
		return nil
	}
	esz := sizeOf[T]()
	p := newRingPlan(len(buf), g.size, g.rank, g.chunkBytes/esz)
	maxChunk := segment(len(buf), g.size, 0).sub(p.chunks, 0).len() * esz
	scratch := g.scratchBytes(window * maxChunk)
	var staging []byte
	if g.portable {
		staging = g.stagingBytes(window * maxChunk)
	}
	raw := asBytes(buf)
	slot := func(space []byte, k, n int) []byte {
		off := (k % window) * maxChunk
		return space[off : off+n]
	}
	sendBytes := func(k int) []byte {
		s := p.send(k)
		if !g.portable {
			return raw[s.lo*esz : s.hi*esz]
		}
		b := slot(staging, k, s.len()*esz)
		encodeLE(b, buf[s.lo:s.hi])
		return b
	}
	recvBytes := func(k int) []byte {
		s := p.recv(k)
		if p.reduces(k) || g.portable {
			return slot(scratch, k, s.len()*esz)
		}
		return raw[s.lo*esz : s.hi*esz]
	}
	apply := func(k int, data []byte) {
		s := p.recv(k)
		dst := buf[s.lo:s.hi]
		switch {
		case p.reduces(k) && g.portable:
			addLE(dst, data)
		case p.reduces(k):
			addTo(dst, asElems[T](data))
		case g.portable:
			decodeLE(dst, data)
		}
		if op == Mean && p.completes(k) {
			divide(dst, g.size)
		}
	}

	m := p.messages()
	err = g.pump(ctx, exchange{
		sends:     m,
		recvs:     m,
		sendReady: func(k, recvsDone int) bool { return p.sendAfterRecv(k) < recvsDone },
		recvReady: func(k, sendsDone int) bool { return p.recvAfterSend(k) < sendsDone },
		inline:    m*maxChunk <= g.inlineMax,
		send:      func(k int) sendReq { return sendFrame(kindAllReduce, seq, k, sendBytes(k)) },
		recv: func(k int) recvReq {
			r := recvFrame(kindAllReduce, seq, k, recvBytes(k))
			// What would land in scratch can be used where it arrives.
			r.view = p.reduces(k) || g.portable
			return r
		},
		got: func(k int, data []byte) { apply(k, data) },
	})
	if err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	return nil
}

// Broadcast copies root's buf into every rank's buf, in place. Every rank
// must pass the same length. The bytes flow around the ring in chunks, each
// rank forwarding a chunk as soon as it has it.
func (g *Group) Broadcast(ctx context.Context, buf []byte, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("collective: broadcast root %d is out of range", root)
	}
	seq, err := g.begin(ctx)
	if err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	defer g.opMu.Unlock()
	if g.size == 1 {
		return nil
	}
	p := newChainPlan(len(buf), g.size, g.rank, root, g.chunkBytes)
	var sends, recvs int
	if p.sends {
		sends = p.chunks
	}
	if p.recvs {
		recvs = p.chunks
	}
	err = g.pump(ctx, exchange{
		sends: sends,
		recvs: recvs,
		// A forwarding rank sends chunk k once it has received it.
		sendReady: func(k, recvsDone int) bool { return !p.recvs || k < recvsDone },
		inline:    len(buf) <= inlineBytes,
		send: func(k int) sendReq {
			c := p.chunk(k)
			return sendFrame(kindBroadcast, seq, k, buf[c.lo:c.hi])
		},
		recv: func(k int) recvReq {
			c := p.chunk(k)
			return recvFrame(kindBroadcast, seq, k, buf[c.lo:c.hi])
		},
	})
	if err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	return nil
}

// BroadcastFloat32 copies root's buf into every rank's buf, in place.
func (g *Group) BroadcastFloat32(ctx context.Context, buf []float32, root int) error {
	if !g.portable {
		return g.Broadcast(ctx, asBytes(buf), root)
	}
	b := make([]byte, 4*len(buf))
	encodeLE(b, buf)
	if err := g.Broadcast(ctx, b, root); err != nil {
		return err
	}
	decodeLE(buf, b)
	return nil
}

// AllGather returns every rank's in, indexed by rank (out[Rank] is a copy
// of in). Lengths may differ between ranks.
func (g *Group) AllGather(ctx context.Context, in []byte) ([][]byte, error) {
	if len(in) > maxFrame {
		return nil, fmt.Errorf("collective: all-gather block of %d bytes exceeds %d", len(in), maxFrame)
	}
	mine := make([]byte, len(in))
	copy(mine, in)
	out, err := g.gather(ctx, kindAllGather, mine)
	if err != nil {
		return nil, fmt.Errorf("all-gather: %w", err)
	}
	return out, nil
}

// Barrier returns once every rank has called it.
func (g *Group) Barrier(ctx context.Context) error {
	if _, err := g.gather(ctx, kindBarrier, nil); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// gather is the ring all-gather: at step s each rank sends the block it
// got at step s-1 (its own at step 0) and receives the next one. Barrier
// gathers empty blocks: having every rank's block means every rank arrived.
func (g *Group) gather(ctx context.Context, what kind, mine []byte) ([][]byte, error) {
	seq, err := g.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer g.opMu.Unlock()
	out := make([][]byte, g.size)
	out[g.rank] = mine
	steps := g.size - 1
	err = g.pump(ctx, exchange{
		sends:     steps,
		recvs:     steps,
		sendReady: func(k, recvsDone int) bool { return k <= recvsDone },
		// Other ranks' blocks have sizes unknown here: only barriers are
		// surely small enough to run inline.
		inline: what == kindBarrier && g.inlineMax > 0,
		send:   func(k int) sendReq { return sendFrame(what, seq, k, out[gatherSend(g.rank, g.size, k)]) },
		recv: func(k int) recvReq {
			if what == kindBarrier {
				return recvFrame(what, seq, k, nil)
			}
			return recvAny(what, seq, k)
		},
		got: func(k int, data []byte) { out[gatherRecv(g.rank, g.size, k)] = data },
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// exchange describes one collective's messages to pump: how many this rank
// sends to rank+1 and receives from rank-1 (each in index order), when each
// may start, and what to do with them.
type exchange struct {
	sends, recvs int
	// sendReady reports whether send k may start once recvsDone receives
	// were handled; nil means at once.
	sendReady func(k, recvsDone int) bool
	// recvReady reports whether receive k may be posted once sendsDone
	// sends finished; nil means at once.
	recvReady func(k, sendsDone int) bool
	send      func(k int) sendReq      // the frame of send k
	recv      func(k int) recvReq      // what receive k expects
	got       func(k int, data []byte) // handle receive k; nil ignores it
	// inline says everything this rank sends fits in the socket buffers
	// (inlineBytes), so the caller's goroutine may do the I/O itself.
	inline bool
}

// inlineBytes bounds what one rank sends in a collective run inline: far
// below the smallest socket send buffer Linux grants, so no write blocks on
// a peer that is itself writing.
const inlineBytes = 64 << 10

// pump runs an exchange to the end, keeping at most window sends and
// window receives in flight, so the writer, the reader and this goroutine
// (which handles each received chunk) all work at once.
func (g *Group) pump(ctx context.Context, x exchange) error {
	if x.inline {
		return g.pumpInline(ctx, x)
	}
	var sp, sd, rp, rd int // sends posted, sends done, receives posted, receives done
	for sd < x.sends || rd < x.recvs {
		for sp < x.sends && sp-sd < window && (x.sendReady == nil || x.sendReady(sp, rd)) {
			g.sendq <- x.send(sp)
			sp++
		}
		for rp < x.recvs && rp-rd < window && (x.recvReady == nil || x.recvReady(rp, sd)) {
			g.recvq <- x.recv(rp)
			rp++
		}
		ev, err := g.await(ctx)
		if err != nil {
			return err
		}
		if ev.sent {
			sd++
			continue
		}
		if err := g.deliver(x, rd, ev.got); err != nil {
			g.fail(err)
			return g.failure() // the first failure: maybe a Close that broke the credit write
		}
		rd++
	}
	return nil
}

// pumpInline runs a small exchange on the caller's goroutine: writes go
// out at once (they fit in the socket buffers), reads block in order. It
// saves the goroutine hand-offs that dominate a small collective's time.
// The writer and reader goroutines are idle meanwhile (a streamed
// collective ends only when all its frames are done), so each socket still
// has one user at a time.
func (g *Group) pumpInline(ctx context.Context, x exchange) error {
	// Cancelling ctx wakes a blocked read or write through its deadline.
	stop := context.AfterFunc(ctx, func() {
		g.prev.SetReadDeadline(time.Now())
		g.next.SetWriteDeadline(time.Now())
	})
	defer stop()
	var hb [headerSize]byte
	vec := make(net.Buffers, 0, 2)
	var sp, rd int // sends done, receives done
	for sp < x.sends || rd < x.recvs {
		progressed := false
		for sp < x.sends && (x.sendReady == nil || x.sendReady(sp, rd)) {
			if err := g.writeFrame(&vec, x.send(sp)); err != nil {
				return g.abort(ctx, err)
			}
			sp++
			progressed = true
		}
		if rd < x.recvs && (x.recvReady == nil || x.recvReady(rd, sp)) {
			got, err := g.readFrame(&hb, x.recv(rd))
			if err == nil {
				err = g.deliver(x, rd, got)
			}
			if err != nil {
				return g.abort(ctx, err)
			}
			rd++
			progressed = true
		}
		if !progressed {
			return g.abort(ctx, fmt.Errorf("%w: schedule stalled at send %d, receive %d", ErrProtocol, sp, rd))
		}
	}
	return nil
}

// deliver hands receive k to the exchange, then releases its shared slot
// if it was read in place.
func (g *Group) deliver(x exchange, k int, r received) error {
	if x.got != nil {
		x.got(k, r.data)
	}
	if r.held {
		return g.release(r.msg)
	}
	return nil
}

// abort fails the group after an inline I/O error and returns what the
// collective should: the context's error if it ended, else the failure.
func (g *Group) abort(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return g.abandon(ctx)
	}
	g.fail(err)
	return g.failure()
}
