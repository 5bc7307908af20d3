// Package collective is the communication layer between the worker
// processes of one training gang: ring all-reduce, broadcast, all-gather and
// barrier over TCP (with shared memory for the bulk data of ranks on one
// host), the Go counterpart of torch.distributed with Gloo.
//
// Each rank dials rank+1 and accepts rank-1 (authenticated with the run's
// secret, then a hello naming rank, gang size and rendezvous generation);
// every collective moves data one way around that ring. Each socket has one
// owner goroutine per direction: a writer that sends framed chunks to rank+1,
// a reader that receives them from rank-1 straight into the destination
// buffer, while the caller's goroutine adds received chunks into place. So a
// large all-reduce streams: the reduce-scatter and all-gather are cut into
// chunks (DefaultChunkBytes) with several in flight each way.
//
// Between ranks on the same host, bulk data skips loopback TCP. Right after
// the hello the two ends of each ring connection compare host identities
// (the kernel's boot id) and, when both allow it, the dialing side creates
// a file in /dev/shm (else the temporary directory), reserves its space and
// maps it; the accepting side maps it too, checks a nonce the dialer sent
// over the authenticated connection (so a same-named file in another mount
// namespace is never used) and the file is removed at once. Once the ring
// has formed no exit path, SIGKILL included, can leave a file behind (only
// a dialer killed in the milliseconds between creating the file and its
// peer mapping it would), and Close unmaps the regions. The sender then copies each chunk
// straight into the next free slot of that ring and sends only the frame
// header on the TCP connection; the receiver adds reduce-scatter chunks
// into its buffer straight from the slot and sends the slot back as a
// credit. The TCP connection still carries every wake-up, every deadline
// and every failure, so nothing spins and a dead peer is ErrPeerLost as
// before. Small collectives (at most 64 KiB) stay on TCP. Results are the
// same bits either way. Config.Transport = TransportTCP (ParseTransport
// reads it from a setting: "tcp") turns shared memory off; a peer on
// another host, or a region that cannot be made or mapped, falls back to
// TCP for that connection with a debug log, never an error.
//
// All-reduce results are bit-identical on every rank: each element is summed
// in one fixed order around the ring by the rank that completes it, and the
// all-gather copies those bits to the others.
//
// Failures are loud and bounded: every network wait has Config.Timeout, and
// a rank that sees an error closes both its sockets, so the failure runs
// around the ring in milliseconds and every survivor's collective returns an
// error matching ErrPeerLost. A Group is unusable after an error; form a new
// one in the next rendezvous generation.
//
// The schedule (ring.go) is pure and tested without sockets; the wire format
// is in wire.go, the shared-memory ring in shm.go and its agreement in
// transport.go.
//
// Example, on every rank of a gang of size n after the rendezvous:
//
//	ln, _ := net.Listen("tcp", ":0") // advertise ln.Addr() via the rendezvous
//	transport, err := collective.ParseTransport(setting) // "auto" or "tcp"
//	if err != nil {
//		return err
//	}
//	g, err := collective.New(ctx, collective.Config{
//		Rank: rank, Size: n, Listener: ln, Peers: addrs,
//		Secret: secret, Generation: gen, Transport: transport,
//	})
//	if err != nil {
//		return err
//	}
//	defer g.Close()
//	if err := g.AllReduceFloat32(ctx, grads, collective.Mean); errors.Is(err, collective.ErrPeerLost) {
//		// rejoin the next generation and reload the last checkpoint
//	}
package collective
