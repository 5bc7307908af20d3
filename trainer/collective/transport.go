package collective

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Transport chooses how bulk data moves between ring neighbours.
type Transport int

const (
	// TransportAuto moves bulk data through shared memory when both ends
	// of a ring connection are on the same host and TCP otherwise (the
	// default).
	TransportAuto Transport = iota
	// TransportTCP moves everything over the ring's TCP connections.
	TransportTCP
)

// ParseTransport reads a Transport setting: "", "auto" or "shm" for
// TransportAuto, "tcp" for TransportTCP.
func ParseTransport(s string) (Transport, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto", "shm":
		return TransportAuto, nil
	case "tcp":
		return TransportTCP, nil
	}
	return 0, fmt.Errorf("collective: unknown transport %q (want auto, shm or tcp)", s)
}

func (t Transport) String() string {
	switch t {
	case TransportAuto:
		return "auto"
	case TransportTCP:
		return "tcp"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// sameHost decides from an offer whether the answer agrees to shared
// memory: both sides want it and name the same, known host.
func sameHost(want bool, myHost string, offer transportMsg) bool {
	return want && offer.OK && myHost != "" && offer.Host == myHost
}

// sendMsg and recvMsg move one transport message; the caller has set the
// connection's deadline.
func sendMsg(conn net.Conn, m transportMsg) error {
	b := m.encode()
	if _, err := conn.Write(b[:]); err != nil {
		return fmt.Errorf("send transport message: %w", err)
	}
	return nil
}

func recvMsg(conn net.Conn, want msgType) (transportMsg, error) {
	var b [transportSize]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return transportMsg{}, fmt.Errorf("read transport message: %w", err)
	}
	m, err := decodeTransport(b[:])
	if err != nil {
		return transportMsg{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if m.Type != want {
		return transportMsg{}, fmt.Errorf("%w: transport message type %d, want %d", ErrProtocol, m.Type, want)
	}
	return m, nil
}

// transportSetup is one rank's side of the agreement on both its ring
// connections.
type transportSetup struct {
	want      bool   // this rank allows shared memory
	host      string // this host's identity; "" when unknown
	dir       string // where shared files are made
	slotBytes int
	timeout   time.Duration
	log       hclog.Logger
}

// hostIfWanted is the host identity to tell a peer: none unless this
// side allows shared memory.
func (s *transportSetup) hostIfWanted() string {
	if !s.want {
		return ""
	}
	return s.host
}

// offer runs the dialer's side on conn (to rank+1): it returns the sending
// end of a shared region, or nil for TCP. Only a broken connection or a
// peer breaking the protocol is an error; anything that merely prevents
// shared memory means TCP.
func (s *transportSetup) offer(conn net.Conn) (out *shmOut, err error) {
	if err := conn.SetDeadline(time.Now().Add(s.timeout)); err != nil {
		return nil, fmt.Errorf("set transport deadline: %w", err)
	}
	defer conn.SetDeadline(time.Time{})
	if err := sendMsg(conn, transportMsg{Type: msgOffer, OK: s.want, Host: s.hostIfWanted()}); err != nil {
		return nil, err
	}
	ans, err := recvMsg(conn, msgAnswer)
	if err != nil || !ans.OK {
		if err == nil && s.want {
			s.log.Debug("next rank declined shared memory, using TCP", "peer_host", ans.Host, "host", s.host)
		}
		return nil, err
	}
	size := regionBytes(shmSlots, s.slotBytes)
	var nonce [32]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand panics instead)
	mem, f, err := createRegion(s.dir, size)
	if err != nil {
		s.log.Debug("shared memory unavailable, using TCP", "error", err)
		return nil, sendMsg(conn, transportMsg{Type: msgRegion})
	}
	// The file goes as soon as the peer has it mapped (or gave up), so no
	// exit path leaves it behind.
	path := f.Name()
	defer func() {
		os.Remove(path)
		f.Close()
	}()
	defer func() {
		if out == nil {
			unmap(mem)
		}
	}()
	writeRegionHeader(mem, nonce)
	err = sendMsg(conn, transportMsg{Type: msgRegion, OK: true, Slots: shmSlots, SlotBytes: uint32(s.slotBytes), Nonce: nonce, Path: path})
	if err != nil {
		return nil, err
	}
	ack, err := recvMsg(conn, msgAck)
	if err != nil || !ack.OK {
		return nil, err
	}
	return newShmOut(mem, shmSlots, s.slotBytes), nil
}

// answer runs the acceptor's side on conn (from rank-1): it returns the
// receiving end of the peer's shared region, or nil for TCP.
func (s *transportSetup) answer(conn net.Conn) (*shmIn, error) {
	if err := conn.SetDeadline(time.Now().Add(s.timeout)); err != nil {
		return nil, fmt.Errorf("set transport deadline: %w", err)
	}
	defer conn.SetDeadline(time.Time{})
	off, err := recvMsg(conn, msgOffer)
	if err != nil {
		return nil, err
	}
	agree := sameHost(s.want, s.host, off)
	if err := sendMsg(conn, transportMsg{Type: msgAnswer, OK: agree, Host: s.hostIfWanted()}); err != nil || !agree {
		if err == nil && s.want && off.OK {
			s.log.Debug("peer is on another host, using TCP", "peer_host", off.Host, "host", s.host)
		}
		return nil, err
	}
	reg, err := recvMsg(conn, msgRegion)
	if err != nil || !reg.OK {
		return nil, err
	}
	mem, err := s.mapRegion(reg)
	if err != nil {
		s.log.Debug("cannot map the peer's shared memory, using TCP", "path", reg.Path, "error", err)
		return nil, sendMsg(conn, transportMsg{Type: msgAck})
	}
	if err := sendMsg(conn, transportMsg{Type: msgAck, OK: true}); err != nil {
		unmap(mem)
		return nil, err
	}
	return newShmIn(mem, int(reg.Slots), int(reg.SlotBytes)), nil
}

// mapRegion maps the region a peer announced, checks it is the one it
// announced, and removes its file.
func (s *transportSetup) mapRegion(reg transportMsg) ([]byte, error) {
	slots, slotBytes := int(reg.Slots), int(reg.SlotBytes)
	if slots != shmSlots || slotBytes != s.slotBytes {
		return nil, fmt.Errorf("region of %d slots of %d bytes, want %d of %d", slots, slotBytes, shmSlots, s.slotBytes)
	}
	mem, err := openRegion(reg.Path, regionBytes(slots, slotBytes))
	if err != nil {
		return nil, err
	}
	if err := checkRegion(mem, reg.Nonce, slots, slotBytes); err != nil {
		unmap(mem)
		return nil, err
	}
	os.Remove(reg.Path)
	return mem, nil
}

// agree runs the agreement on both ring connections at once
// (each rank is the dialer of one and the acceptor of the other, so doing
// them in turn would wait around the ring).
func (s *transportSetup) agree(ctx context.Context, next, prev net.Conn) (*shmOut, *shmIn, error) {
	stop := context.AfterFunc(ctx, func() {
		next.Close()
		prev.Close()
	})
	defer stop()
	var (
		out         *shmOut
		in          *shmIn
		errOut, err error
		wg          sync.WaitGroup
	)
	// A failure on one connection fails the ring: close both, so the
	// other agreement stops now rather than at its deadline.
	wg.Go(func() {
		if out, errOut = s.offer(next); errOut != nil {
			next.Close()
			prev.Close()
		}
	})
	if in, err = s.answer(prev); err != nil {
		next.Close()
		prev.Close()
	}
	wg.Wait()
	// The failure that closed both connections, not the read it cut short.
	if err == nil || (errOut != nil && errors.Is(err, net.ErrClosed)) {
		err = errOut
	}
	if err != nil {
		if out != nil {
			unmap(out.mem)
		}
		if in != nil {
			unmap(in.mem)
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		// A ring connection broke: its peer is gone, as for a collective.
		return nil, nil, fmt.Errorf("agree on transport: %w: %v", ErrPeerLost, err)
	}
	return out, in, nil
}
