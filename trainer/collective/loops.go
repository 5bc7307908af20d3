package collective

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The ring's sockets: one goroutine owns each (writeLoop the connection to
// the next rank, readLoop the one from the previous rank), and the frames
// they move, over TCP or through the shared-memory ring.

// writeFrame writes one frame to next: header and the first piece of the
// payload in one writev, each piece within the timeout.
func (g *Group) writeFrame(vec *net.Buffers, r sendReq) error {
	first := min(len(r.payload), ioPiece)
	*vec = append((*vec)[:0], r.hdr[:], r.payload[:first])
	err := g.next.SetWriteDeadline(time.Now().Add(g.timeout))
	if err == nil {
		_, err = vec.WriteTo(g.next)
	}
	for rest := r.payload[first:]; err == nil && len(rest) > 0; {
		n := min(len(rest), ioPiece)
		if err = g.next.SetWriteDeadline(time.Now().Add(g.timeout)); err == nil {
			_, err = g.next.Write(rest[:n])
		}
		rest = rest[n:]
	}
	if err != nil {
		return peerLost("send to", g.nextRank(), err)
	}
	return nil
}

// readFull reads len(b) bytes from prev, each piece within the timeout.
func (g *Group) readFull(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), ioPiece)
		if err := g.prev.SetReadDeadline(time.Now().Add(g.timeout)); err != nil {
			return err
		}
		if _, err := io.ReadFull(g.prev, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFrame reads one frame from prev, checks its header against what the
// schedule predicts and reads the payload straight into the requested
// buffer (or a new one of the announced length). A payload in the shared
// region is copied from its slot, or handed over in place when the
// request allows a view.
func (g *Group) readFrame(hb *[headerSize]byte, r recvReq) (received, error) {
	if err := g.readFull(hb[:]); err != nil {
		return received{}, peerLost("receive from", g.prevRank(), err)
	}
	h, err := decodeHeader(hb[:])
	if err == nil {
		err = h.expect(r.kind, r.seq, r.part, r.length)
	}
	if err != nil {
		return received{}, fmt.Errorf("%w: frame from rank %d: %v", ErrProtocol, g.prevRank(), err)
	}
	dst := r.dst
	if r.alloc {
		dst = make([]byte, h.Length)
	}
	if h.Flags&flagShared == 0 {
		if err := g.readFull(dst); err != nil {
			return received{}, peerLost("receive from", g.prevRank(), err)
		}
		return received{data: dst}, nil
	}
	if g.in == nil {
		return received{}, fmt.Errorf("%w: rank %d sent a shared-memory frame without a shared region", ErrProtocol, g.prevRank())
	}
	data, msg, err := g.in.take(int(h.Length))
	if err != nil {
		return received{}, fmt.Errorf("%w: frame from rank %d: %v", ErrProtocol, g.prevRank(), err)
	}
	if r.view {
		return received{data: data, held: true, msg: msg}, nil
	}
	copy(dst, data)
	if err := g.release(msg); err != nil {
		return received{}, err
	}
	return received{data: dst}, nil
}

// release returns slot msg of the shared region from prev and, when that
// frees the oldest held slots, tells prev with a credit.
func (g *Group) release(msg uint64) error {
	g.creditMu.Lock()
	defer g.creditMu.Unlock()
	n, moved := g.in.release(msg)
	if !moved {
		return nil
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	err := g.prev.SetWriteDeadline(time.Now().Add(g.timeout))
	if err == nil {
		_, err = g.prev.Write(b[:])
	}
	if err != nil {
		return peerLost("send credit to", g.prevRank(), err)
	}
	return nil
}

// writeShared sends one frame whose payload fits a slot of the shared
// region to next: it waits (within the timeout) for a free slot, copies
// the payload into it and sends the header alone on the stream.
func (g *Group) writeShared(r sendReq) error {
	o := g.out
	if o.full() {
		t := time.NewTimer(g.timeout)
		defer t.Stop()
		for o.full() {
			select {
			case <-o.credit:
			case <-o.gone:
				return peerLost("send to", g.nextRank(), errors.New("connection closed while waiting for a free slot"))
			case <-g.dead:
				return g.failure()
			case <-t.C:
				return peerLost("send to", g.nextRank(), fmt.Errorf("no free slot within %v", g.timeout))
			}
		}
	}
	copy(o.next(), r.payload)
	o.posted.Add(1)
	r.hdr[3] |= flagShared // the flags byte
	err := g.next.SetWriteDeadline(time.Now().Add(g.timeout))
	if err == nil {
		_, err = g.next.Write(r.hdr[:])
	}
	if err != nil {
		return peerLost("send to", g.nextRank(), err)
	}
	return nil
}

// writeLoop owns writes to next during streamed collectives.
func (g *Group) writeLoop() {
	defer g.wg.Done()
	vec := make(net.Buffers, 0, 2)
	for {
		var r sendReq
		select {
		case <-g.dead:
			return
		case r = <-g.sendq:
		}
		var err error
		if g.out != nil && g.out.fits(len(r.payload)) {
			err = g.writeShared(r)
		} else {
			err = g.writeFrame(&vec, r)
		}
		if err != nil {
			g.fail(err)
			return
		}
		select {
		case g.sent <- struct{}{}:
		case <-g.dead:
			return
		}
	}
}

// readLoop owns reads from prev during streamed collectives.
func (g *Group) readLoop() {
	defer g.wg.Done()
	var hb [headerSize]byte
	for {
		var r recvReq
		select {
		case <-g.dead:
			return
		case r = <-g.recvq:
		}
		got, err := g.readFrame(&hb, r)
		if err != nil {
			g.fail(err)
			return
		}
		select {
		case g.recvd <- got:
		case <-g.dead:
			return
		}
	}
}

// watchNext reads the socket we only write to, to notice its peer going
// away while we are idle. An orderly close (EOF) is left to the writer: a
// peer that finished its last collective and closed is not a failure unless
// we still have something to send it, and then the write fails. A reset
// means the peer went away with data unread: fail at once.
func (g *Group) watchNext() {
	defer g.wg.Done()
	if g.out != nil {
		g.readCredits()
		return
	}
	var b [1]byte
	n, err := g.next.Read(b[:])
	select {
	case <-g.dead:
		return
	default:
	}
	switch {
	case n > 0:
		g.fail(fmt.Errorf("%w: rank %d sent data on the wrong connection", ErrProtocol, g.nextRank()))
	case errors.Is(err, io.EOF):
		g.log.Debug("next rank closed its connection", "peer", g.nextRank())
	default:
		g.fail(peerLost("connection to", g.nextRank(), err))
	}
}

// readCredits reads the credits next sends back for the shared region
// until the connection ends. Like watchNext, it leaves an orderly close
// to the writer (which fails if it still needs a slot) and fails the group
// on a reset.
func (g *Group) readCredits() {
	defer close(g.out.gone)
	var b [8]byte
	for {
		_, err := io.ReadFull(g.next, b[:])
		if err != nil {
			select {
			case <-g.dead:
			default:
				if errors.Is(err, io.EOF) {
					g.log.Debug("next rank closed its connection", "peer", g.nextRank())
				} else {
					g.fail(peerLost("connection to", g.nextRank(), err))
				}
			}
			return
		}
		if err := g.out.granted(binary.LittleEndian.Uint64(b[:])); err != nil {
			g.fail(fmt.Errorf("%w: rank %d: %v", ErrProtocol, g.nextRank(), err))
			return
		}
	}
}
