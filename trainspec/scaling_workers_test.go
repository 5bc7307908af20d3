package trainspec

import (
	"testing"

	"github.com/shoenig/test/must"
)

// validate and run say an elastic gang's range, not only its most.
func TestScalingWorkers(t *testing.T) {
	for _, c := range []struct {
		s    Scaling
		want string
	}{
		{Scaling{NumWorkers: 1}, "1 worker"},
		{Scaling{NumWorkers: 4}, "4 workers"},
		{Scaling{NumWorkers: 4, MinWorkers: 2}, "2 to 4 workers"},
		{Scaling{NumWorkers: 4, MinWorkers: 4}, "4 workers"},
	} {
		must.Eq(t, c.want, c.s.Workers())
	}
}
