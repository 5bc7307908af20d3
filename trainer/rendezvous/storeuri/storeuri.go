package storeuri

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
)

// Schemes Open knows.
const (
	SchemeEmbedded = "embedded"
	SchemeConsul   = "consul"
)

// ConsulConfig reads a "consul://[host:port][/key/prefix/]" URI: the agent
// address (empty: CONSUL_HTTP_ADDR, else 127.0.0.1:8500) and the key prefix
// (empty: consulstore.DefaultPrefix). The ACL token is never in the URI; it
// comes from CONSUL_HTTP_TOKEN.
func ConsulConfig(uri string) (consulstore.Config, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return consulstore.Config{}, fmt.Errorf("parse %q: %w", uri, err)
	}
	if u.Scheme != SchemeConsul {
		return consulstore.Config{}, fmt.Errorf("%q: scheme %q is not consul", uri, u.Scheme)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return consulstore.Config{}, fmt.Errorf("%q: want consul://[host:port][/key/prefix/] (the token comes from CONSUL_HTTP_TOKEN)", uri)
	}
	cfg := consulstore.Config{Address: u.Host}
	// The escaped path, so a prefix from NomadJobURI reads back unchanged.
	if p := strings.TrimLeft(u.EscapedPath(), "/"); p != "" {
		if !strings.HasSuffix(p, "/") {
			p += "/"
		}
		cfg.Prefix = p
	}
	return cfg, nil
}

// NomadJobPrefix is the Consul key prefix of the workers of one Nomad job:
// "nomad-train/<namespace>/<job>/" (an empty namespace is "default"; both
// parts path-escaped). Keying by job rather than by run name keeps two jobs
// apart that share a run name: the trials of two experiments, or one run
// submitted in two namespaces.
func NomadJobPrefix(namespace, jobID string) string {
	if namespace == "" {
		namespace = "default"
	}
	return consulstore.DefaultPrefix + url.PathEscape(namespace) + "/" + url.PathEscape(jobID) + "/"
}

// NomadJobURI is the consul:// URI whose store uses NomadJobPrefix, on the
// agent that CONSUL_HTTP_ADDR names.
func NomadJobURI(namespace, jobID string) string {
	return SchemeConsul + ":///" + NomadJobPrefix(namespace, jobID)
}

// Open connects to the rendezvous store uri names:
//
//   - "embedded://host:port": the embedded store a launcher serves,
//     authenticated with secret (rendezvous.Open);
//   - "consul://[host:port][/key/prefix/]": Consul KV and sessions
//     (consulstore), checked with one request to the agent; secret is not
//     used (Consul's ACL token is).
func Open(ctx context.Context, uri string, secret []byte, logger hclog.Logger) (rendezvous.Store, error) {
	if !strings.HasPrefix(uri, SchemeConsul+":") {
		return rendezvous.Open(ctx, uri, secret, logger)
	}
	cfg, err := ConsulConfig(uri)
	if err != nil {
		return nil, fmt.Errorf("open rendezvous store: %w", err)
	}
	cfg.Logger = logger
	// One client per process, shared with RegisterHealth: a host full of
	// workers stays under the agent's per-client connection limit.
	if cfg.Client, err = consulstore.SharedClient(cfg.Address); err != nil {
		return nil, fmt.Errorf("open rendezvous store: %w", err)
	}
	st, err := consulstore.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open rendezvous store: %w", err)
	}
	if err := st.Ping(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("open rendezvous store %s: %w", uri, err)
	}
	return st, nil
}

// Heartbeat is a worker's liveness signal as the runtime sees it: Beat
// from the training loop (never blocks), Close on exit.
type Heartbeat interface {
	// Beat records that the training loop reached step.
	Beat(step int64)
	// Waiting keeps the worker healthy, with reason as what it is doing,
	// until done is called (consulstore.Heartbeat).
	Waiting(reason string) (done func())
	// Close stops the heartbeat and withdraws what it registered.
	Close(ctx context.Context) error
}

// HealthSpec describes the worker's health service.
type HealthSpec struct {
	Service string // service name, e.g. "nomad-train"
	ID      string // unique per worker, e.g. "<run>-<alloc id>"
	Addr    string
	Port    int
	TTL     time.Duration // how long without a beat before critical
	Tags    []string
	Meta    map[string]string
}

// RegisterHealth starts the worker's heartbeat for the store uri names: on
// Consul an agent service with a TTL check (consulstore.Health); for the
// embedded store a no-op, since the launcher watches its own processes.
func RegisterHealth(ctx context.Context, uri string, spec HealthSpec, logger hclog.Logger) (Heartbeat, error) {
	if !strings.HasPrefix(uri, SchemeConsul+":") {
		return nopHeartbeat{}, nil
	}
	cfg, err := ConsulConfig(uri)
	if err != nil {
		return nil, fmt.Errorf("register worker health: %w", err)
	}
	client, err := consulstore.SharedClient(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("register worker health: %w", err)
	}
	h := consulstore.NewHealth(client, consulstore.HealthOptions{Tags: spec.Tags, Meta: spec.Meta, Logger: logger})
	if err := h.Register(ctx, spec.Service, spec.ID, spec.Addr, spec.Port, spec.TTL); err != nil {
		return nil, fmt.Errorf("register worker health: %w", err)
	}
	return &consulHeartbeat{Health: h}, nil
}

type nopHeartbeat struct{}

func (nopHeartbeat) Beat(int64)                  {}
func (nopHeartbeat) Waiting(string) func()       { return func() {} }
func (nopHeartbeat) Close(context.Context) error { return nil }

type consulHeartbeat struct{ *consulstore.Health }

func (c *consulHeartbeat) Close(ctx context.Context) error { return c.Deregister(ctx) }
