package workerenv

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestFailureBudget(t *testing.T) {
	cases := []struct {
		name        string
		gen, first  uint64
		stops, lost int
		max, used   int
		exhausted   bool
	}{
		{name: "first generation", gen: 1, first: 1, max: 0, used: 0},
		{name: "one gang failure within budget", gen: 2, first: 1, max: 1, used: 1},
		{name: "one gang failure, no budget", gen: 2, first: 1, max: 0, used: 1, exhausted: true},
		{name: "later attempt counts from its first generation", gen: 7, first: 6, max: 1, used: 1},
		{name: "store behind the attempt record", gen: 3, first: 5, max: 0, used: 0},
		{name: "agreed stops are no failures", gen: 4, first: 1, stops: 2, max: 1, used: 1},
		{name: "processes lost before joining count", gen: 2, first: 1, lost: 3, max: 3, used: 4, exhausted: true},
		{name: "lost before the gang first formed", gen: 1, first: 1, lost: 2, max: 2, used: 2},
		{name: "unlimited", gen: 100, first: 1, lost: 100, max: -1, used: 199},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			used := FailuresUsed(c.gen, c.first, c.stops, c.lost)
			must.Eq(t, c.used, used)
			must.Eq(t, c.exhausted, BudgetExhausted(used, c.max))
		})
	}
}
