package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/hashicorp/go-hclog"
)

// ErrBackendNotBuilt is returned by Open for a store backend this build
// does not have yet.
var ErrBackendNotBuilt = errors.New("rendezvous backend not built yet")

// Open connects to the store named by uri:
//
//   - "embedded://host:port": the embedded store a launcher serves (Dial);
//   - "consul://...": Consul KV and sessions (not built yet: ErrBackendNotBuilt).
func Open(ctx context.Context, uri string, secret []byte, logger hclog.Logger) (Store, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("open rendezvous store: parse %q: %w", uri, err)
	}
	switch u.Scheme {
	case "embedded":
		if u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("open rendezvous store: %q: want embedded://host:port", uri)
		}
		c, err := Dial(ctx, u.Host, secret, logger)
		if err != nil {
			return nil, fmt.Errorf("open rendezvous store: %w", err)
		}
		return c, nil
	case "consul":
		return nil, fmt.Errorf("open rendezvous store %q: %w (consul store comes in a later issue)", uri, ErrBackendNotBuilt)
	}
	return nil, fmt.Errorf("open rendezvous store: %q: unknown scheme %q (want embedded:// or consul://)", uri, u.Scheme)
}
