package external

import (
	"net"
	"strconv"
	"testing"

	"github.com/shoenig/test/must"
)

// The torch store's port comes from its range, below the ephemeral one
// that outgoing connections draw from, and is free on every address.
func TestFreePortInRange(t *testing.T) {
	for range 10 {
		port, err := FreePort()
		must.NoError(t, err)
		must.Between(t, torchPortLow, port, torchPortHigh-1)
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		must.NoError(t, err)
		ln.Close()
	}
}

// A candidate that something listens on is passed over; when none is
// free the error says so.
func TestPickPortSkipsPortsInUse(t *testing.T) {
	held, err := net.Listen("tcp", ":0")
	must.NoError(t, err)
	defer held.Close()
	busy := held.Addr().(*net.TCPAddr).Port
	spare, err := net.Listen("tcp", ":0")
	must.NoError(t, err)
	free := spare.Addr().(*net.TCPAddr).Port
	spare.Close()

	candidates := []int{busy, busy, free}
	port, err := pickPort(func() int { p := candidates[0]; candidates = candidates[1:]; return p })
	must.NoError(t, err)
	must.EqOp(t, free, port)

	_, err = pickPort(func() int { return busy })
	must.ErrorContains(t, err, "64 tried")
}
