package workerenv

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestLoadConsulOutageGrace(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
		bad   bool
	}{{"", 2 * time.Minute, false}, {"30s", 30 * time.Second, false}, {"soon", 0, true}, {"-1s", 0, true}} {
		t.Run(tc.value, func(t *testing.T) {
			e, err := Load(env(map[string]string{RunName: "r", ConsulOutageGrace: tc.value}))
			if tc.bad {
				must.ErrorContains(t, err, ConsulOutageGrace)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, e.ConsulOutageGrace)
		})
	}
}
