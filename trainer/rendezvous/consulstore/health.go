package consulstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Heartbeat is what the training runtime calls to show progress; it does
// not block and needs no Consul import. *Health implements it.
type Heartbeat interface {
	// Beat records that step was reached.
	Beat(step int64)
	// Waiting keeps the check passing, with reason as its output, until
	// done is called: for waits that take no steps and are bounded on
	// their own (the rendezvous, which has its timeout). Beats take over
	// again after done.
	Waiting(reason string) (done func())
}

// DefaultDeregisterAfter is how long a worker's service may stay critical
// before the agent removes it (Consul's smallest effective value is 1m).
const DefaultDeregisterAfter = 10 * time.Minute

// ErrRegistered is returned by Register on a Health already registered.
var ErrRegistered = errors.New("health service already registered")

// HealthOptions configure NewHealth.
type HealthOptions struct {
	// Tags and Meta go on the service (e.g. the run name and rank, for
	// Health().Service filters).
	Tags []string
	Meta map[string]string
	// DeregisterAfter removes a service critical for that long (default
	// DefaultDeregisterAfter): cleanup for a worker that died without
	// Deregister. It is not failure detection; the TTL check is.
	DeregisterAfter time.Duration
	// RequestTimeout bounds registering and deregistering (default
	// DefaultRequestTimeout), so that an agent that stopped answering
	// cannot hold a worker's start or exit.
	RequestTimeout time.Duration
	// Clock paces the updates (default: wall clock); tests drive it.
	Clock rendezvous.Clock
	// Logger (default: none).
	Logger hclog.Logger
}

// Health registers a worker's own Consul agent service with a TTL check and
// keeps the check passing while the training loop beats. Nomad job services
// cannot carry TTL checks, so the worker does it: a hung worker (alive
// process, no steps) turns critical one TTL after its last beat. Beat is
// cheap and never blocks; a goroutine sends at most one update per TTL/3,
// and only when a beat came since the last update. An update that fails
// (an agent restarted without its services, or unreachable) makes the next
// one register the service again first, so a worker's check comes back
// with the agent.
type Health struct {
	agent *capi.Agent
	opts  HealthOptions

	step    atomic.Int64
	lost    atomic.Bool            // the agent may have forgotten the service (Reregister)
	waiting atomic.Pointer[string] // the reason, while Waiting
	beats   chan struct{}          // capacity 1: a pending beat
	turned  chan struct{}          // capacity 1: a wait began or ended

	mu sync.Mutex
	// guarded by mu:
	serviceID string
	stop      context.CancelFunc
	done      chan struct{} // closed when the update loop ends
}

var _ Heartbeat = (*Health)(nil)

// NewHealth returns an unregistered Health on client.
func NewHealth(client *capi.Client, opts HealthOptions) *Health {
	if opts.DeregisterAfter <= 0 {
		opts.DeregisterAfter = DefaultDeregisterAfter
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Clock == nil {
		opts.Clock = rendezvous.RealClock{}
	}
	return &Health{agent: client.Agent(), opts: opts, beats: make(chan struct{}, 1), turned: make(chan struct{}, 1)}
}

// CheckID names the TTL check of the service id.
func CheckID(id string) string { return "service:" + id + ":progress" }

// Register registers service id (named service, reachable at addr:port)
// with the local agent, with a TTL check that starts passing and turns
// critical ttl after the last update (Consul times a TTL check from its
// registration, whatever its first status). Re-registering replaces the
// checks. It starts the update loop.
func (h *Health) Register(ctx context.Context, service, id, addr string, port int, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("register health service %s: ttl %v is not positive", id, ttl)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		return fmt.Errorf("register health service %s: %w", id, ErrRegistered)
	}
	check := CheckID(id)
	reg := &capi.AgentServiceRegistration{
		ID:      id,
		Name:    service,
		Tags:    h.opts.Tags,
		Meta:    h.opts.Meta,
		Address: addr,
		Port:    port,
		Check: &capi.AgentServiceCheck{
			CheckID:                        check,
			Name:                           "training progress",
			TTL:                            ttl.String(),
			Status:                         capi.HealthPassing,
			DeregisterCriticalServiceAfter: h.opts.DeregisterAfter.String(),
		},
	}
	if err := h.register(ctx, reg); err != nil {
		return err
	}
	lctx, stop := context.WithCancel(context.Background())
	h.serviceID, h.stop, h.done = id, stop, make(chan struct{})
	go h.loop(lctx, reg, max(ttl/3, time.Millisecond), h.done)
	return nil
}

// register registers reg with the agent, replacing its checks.
func (h *Health) register(ctx context.Context, reg *capi.AgentServiceRegistration) error {
	rctx, cancel := context.WithTimeout(ctx, h.opts.RequestTimeout)
	defer cancel()
	opts := capi.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(rctx)
	if err := h.agent.ServiceRegisterOpts(reg, opts); err != nil {
		return fmt.Errorf("register health service %s: %w", reg.ID, err)
	}
	return nil
}

// Beat implements Heartbeat: it records step and wakes the update loop.
func (h *Health) Beat(step int64) {
	h.step.Store(step)
	poke(h.beats)
}

// Waiting implements Heartbeat. The check says so at once, and the first
// beat after done at once too, whatever the pace of updates.
func (h *Health) Waiting(reason string) (done func()) {
	h.waiting.Store(&reason)
	poke(h.turned)
	return func() {
		if h.waiting.CompareAndSwap(&reason, nil) {
			poke(h.turned)
		}
	}
}

// Reregister makes the next update register the service again first, and
// comes sooner than the pace of updates: for a caller that learned the
// agent restarted empty (the rendezvous store found its keys gone).
func (h *Health) Reregister() {
	h.lost.Store(true)
	poke(h.turned)
}

// poke sends on ch, a channel of capacity 1, unless a send is pending.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loop sends one passing update per beat, at most one per every, and one
// every every while Waiting, until ctx ends; a wait that begins or ends
// cuts the pause short. A failed update is logged (once, until one
// succeeds again), and the next one, at most healthRetry later, registers
// the service again first: an agent that restarted empty (a dev agent, a
// client agent) has forgotten it. An unreachable agent lets the check
// expire, which is the truth meanwhile.
func (h *Health) loop(ctx context.Context, reg *capi.AgentServiceRegistration, every time.Duration, done chan struct{}) {
	defer close(done)
	check := reg.Check.CheckID
	logger := h.opts.Logger.Named("health").With("check", check)
	tick := make(chan struct{}, 1)
	stale := false // the last update failed
	for {
		if h.waiting.Load() == nil {
			select {
			case <-h.beats:
			case <-h.turned:
				continue // a wait began (or one ended): look again
			case <-ctx.Done():
				return
			}
		}
		select { // this update shows the wait as it is now
		case <-h.turned:
		default:
		}
		output := fmt.Sprintf("step %d", h.step.Load())
		if reason := h.waiting.Load(); reason != nil {
			output = *reason
		}
		if (h.lost.Swap(false) || stale) && h.register(ctx, reg) == nil {
			logger.Info("registered the health service again after a failed update")
		}
		uctx, cancel := context.WithTimeout(ctx, every)
		err := h.agent.UpdateTTLOpts(check, output, capi.HealthPassing, (&capi.QueryOptions{}).WithContext(uctx))
		cancel()
		if err != nil && !stale && ctx.Err() == nil {
			logger.Warn("heartbeat update failed; retrying", "output", output, "error", err)
		}
		stale = err != nil
		pause := every
		if stale {
			pause = min(every, healthRetry)
		}
		t := h.opts.Clock.AfterFunc(pause, func() { poke(tick) })
		select {
		case <-tick:
		case <-h.turned:
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
		select { // a tick that raced a turn
		case <-tick:
		default:
		}
	}
}

// healthRetry is the longest pause after a failed update.
const healthRetry = time.Second

// Deregister stops the update loop and removes the service and its check
// from the agent. It is a no-op on a Health not registered.
func (h *Health) Deregister(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		return nil
	}
	h.stop()
	<-h.done
	id := h.serviceID
	h.stop, h.done, h.serviceID = nil, nil, ""
	dctx, cancel := context.WithTimeout(ctx, h.opts.RequestTimeout)
	defer cancel()
	if err := h.agent.ServiceDeregisterOpts(id, (&capi.QueryOptions{}).WithContext(dctx)); err != nil {
		return fmt.Errorf("deregister health service %s: %w", id, err)
	}
	return nil
}
