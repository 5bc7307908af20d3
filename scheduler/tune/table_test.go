package tune

import (
	"testing"

	"github.com/shoenig/test/must"
)

// A config prints on one line as key=value with sorted keys, each value
// as results.csv writes it: numbers in full, strings as they are, lists
// and maps as JSON.
func TestFormatConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"empty", map[string]any{}, ""},
		{"scalars", map[string]any{"lr": 0.0123456789, "batch_size": 16, "act": "relu", "bias": true},
			"act=relu batch_size=16 bias=true lr=0.0123456789"},
		{"nested", map[string]any{"opt": map[string]any{"lr": 0.1, "momentum": 0.9}, "layers": []any{8, 4}},
			`layers=[8,4] opt={"lr":0.1,"momentum":0.9}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must.EqOp(t, tc.want, FormatConfig(tc.cfg))
		})
	}
}
