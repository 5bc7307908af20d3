// Package testport finds ports for tests that stand in for the ones a
// Nomad client assigns to a task.
package testport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// Unused returns a port in 15000-19999 that nothing listens on now. The
// range is below Linux's ephemeral ports (32768 and up), so no outgoing
// connection is given it before the test's process binds it, as none is
// given a port Nomad reserved.
func Unused(t testing.TB) int {
	t.Helper()
	for range 64 {
		port := 15000 + rand.IntN(5000)
		if ln, err := net.Listen("tcp", ":"+strconv.Itoa(port)); err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no free port in 15000-19999 (64 tried)")
	return 0
}
