package storeuri_test

import (
	"strings"
	"testing"

	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
)

// FuzzConsulConfig: the URI comes from the environment a job spec sets.
// Whatever it is, parsing must not panic, and a prefix it accepts is a
// relative key path ending in a slash.
func FuzzConsulConfig(f *testing.F) {
	for _, s := range []string{"consul://", "consul://h:8500/ml/rdzv", "consul:///a/b/", "consul://u:p@h", "consul://h?x=1", "embedded://h:1", "consul://[::1]:8500/x", "consul:////x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		cfg, err := storeuri.ConsulConfig(uri)
		if err != nil {
			return
		}
		if cfg.Prefix != "" && (strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/")) {
			t.Fatalf("%q: prefix %q is not a relative path ending in a slash", uri, cfg.Prefix)
		}
	})
}
