// Package collective is the communication layer between the worker
// processes of one training gang: ring all-reduce, broadcast, all-gather and
// barrier over TCP, the Go counterpart of torch.distributed with Gloo.
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
// is in wire.go.
//
// Example, on every rank of a gang of size n after the rendezvous:
//
//	ln, _ := net.Listen("tcp", ":0") // advertise ln.Addr() via the rendezvous
//	g, err := collective.New(ctx, collective.Config{
//		Rank: rank, Size: n, Listener: ln, Peers: addrs,
//		Secret: secret, Generation: gen,
//	})
//	if err != nil {
//		return err
//	}
//	defer g.Close()
//	if err := g.AllReduceFloat32(ctx, grads, collective.Mean); errors.Is(err, collective.ErrPeerLost) {
//		// rejoin the next generation and reload the last checkpoint
//	}
package collective
