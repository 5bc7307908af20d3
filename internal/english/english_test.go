package english

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 restarts"}, {1, "1 restart"}, {2, "2 restarts"}, {-1, "-1 restarts"}} {
		if got := Count(c.n, "restart", "restarts"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Plural(1, "trial", "trials"); got != "trial" {
		t.Errorf("Plural(1) = %q", got)
	}
}
